// NvrtcCompiler (worker/cuda/nvrtc_compiler.h).
#include "worker/cuda/nvrtc_compiler.h"

#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::worker {
namespace {

// FNV-1a 64 over a sequence of length-prefixed fields (a field boundary
// cannot be moved without changing the hash).
class KeyHash {
 public:
  void add(std::string_view s) {
    const uint64_t n = s.size();
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(n >> (8 * i)));
    for (char c : s) byte(static_cast<uint8_t>(c));
  }
  void add(int64_t v) { add(std::string_view(absl::StrCat(v))); }
  uint64_t value() const { return h_; }

 private:
  void byte(uint8_t b) {
    h_ ^= b;
    h_ *= 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

std::string default_cache_dir() {
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : ".",
                      "/.cache/strata/cuda-kernels");
}

// 9.0: sm_90's arch-specific PTX (wgmma); nvrtc_compiler.h.
std::string arch_option(const NvrtcTarget& t) {
  const int cc = t.cc_major * 10 + t.cc_minor;
  return absl::StrCat("-arch=compute_", cc, cc == 90 ? "a" : "");
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  if (!in.good() && !in.eof()) return false;
  *out = s.str();
  return !out->empty() && out->back() == '\0';
}

void write_file_atomically(const std::string& dir, const std::string& path,
                           const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  // Unique per process and call: writers of the same key never share a file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      absl::StrCat(path, ".tmp", getpid(), "-", counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

// Destroys the program on every return path.
struct ProgramGuard {
  nvrtcProgram p = nullptr;
  ~ProgramGuard() {
    if (p != nullptr) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

int nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

NvrtcCompiler::NvrtcCompiler(NvrtcCompilerOptions options) {
  if (options.cache_dir == "-") return;
  cache_dir_ =
      options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
}

std::string NvrtcCompiler::cache_key(const NvrtcTarget& target,
                                     std::string_view name,
                                     std::string_view source,
                                     std::span<const std::string> options) {
  KeyHash h;
  h.add(std::string_view("strata-nvrtc-ptx-1"));
  h.add(int64_t{nvrtc_version()});
  h.add(target.device_name);
  h.add(int64_t{target.cc_major * 10 + target.cc_minor});
  h.add(int64_t{target.driver_version});
  h.add(name);
  h.add(source);
  h.add(std::string_view(arch_option(target)));
  for (const std::string& o : options) h.add(std::string_view(o));
  return absl::StrFormat("%016x", h.value());
}

absl::StatusOr<NvrtcOutput> NvrtcCompiler::compile(
    const NvrtcTarget& target, std::string_view name, std::string_view source,
    std::span<const std::string> options) {
  NvrtcOutput out;
  if (!cache_dir_.empty()) {
    out.cache_path = absl::StrCat(
        cache_dir_, "/", cache_key(target, name, source, options), ".ptx");
    if (read_file(out.cache_path, &out.ptx)) {
      out.from_cache = true;
      return out;
    }
    out.ptx.clear();
  }

  const std::string source_z(source);  // NVRTC wants NUL-terminated text
  const std::string name_z(name);
  ProgramGuard prog;
  nvrtcResult r = nvrtcCreateProgram(&prog.p, source_z.c_str(), name_z.c_str(),
                                     0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    return absl::InternalError(
        absl::StrCat(name_z, ": nvrtcCreateProgram: ", nvrtcGetErrorString(r)));
  }
  const std::string arch = arch_option(target);
  std::vector<const char*> argv;
  argv.reserve(options.size() + 1);
  argv.push_back(arch.c_str());
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());

  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog.p, &log_size) == NVRTC_SUCCESS &&
      log_size > 1) {
    out.log.resize(log_size);
    if (nvrtcGetProgramLog(prog.p, out.log.data()) != NVRTC_SUCCESS)
      out.log.clear();
    while (!out.log.empty() &&
           (out.log.back() == '\0' || out.log.back() == '\n')) {
      out.log.pop_back();
    }
  }
  if (compiled == NVRTC_ERROR_COMPILATION) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_z, ": NVRTC compile failed for ", arch.substr(6), ":\n", out.log));
  }
  if (compiled != NVRTC_SUCCESS) {
    return absl::InternalError(
        absl::StrCat(name_z, ": nvrtcCompileProgram (", arch,
                     "): ", nvrtcGetErrorString(compiled), "\n", out.log));
  }
  size_t ptx_size = 0;
  r = nvrtcGetPTXSize(prog.p, &ptx_size);
  if (r == NVRTC_SUCCESS) {
    out.ptx.resize(ptx_size);  // includes the NUL
    r = nvrtcGetPTX(prog.p, out.ptx.data());
  }
  if (r != NVRTC_SUCCESS || out.ptx.empty()) {
    return absl::InternalError(
        absl::StrCat(name_z, ": nvrtcGetPTX: ", nvrtcGetErrorString(r)));
  }
  if (out.ptx.back() != '\0') out.ptx.push_back('\0');
  if (!cache_dir_.empty())
    write_file_atomically(cache_dir_, out.cache_path, out.ptx);
  return out;
}

}  // namespace strata::worker
