#include "kernels/cpu/machine_rates.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "model/ggml_type.h"

namespace strata::cpu {
namespace {

constexpr int kBandwidthPasses = 4;
constexpr int64_t kMaxStreamElements = int64_t{32} << 20;  // doubles: 256 MiB
// The FLOP-rate matmul: a 2048 x 2048 Q4_K matrix (2.25 MiB) times 64
// activation rows, as a prefill chunk multiplies a block's matrices.
constexpr int64_t kFlopN = 2048;
constexpr int64_t kFlopRows = 64;
constexpr int kFlopRuns = 8;

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out;
}

double measure_read_bandwidth(ThreadPool& pool) {
  const CpuInfo info = read_cpu_info();
  // At most 256 MiB an array (768 MiB for the moment of the measurement):
  // a worker with a tight budget starts too.
  const int64_t n = std::min<int64_t>(default_stream_elements(info.last_level_cache_bytes()),
                                      kMaxStreamElements);
  auto arrays = StreamArrays::create(n, pool);
  if (!arrays.ok()) return 0;
  return measure_bandwidth(StreamOp::kRead, **arrays, pool, kBandwidthPasses).best_gb_s * 1e9;
}

// Best of kFlopRuns runs of the generated Q4_K matmul; 0 without one.
double measure_flop_rate(ThreadPool& pool, const std::optional<kernels::IsaTier>& tier) {
  if (!tier) return 0;
  const GgmlType type = GgmlType::kQ4_K;
  const std::optional<int64_t> row_bytes = ggml_row_bytes(type, kFlopN);
  if (!row_bytes) return 0;
  // Q4_K blocks (ggml block_q4_K: f16 d, f16 dmin, 12 bytes of scales, 128
  // of 4-bit values): d = dmin = 2^-4 and every other byte 0x11, finite
  // numbers whatever the kernel does with them.
  std::vector<uint8_t> bytes(static_cast<size_t>(*row_bytes * kFlopN), 0x11);
  const int64_t block = ggml_type_info(type).type_size;
  for (size_t at = 0; at + block <= bytes.size(); at += static_cast<size_t>(block)) {
    const uint16_t sixteenth = 0x2C00;  // f16 0.0625
    std::memcpy(&bytes[at], &sixteenth, 2);
    std::memcpy(&bytes[at + 2], &sixteenth, 2);
  }
  kernels::WeightMatrix w{type, bytes.data(), kFlopN, kFlopN, *row_bytes};
  auto mm = kernels::jit::JitMatmul::create(w, *tier, kernels::jit::default_params(type, *tier),
                                            nullptr, pool);
  if (!mm.ok()) return 0;
  kernels::jit::JitScratch scratch(kFlopRows, kFlopN);
  std::vector<float> x(static_cast<size_t>(kFlopRows * kFlopN));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
  std::vector<float> y(static_cast<size_t>(kFlopRows * kFlopN));
  (*mm)->run(x.data(), kFlopRows, y.data(), scratch, pool);  // warm
  double best = 1e30;
  for (int r = 0; r < kFlopRuns; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (*mm)->run(x.data(), kFlopRows, y.data(), scratch, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return 2.0 * kFlopRows * kFlopN * kFlopN / best;
}

std::optional<kernels::IsaTier> tier_or_none() {
  absl::StatusOr<std::optional<kernels::IsaTier>> tier = kernels::engine_isa();
  return tier.ok() ? *tier : std::nullopt;
}

}  // namespace

MachineRates measure_machine_rates(ThreadPool& pool) {
  MachineRates r;
  r.read_bytes_per_s = measure_read_bandwidth(pool);
  r.flops_per_s = measure_flop_rate(pool, tier_or_none());
  return r;
}

MachineRates cached_machine_rates(ThreadPool& pool, const std::string& cache_dir) {
  std::string dir = cache_dir;
  if (dir.empty()) {
    const char* home = std::getenv("HOME");
    dir = absl::StrCat(home != nullptr ? home : ".", "/.cache/strata/tune-cache");
  }
  const std::optional<kernels::IsaTier> tier = tier_or_none();
  const std::string path =
      absl::StrCat(dir, "/rates-", sanitize(kernels::cpu_signature()), "-",
                   tier ? kernels::isa_name(*tier) : std::string("reference"), "-g",
                   kernels::jit::kGeneratorVersion, "-t", pool.size(), ".txt");
  {
    std::ifstream in(path);
    std::string key;
    double value = 0;
    MachineRates r;
    bool bw = false, flops = false;
    while (in >> key >> value) {
      if (key == "read_bandwidth" && value > 0) {
        r.read_bytes_per_s = value;
        bw = true;
      } else if (key == "flop_rate" && value >= 0) {
        r.flops_per_s = value;
        flops = true;
      }
    }
    if (bw && flops) {
      r.from_cache = true;
      r.cache_path = path;
      return r;
    }
  }
  MachineRates r = measure_machine_rates(pool);
  r.cache_path = path;
  if (r.read_bytes_per_s <= 0) return r;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // One temporary file per process, renamed over the cache (workers
  // starting at once each write a whole file).
  const std::string tmp = absl::StrCat(path, ".", getpid(), ".tmp");
  {
    std::ofstream out(tmp);
    out.precision(17);
    out << "read_bandwidth " << r.read_bytes_per_s << "\nflop_rate " << r.flops_per_s << "\n";
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return r;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return r;
}

}  // namespace strata::cpu
