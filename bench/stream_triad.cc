// stream_triad: STREAM-like memory bandwidth (copy, scale, add, triad) and a
// pure read (sum) with 1..T threads, over arrays far larger than the
// last-level cache; prints GB/s (1e9 bytes/s), best and median of the
// passes. The loops are kernels/cpu/memory_bandwidth.h, the same ones
// `strata hardware` runs.
//
//   build-bench/bench/stream_triad [-t MAX_THREADS] [--mib PER_ARRAY]
//                                  [--passes 10] [--ops triad,read] [--json]
//
// --json prints {"cpu": MODEL, "array_bytes": N, "passes": P,
//   "results": [{"op", "threads", "best_gb_s", "median_gb_s"}, ...]};
// bench/vs-llamacpp reads the read row of it.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/parse_flags.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "nlohmann/json.hpp"

namespace {

std::vector<strata::cpu::StreamOp> parse_ops(const std::string& list,
                                             std::string* error) {
  std::vector<strata::cpu::StreamOp> ops;
  std::stringstream in(list);
  std::string word;
  while (std::getline(in, word, ',')) {
    bool found = false;
    for (strata::cpu::StreamOp op : strata::cpu::kAllStreamOps) {
      if (strata::cpu::stream_op_name(op) == word) {
        ops.push_back(op);
        found = true;
      }
    }
    if (!found) {
      *error = "--ops: '" + word + "' is not copy, scale, add, triad or read";
      return {};
    }
  }
  if (ops.empty()) *error = "--ops: empty";
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  const cpu::CpuInfo info = cpu::read_cpu_info();
  int max_threads = std::max(1, info.allowed_cpus);
  int64_t mib = 0;
  int passes = 10;
  std::string ops_list = "copy,scale,add,triad,read";
  bool json = false;

  CLI::App app{"STREAM-like memory bandwidth, 1..T threads"};
  app.add_option("-t,--threads", max_threads,
                 "largest thread count; runs 1..T (all allowed CPUs)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--mib", mib,
                 "MiB per array (three arrays; default 4x the last-level "
                 "cache, at least 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--passes", passes, "timed passes per op (10)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--ops", ops_list, "comma-separated ops");
  app.add_flag("--json", json, "print one JSON object");
  if (const std::optional<int> code = strata::bench::parse_flags(app, argc, argv)) return *code;

  std::string error;
  const std::vector<cpu::StreamOp> ops = parse_ops(ops_list, &error);
  if (ops.empty()) {
    std::fprintf(stderr, "stream_triad: %s\n", error.c_str());
    return 2;
  }
  const int64_t n = mib > 0 ? mib * (int64_t{1} << 20) / 8
                            : cpu::default_stream_elements(
                                  info.last_level_cache_bytes());
  ThreadPool first_touch(max_threads);
  auto arrays = cpu::StreamArrays::create(n, first_touch);
  if (!arrays.ok()) {
    std::fprintf(stderr, "stream_triad: %s\n",
                 std::string(arrays.status().message()).c_str());
    return 1;
  }

  nlohmann::json results = nlohmann::json::array();
  if (!json) {
    std::printf("%s; 3 arrays of %s (last-level cache %s); best (median) of "
                "%d passes, GB/s\n",
                info.model.c_str(),
                cpu::format_cache_size((*arrays)->bytes_per_array()).c_str(),
                cpu::format_cache_size(info.last_level_cache_bytes()).c_str(),
                passes);
    std::printf("%-8s", "threads");
    for (cpu::StreamOp op : ops) {
      std::printf(" %17s", std::string(cpu::stream_op_name(op)).c_str());
    }
    std::printf("\n");
  }
  for (int t = 1; t <= max_threads; ++t) {
    ThreadPool pool(t);
    if (!json) std::printf("%-8d", t);
    for (cpu::StreamOp op : ops) {
      const cpu::BandwidthResult r =
          cpu::measure_bandwidth(op, **arrays, pool, passes);
      if (json) {
        results.push_back({{"op", cpu::stream_op_name(op)},
                           {"threads", t},
                           {"best_gb_s", r.best_gb_s},
                           {"median_gb_s", r.median_gb_s}});
      } else {
        std::printf("    %6.1f (%6.1f)", r.best_gb_s, r.median_gb_s);
        std::fflush(stdout);
      }
    }
    if (!json) std::printf("\n");
  }
  if (json) {
    nlohmann::json j = {{"cpu", info.model},
                        {"array_bytes", (*arrays)->bytes_per_array()},
                        {"passes", passes},
                        {"results", results}};
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}
