#include "worker/cuda/kernel_tuner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/cuda/step_kernels.h"
#include "worker/trace.h"

namespace strata::worker {

std::string matvec_shape_text(const MatvecShape& s) {
  return absl::StrCat(std::string(ggml_type_info(s.type).name), " ", s.n_in, "x", s.n_out,
                      s.int8 ? " i8" : "");
}

namespace {

std::string source_hash(const std::string& text) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(fnv1a64(text.data(), text.size())));
  return hash;
}

std::string prefill_shape_text(MatvecShape shape, int rows) {
  shape.int8 = false;
  return absl::StrCat(matvec_shape_text(shape), " @", rows);
}

// The fastest of `candidates` by `ms` (the first of equals), when every
// one has a time.
std::optional<PrefillForm> fastest(const std::map<std::string, double>& ms,
                                   const std::vector<PrefillForm>& candidates) {
  std::optional<PrefillForm> best;
  double best_ms = 0.0;
  for (const PrefillForm f : candidates) {
    auto it = ms.find(std::string(prefill_form_text(f)));
    if (it == ms.end()) return std::nullopt;
    if (!best || it->second < best_ms) {
      best = f;
      best_ms = it->second;
    }
  }
  return best;
}

}  // namespace

std::string_view prefill_form_text(PrefillForm form) {
  switch (form) {
    case PrefillForm::kInt8: return "i8";
    case PrefillForm::kWgmma: return "wgmma";
    case PrefillForm::kF16: return "f16";
  }
  return "?";
}

std::string tuning_key(const std::string& device) {
  return absl::StrCat(device, "; matvec.cuh ", source_hash(cuda_kernels::kMatvecSource),
                      "; mma.cuh ",
                      source_hash(absl::StrCat(cuda_kernels::mma_program(), "\n",
                                               cuda_kernels::wgmma_program())));
}

std::string default_tuner_path() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "";
  return absl::StrCat(home, "/.cache/strata/cuda-tuner.json");
}

std::vector<MatvecChoice> matvec_candidates() {
  std::vector<MatvecChoice> out;
  for (const int w : cuda_kernels::kStepRowWarps) {
    for (const int t : cuda_kernels::kStepMatvecBlocks) {
      if (t % (32 * w) == 0) out.push_back(MatvecChoice{w, t});
    }
  }
  return out;
}

std::string matvec_choice_text(const MatvecChoice& c) {
  return absl::StrCat("w", c.row_warps, " t", c.threads);
}

KernelTuner::KernelTuner(std::string path, std::string key)
    : path_(std::move(path)), key_(std::move(key)) {}

void KernelTuner::load() {
  entries_.clear();
  prefill_.clear();
  measured_ = 0;
  if (path_.empty()) return;
  std::ifstream in(path_);
  if (!in) return;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("key") || !j["key"].is_string() ||
      j["key"].get<std::string>() != key_ || !j.contains("matvec") || !j["matvec"].is_object()) {
    return;
  }
  const std::vector<MatvecChoice> candidates = matvec_candidates();
  for (const auto& [shape, v] : j["matvec"].items()) {
    if (!v.is_object() || !v.contains("row_warps") || !v["row_warps"].is_number_integer() ||
        !v.contains("threads") || !v["threads"].is_number_integer()) {
      continue;
    }
    Entry e;
    e.choice = MatvecChoice{v["row_warps"].get<int>(), v["threads"].get<int>()};
    if (std::find(candidates.begin(), candidates.end(), e.choice) == candidates.end()) continue;
    if (v.contains("ms") && v["ms"].is_object()) {
      for (const auto& [name, t] : v["ms"].items()) {
        if (t.is_number()) e.ms[name] = t.get<double>();
      }
    }
    entries_[shape] = std::move(e);
  }
  if (!j.contains("prefill") || !j["prefill"].is_object()) return;
  for (const auto& [shape, v] : j["prefill"].items()) {
    if (!v.is_object()) continue;
    std::map<std::string, double> ms;
    for (const PrefillForm f : {PrefillForm::kInt8, PrefillForm::kWgmma, PrefillForm::kF16}) {
      const std::string name(prefill_form_text(f));
      if (v.contains(name) && v[name].is_number()) ms[name] = v[name].get<double>();
    }
    if (!ms.empty()) prefill_[shape] = std::move(ms);
  }
}

absl::Status KernelTuner::save() const {
  if (path_.empty()) return absl::OkStatus();
  nlohmann::json j;
  j["key"] = key_;
  j["matvec"] = nlohmann::json::object();
  for (const auto& [shape, e] : entries_) {
    j["matvec"][shape] = {
        {"row_warps", e.choice.row_warps}, {"threads", e.choice.threads}, {"ms", e.ms}};
  }
  j["prefill"] = nlohmann::json::object();
  for (const auto& [shape, ms] : prefill_) j["prefill"][shape] = ms;
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

std::optional<MatvecChoice> KernelTuner::find(const MatvecShape& shape) const {
  auto it = entries_.find(matvec_shape_text(shape));
  if (it == entries_.end()) return std::nullopt;
  return it->second.choice;
}

MatvecChoice KernelTuner::record(const MatvecShape& shape, const std::vector<double>& times_ms) {
  const std::vector<MatvecChoice> candidates = matvec_candidates();
  Entry e;
  size_t best = 0;
  for (size_t i = 0; i < times_ms.size() && i < candidates.size(); ++i) {
    if (times_ms[i] < times_ms[best]) best = i;
    e.ms[matvec_choice_text(candidates[i])] = times_ms[i];
  }
  e.choice = candidates[best];
  entries_[matvec_shape_text(shape)] = e;
  ++measured_;
  return e.choice;
}

std::optional<PrefillForm> KernelTuner::find_prefill(
    const MatvecShape& shape, int rows, const std::vector<PrefillForm>& candidates) const {
  auto it = prefill_.find(prefill_shape_text(shape, rows));
  if (it == prefill_.end()) return std::nullopt;
  return fastest(it->second, candidates);
}

PrefillForm KernelTuner::record_prefill(const MatvecShape& shape, int rows,
                                        const std::vector<PrefillForm>& candidates,
                                        const std::vector<double>& times_ms) {
  std::map<std::string, double>& ms = prefill_[prefill_shape_text(shape, rows)];
  for (size_t i = 0; i < candidates.size() && i < times_ms.size(); ++i) {
    ms[std::string(prefill_form_text(candidates[i]))] = times_ms[i];
  }
  ++measured_;
  const std::optional<PrefillForm> best = fastest(ms, candidates);
  return best ? *best : candidates.empty() ? PrefillForm::kF16 : candidates.front();
}

}  // namespace strata::worker
