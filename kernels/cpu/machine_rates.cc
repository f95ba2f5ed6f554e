#include "kernels/cpu/machine_rates.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "model/ggml_type.h"
#include "model/progress.h"

namespace strata::cpu {
namespace {

// The cache file's format: 2 added the read_point lines.
constexpr int kRatesFormat = 2;
constexpr int kBandwidthPasses = 4;
constexpr int64_t kMaxStreamElements = int64_t{16} << 20;  // doubles: 128 MiB
// The FLOP-rate matmul: a 2048 x 2048 Q4_K matrix (2.25 MiB) times 64
// activation rows, as a prefill chunk multiplies a block's matrices.
constexpr int64_t kFlopN = 2048;
constexpr int64_t kFlopRows = 64;
constexpr int kFlopRuns = 8;
constexpr int64_t kDecodeRows = 8192;  // 2048 x 8192 Q4_K: 9 MiB a matrix
constexpr int kDecodeMatrices = 14;    // 126 MiB
constexpr int kDecodePasses = 4;
// The fixed cost of one decode matmul: a 256 x 64 Q4_K matrix (9 KiB, in
// cache), one row, the median of kOverheadRuns runs.
constexpr int64_t kOverheadIn = 256;
constexpr int64_t kOverheadRows = 64;
constexpr int kOverheadRuns = 400;

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  return out;
}

double measure_read_bandwidth(ThreadPool& pool) {
  const CpuInfo info = read_cpu_info();
  // At most 128 MiB an array (384 MiB for the moment of the measurement):
  // a worker with a tight budget starts too.
  const int64_t n =
      std::min<int64_t>(default_stream_elements(info.last_level_cache_bytes()),
                        kMaxStreamElements);
  auto arrays = StreamArrays::create(n, pool);
  if (!arrays.ok()) return 0;
  return measure_bandwidth(StreamOp::kRead, **arrays, pool, kBandwidthPasses)
             .best_gb_s *
         1e9;
}

// Q4_K blocks (ggml block_q4_K: f16 d, f16 dmin, 12 bytes of scales, 128
// of 4-bit values) of `bytes` (filled with 0x11): d = dmin = 2^-4, finite
// numbers whatever the kernel does with them.
void fill_q4_k_scales(std::vector<uint8_t>& bytes) {
  const size_t block =
      static_cast<size_t>(ggml_type_info(GgmlType::kQ4_K).type_size);
  for (size_t at = 0; at + block <= bytes.size(); at += block) {
    const uint16_t sixteenth = 0x2C00;  // f16 0.0625
    std::memcpy(&bytes[at], &sixteenth, 2);
    std::memcpy(&bytes[at + 2], &sixteenth, 2);
  }
}

// Best of kFlopRuns runs of the generated Q4_K matmul; 0 without one.
double measure_flop_rate(ThreadPool& pool,
                         const std::optional<kernels::IsaTier>& tier) {
  if (!tier) return 0;
  const GgmlType type = GgmlType::kQ4_K;
  const std::optional<int64_t> row_bytes = ggml_row_bytes(type, kFlopN);
  if (!row_bytes) return 0;
  std::vector<uint8_t> bytes(static_cast<size_t>(*row_bytes * kFlopN), 0x11);
  fill_q4_k_scales(bytes);
  kernels::WeightMatrix w{type, bytes.data(), kFlopN, kFlopN, *row_bytes};
  auto mm = kernels::jit::JitMatmul::create(
      w, *tier, kernels::jit::default_params(type, *tier), nullptr, pool);
  if (!mm.ok()) return 0;
  kernels::jit::JitScratch scratch(kFlopRows, kFlopN);
  std::vector<float> x(static_cast<size_t>(kFlopRows * kFlopN));
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
  std::vector<float> y(static_cast<size_t>(kFlopRows * kFlopN));
  (*mm)->run(x.data(), kFlopRows, y.data(), scratch, pool);  // warm
  double best = 1e30;
  for (int r = 0; r < kFlopRuns; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (*mm)->run(x.data(), kFlopRows, y.data(), scratch, pool);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::min(best, s);
  }
  return 2.0 * kFlopRows * kFlopN * kFlopN / best;
}

// The working-set sizes measured, in matrices of kDecodeRows x kFlopN
// (9 MiB each): up to 126 MiB, and 252 MiB when the last-level cache is
// large enough that 126 MiB may stay in it.
std::vector<int> decode_point_matrices() {
  std::vector<int> counts = {2, 4, 7, kDecodeMatrices};
  if (read_cpu_info().last_level_cache_bytes() > (int64_t{64} << 20)) {
    counts.push_back(2 * kDecodeMatrices);
  }
  return counts;
}

// The rate at which the generated decode matmul reads Q4_K weights: one
// activation row through the first k of a set of kDecodeRows x kFlopN
// matrices (each once a pass, as a decode step runs a block's matmuls one
// after another), best of several passes, for each k of
// decode_point_matrices(). Empty without generated kernels.
std::vector<ReadPoint> measure_decode_bandwidth(
    ThreadPool& pool, const std::optional<kernels::IsaTier>& tier) {
  if (!tier) return {};
  const GgmlType type = GgmlType::kQ4_K;
  const std::optional<int64_t> row_bytes = ggml_row_bytes(type, kFlopN);
  if (!row_bytes) return {};
  const std::vector<int> counts = decode_point_matrices();
  const int n_matrices = *std::max_element(counts.begin(), counts.end());
  const int64_t matrix_bytes = *row_bytes * kDecodeRows;
  // One source matrix: each matmul packs its own copy of it, so the
  // matrices lie apart in memory as a model's do.
  std::vector<uint8_t> bytes(static_cast<size_t>(matrix_bytes), 0x11);
  fill_q4_k_scales(bytes);
  kernels::jit::KernelCache cache;
  std::vector<std::unique_ptr<kernels::jit::JitMatmul>> mms;
  for (int m = 0; m < n_matrices; ++m) {
    kernels::WeightMatrix w{type, bytes.data(), kFlopN, kDecodeRows,
                            *row_bytes};
    auto mm = kernels::jit::JitMatmul::create(
        w, *tier, kernels::jit::default_params(type, *tier), &cache, pool);
    if (!mm.ok()) return {};
    mms.push_back(*std::move(mm));
  }
  std::vector<uint8_t>().swap(bytes);  // packed copies hold the weights now
  kernels::jit::JitScratch scratch(1, kFlopN);
  std::vector<float> x(static_cast<size_t>(kFlopN), 0.5f);
  std::vector<float> y(static_cast<size_t>(kDecodeRows));
  std::vector<ReadPoint> points;
  for (const int k : counts) {
    for (int m = 0; m < n_matrices; ++m) {
      mms[m]->set_decode_successor(m + 1 < k ? mms[m + 1].get() : nullptr);
    }
    // Small sets pass quickly: more passes, about the same time each size.
    const int passes = std::max(kDecodePasses, 4 * kDecodeMatrices / k);
    double best = 1e30;
    for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms
      const auto t0 = std::chrono::steady_clock::now();
      for (int m = 0; m < k; ++m) {
        mms[m]->run(x.data(), 1, y.data(), scratch, pool);
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (pass > 0) best = std::min(best, s);
    }
    points.push_back({matrix_bytes * k, static_cast<double>(matrix_bytes * k) /
                                            best});
  }
  return points;
}

// Seconds one decode matmul costs besides its weight reads: the pool's
// hand-off to its threads and back, the activation's quantization, on a
// matrix so small that its bytes come from the cache. 0 without generated
// kernels.
double measure_matmul_overhead(ThreadPool& pool,
                               const std::optional<kernels::IsaTier>& tier) {
  if (!tier) return 0;
  const GgmlType type = GgmlType::kQ4_K;
  const std::optional<int64_t> row_bytes = ggml_row_bytes(type, kOverheadIn);
  if (!row_bytes) return 0;
  std::vector<uint8_t> bytes(static_cast<size_t>(*row_bytes * kOverheadRows),
                             0x11);
  fill_q4_k_scales(bytes);
  kernels::WeightMatrix w{type, bytes.data(), kOverheadIn, kOverheadRows,
                          *row_bytes};
  auto mm = kernels::jit::JitMatmul::create(
      w, *tier, kernels::jit::default_params(type, *tier), nullptr, pool);
  if (!mm.ok()) return 0;
  kernels::jit::JitScratch scratch(1, kOverheadIn);
  std::vector<float> x(static_cast<size_t>(kOverheadIn), 0.5f);
  std::vector<float> y(static_cast<size_t>(kOverheadRows));
  std::vector<double> times;
  for (int run = 0; run < kOverheadRuns + 10; ++run) {  // 10 warm-up runs
    const auto t0 = std::chrono::steady_clock::now();
    (*mm)->run(x.data(), 1, y.data(), scratch, pool);
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - t0)
                         .count();
    if (run >= 10) times.push_back(s);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

std::optional<kernels::IsaTier> tier_or_none() {
  absl::StatusOr<std::optional<kernels::IsaTier>> tier = kernels::engine_isa();
  return tier.ok() ? *tier : std::nullopt;
}

}  // namespace

MachineRates measure_machine_rates(ThreadPool& pool, Progress* progress) {
  ProgressPhase phase(progress, "probing machine rates", 4);
  MachineRates r;
  const std::optional<kernels::IsaTier> tier = tier_or_none();
  r.stream_read_bytes_per_s = measure_read_bandwidth(pool);
  phase.advance();
  r.read_points = measure_decode_bandwidth(pool, tier);
  phase.advance();
  // The large-working-set figure: the kDecodeMatrices point (126 MiB), the
  // figure older planners know.
  if (r.read_points.size() >= 4) {
    r.decode_read_bytes_per_s = r.read_points[3].bytes_per_s;
  }
  r.read_bytes_per_s = r.decode_read_bytes_per_s > 0
                           ? r.decode_read_bytes_per_s
                           : r.stream_read_bytes_per_s;
  r.flops_per_s = measure_flop_rate(pool, tier);
  phase.advance();
  r.matmul_overhead_s = measure_matmul_overhead(pool, tier);
  phase.advance();
  return r;
}

MachineRates cached_machine_rates(ThreadPool& pool,
                                  const std::string& cache_dir,
                                  Progress* progress) {
  std::string dir = cache_dir;
  if (dir.empty()) {
    const char* home = std::getenv("HOME");
    dir =
        absl::StrCat(home != nullptr ? home : ".", "/.cache/strata/tune-cache");
  }
  const std::optional<kernels::IsaTier> tier = tier_or_none();
  const std::string path = absl::StrCat(
      dir, "/rates-", sanitize(kernels::cpu_signature()), "-",
      tier ? kernels::isa_name(*tier) : std::string("reference"), "-g",
      kernels::jit::kGeneratorVersion, "-t", pool.size(), ".txt");
  {
    std::ifstream in(path);
    bool overhead = false;
    int format = 0;
    MachineRates r;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string key;
      double value = 0;
      if (!(fields >> key >> value)) continue;
      if (key == "format") format = static_cast<int>(value);
      if (key == "read_bandwidth" && value > 0) r.read_bytes_per_s = value;
      if (key == "decode_read_bandwidth" && value >= 0)
        r.decode_read_bytes_per_s = value;
      if (key == "stream_read_bandwidth" && value > 0)
        r.stream_read_bytes_per_s = value;
      if (key == "flop_rate" && value >= 0) r.flops_per_s = value;
      if (key == "matmul_overhead" && value >= 0) {
        r.matmul_overhead_s = value;
        overhead = true;
      }
      double rate = 0;
      if (key == "read_point" && value > 0 && fields >> rate && rate > 0) {
        r.read_points.push_back({static_cast<int64_t>(value), rate});
      }
    }
    std::sort(r.read_points.begin(), r.read_points.end(),
              [](const ReadPoint& a, const ReadPoint& b) {
                return a.bytes < b.bytes;
              });
    // Points whenever the decode matmul was measured.
    const bool points_ok =
        r.decode_read_bytes_per_s <= 0 || !r.read_points.empty();
    if (format == kRatesFormat && r.read_bytes_per_s > 0 &&
        r.stream_read_bytes_per_s > 0 && overhead && points_ok) {
      r.from_cache = true;
      r.cache_path = path;
      return r;
    }
  }
  MachineRates r = measure_machine_rates(pool, progress);
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
    out << "format " << kRatesFormat << "\n";
    for (const ReadPoint& p : r.read_points) {
      out << "read_point " << p.bytes << " " << p.bytes_per_s << "\n";
    }
    out << "read_bandwidth " << r.read_bytes_per_s << "\ndecode_read_bandwidth "
        << r.decode_read_bytes_per_s << "\nstream_read_bandwidth "
        << r.stream_read_bytes_per_s << "\nflop_rate " << r.flops_per_s
        << "\nmatmul_overhead " << r.matmul_overhead_s << "\n";
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
