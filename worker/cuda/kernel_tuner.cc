#include "worker/cuda/kernel_tuner.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/step_kernels.h"
#include "worker/trace.h"

namespace strata::worker {

std::string matvec_shape_text(const MatvecShape& s) {
  return absl::StrCat(std::string(ggml_type_info(s.type).name), " ", s.n_in, "x", s.n_out);
}

std::string tuning_key(const std::string& device) {
  char hash[17];
  const char* source = cuda_kernels::kMatvecSource;
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(fnv1a64(source, std::strlen(source))));
  return absl::StrCat(device, "; matvec.cuh ", hash);
}

std::string default_tuner_path() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "";
  return absl::StrCat(home, "/.cache/strata/cuda-tuner.json");
}

MatvecTuner::MatvecTuner(std::string path, std::string key)
    : path_(std::move(path)), key_(std::move(key)) {}

void MatvecTuner::load() {
  entries_.clear();
  measured_ = 0;
  if (path_.empty()) return;
  std::ifstream in(path_);
  if (!in) return;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() ||
      j["key"].get<std::string>() != key_ || !j.contains("matvec") || !j["matvec"].is_object()) {
    return;
  }
  for (const auto& [shape, v] : j["matvec"].items()) {
    if (!v.is_object() || !v.contains("row_warps") || !v["row_warps"].is_number_integer()) continue;
    const int w = v["row_warps"].get<int>();
    bool known = false;
    for (int k : cuda_kernels::kStepRowWarps) known = known || k == w;
    if (!known) continue;
    Entry e;
    e.row_warps = w;
    if (v.contains("ms") && v["ms"].is_array()) {
      for (const auto& t : v["ms"]) {
        if (t.is_number()) e.ms.push_back(t.get<double>());
      }
    }
    entries_[shape] = std::move(e);
  }
}

absl::Status MatvecTuner::save() const {
  if (path_.empty()) return absl::OkStatus();
  nlohmann::json j;
  j["key"] = key_;
  j["matvec"] = nlohmann::json::object();
  for (const auto& [shape, e] : entries_) {
    j["matvec"][shape] = {{"row_warps", e.row_warps}, {"ms", e.ms}};
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  const std::string tmp = path_ + ".tmp";
  bool written = false;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    out.flush();
    written = static_cast<bool>(out);
  }
  if (written) std::filesystem::rename(tmp, path_, ec);
  if (!written || ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);  // no temporary left behind
    return absl::InternalError(written ? absl::StrCat("renaming ", tmp, ": ", ec.message())
                                       : absl::StrCat("writing ", tmp, " failed"));
  }
  return absl::OkStatus();
}

std::optional<int> MatvecTuner::find(const MatvecShape& shape) const {
  auto it = entries_.find(matvec_shape_text(shape));
  if (it == entries_.end()) return std::nullopt;
  return it->second.row_warps;
}

int MatvecTuner::record(const MatvecShape& shape, const std::vector<double>& times_ms) {
  size_t best = 0;
  for (size_t i = 1; i < times_ms.size() && i < cuda_kernels::kStepRowWarps.size(); ++i) {
    if (times_ms[i] < times_ms[best]) best = i;
  }
  Entry e;
  e.row_warps = cuda_kernels::kStepRowWarps[best];
  e.ms = times_ms;
  entries_[matvec_shape_text(shape)] = e;
  ++measured_;
  return e.row_warps;
}

}  // namespace strata::worker
