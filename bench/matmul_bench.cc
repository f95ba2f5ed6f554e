// Throughput of one generated matmul (kernels/cpu/jit): y = x · Wᵀ for
// --rows activation rows: 1 is the step every linear layer takes per
// generated token (decode, bandwidth-bound: GB/s of packed weight bytes
// read), more is prefill (compute-bound: GMAC/s, multiply-adds per second).
// Prints, per weight type and shape, microseconds per call, GB/s and GMAC/s,
// for 1..T threads.
//
//   build/bench/matmul_bench [-t 2] [--types Q4_1,Q4_K] [--ms 300]
//                            [--copies 1] [--rows 1]
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/parse_flags.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/jit/tuner.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"

namespace {

using namespace strata;

// What main's flags set for every measurement.
struct Settings {
  double ms = 300;       // time per measurement
  int copies = 1;        // distinct packed copies run in turn
  int prefetch = -1;     // -1: the type's default
  int decode_rows = 0;   // 0: the type's default
  int rows = 1;          // activation rows per call (1: decode)
  int cols = 0;          // prefill tile columns (0: the type's default)
  int act_block = 0;     // prefill activation rows per pass (0: the default)
};

double run_shape(GgmlType type, int64_t n_in, int64_t n_out, int threads,
                 const Settings& set, double* gbps, std::string* params) {
  const int copies = set.copies;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::optional<int64_t> rb = ggml_row_bytes(type, n_in);
  if (!rb) return -1;  // n_in is not whole blocks of the type
  const int64_t row_bytes = *rb;
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * n_out));
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    for (float& v : row) v = dist(rng);
    if (!reference::quantize_row(type, row.data(), n_in, bytes.data() + r * row_bytes).ok()) {
      return -1;
    }
  }
  auto w = reference::ops::make_weight_matrix("w", type, bytes.data(), n_in, n_out,
                                              static_cast<int64_t>(bytes.size()));
  ThreadPool pool(threads);
  kernels::jit::KernelCache cache;
  auto tier = kernels::select_isa();
  if (!w.ok() || !tier.ok()) return -1;
  kernels::jit::KernelParams p = kernels::jit::default_params(type, *tier);
  if (set.prefetch >= 0) p.prefetch = set.prefetch;
  if (set.decode_rows > 0) p.decode_rows = set.decode_rows;
  if (set.cols > 0) p.cols = set.cols;
  if (set.act_block > 0) p.act_block = set.act_block;
  // `copies` packed copies run in turn: with enough of them the weights
  // come from memory, not the caches, as in a real decode step.
  std::vector<std::unique_ptr<kernels::jit::JitMatmul>> mms;
  for (int c = 0; c < copies; ++c) {
    auto mm = kernels::jit::JitMatmul::create(*w, *tier, p, &cache, pool);
    if (!mm.ok()) return -1;
    mms.push_back(std::move(*mm));
  }
  *params = kernels::jit::params_text(mms[0]->params());
  const int64_t rows = set.rows;
  kernels::jit::JitScratch scratch(rows, n_in);
  std::vector<float> x(static_cast<size_t>(rows * n_in)), y(static_cast<size_t>(rows * n_out));
  for (float& v : x) v = dist(rng);
  for (int i = 0; i < 20; ++i) mms[i % copies]->run(x.data(), rows, y.data(), scratch, pool);
  double best = 1e30;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(set.ms);
  while (std::chrono::steady_clock::now() < until) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < copies; ++i) mms[i]->run(x.data(), rows, y.data(), scratch, pool);
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - t0).count() / copies;
    best = std::min(best, us);
  }
  const double packed = static_cast<double>(mms[0]->packed().owned_bytes());
  *gbps = packed / (best * 1e-6) / 1e9;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"decode (1-row) throughput of the generated matmul"};
  int threads = 2;
  std::string types = "Q4_0,Q4_1,Q8_0,Q4_K,Q6_K";
  Settings set;
  app.add_option("-t,--threads", threads, "up to this many threads");
  app.add_option("--types", types, "weight types");
  app.add_option("--ms", set.ms, "time per measurement (best of batches)");
  app.add_option("--copies", set.copies,
                 "distinct packed copies run in turn (1: cache-resident; enough to "
                 "exceed the last-level cache: from memory, as in decode)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--prefetch", set.prefetch, "decode prefetch distance in bytes (default: the type's)");
  app.add_option("--decode-rows", set.decode_rows, "weight rows per decode tile (default: the type's)");
  app.add_option("--rows", set.rows, "activation rows per call (1: decode; more: prefill)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--cols", set.cols, "prefill tile columns (default: the type's)");
  app.add_option("--act-block", set.act_block,
                 "prefill activation rows per pass over the weight rows (default: the type's)")
      ->check(CLI::Range(1, 4096));
  if (const std::optional<int> code = strata::bench::parse_flags(app, argc, argv)) return *code;
  // SmolLM2-135M's and Gemma 3 270M's projections and SmolLM2's head; a
  // shape whose n_in is not whole blocks of a type is skipped for it.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {576, 576}, {576, 1536}, {1536, 576}, {640, 2048}, {2048, 640}, {576, 49152}};
  std::printf("%-6s %6s %6s %3s %10s %8s %8s  %s\n", "type", "n_in", "n_out", "t", "us/call",
              "GB/s", "GMAC/s", "params");
  for (const std::string& t : std::vector<std::string>(absl::StrSplit(types, ','))) {
    auto type = strata::ggml_type_from_name(t);
    if (!type) {
      std::fprintf(stderr, "unknown type %s\n", t.c_str());
      return 2;
    }
    for (auto [n_in, n_out] : shapes) {
      for (int th = 1; th <= threads; ++th) {
        double gbps = 0;
        std::string params;
        const double us = run_shape(*type, n_in, n_out, th, set, &gbps, &params);
        if (us < 0) continue;
        const double gmacs = static_cast<double>(set.rows) * n_in * n_out / (us * 1e3);
        std::printf("%-6s %6lld %6lld %3d %10.1f %8.2f %8.2f  %s\n", t.c_str(),
                    static_cast<long long>(n_in), static_cast<long long>(n_out), th, us, gbps,
                    gmacs, params.c_str());
      }
    }
  }
  return 0;
}
