// `strata hardware [-t THREADS] [--json]`: what this machine is, as the CPU
// kernels see it — CPU model, cores, caches, ISA extensions and tier, the
// measured memory read bandwidth (STREAM-like, a few hundred ms: read with
// 1 thread and with T threads over arrays 4x the last-level cache) and which
// kernel the engine uses for each weight type.
//
// --json prints one object:
//   {"cpu": {"vendor", "model", "logical_cpus", "physical_cores", "packages",
//            "allowed_cpus"},
//    "isa_flags": [...], "isa_tier": "avx2" | "avx512" | "avx512vnni" | null
//    (with "isa_error" saying why: no AVX2, or STRATA_JIT=0),
//    "kernel_mode": "generated, avx2" | "reference (STRATA_JIT=0)" | ...,
//    "caches": [{"level", "type", "size_bytes", "shared_by"}],
//    "memory": {"array_bytes", "passes",
//               "read": [{"threads", "best_gb_s", "median_gb_s"}, ...]},
//    "kernels": {"Q4_0": name, ...}}
// The tier is kernels::engine_isa()'s (CPUID, or STRATA_ISA when set; none
// with STRATA_JIT=0), the kernel names kernels::jit::kernel_name()'s. A bad
// STRATA_ISA (unknown, or a tier this CPU lacks) exits 2 with the error.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/kernel_flags.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "model/ggml_type.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

constexpr int kPasses = 8;

// Weight types the engine multiplies: those with a generator, and those the
// reference matmul runs (Q2_K, Q3_K, Q8_K: "reference (no generator ...)").
constexpr GgmlType kWeightTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
    GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
    GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kMXFP4};

struct HardwareOptions {
  int threads = 0;  // 0: every CPU this process may use
  bool json = false;
};

struct ReadBandwidth {
  int threads = 0;
  cpu::BandwidthResult result;
};

std::string cache_name(const cpu::CacheInfo& c) {
  std::string name = "L" + std::to_string(c.level);
  if (c.type == "Data") name += "d";
  if (c.type == "Instruction") name += "i";
  return name;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// The kernel of each weight type on the engine's tier; the reference
// matmul for all of them when the engine runs no generated kernels
// (`reference`: why, as kernels::engine_kernels_text says).
std::vector<std::pair<std::string, std::string>> kernels_by_type(
    const std::optional<kernels::IsaTier>& tier, const std::string& reference) {
  std::vector<std::pair<std::string, std::string>> out;
  for (GgmlType type : kWeightTypes) {
    std::string name(ggml_type_info(type).name);
    out.emplace_back(name, tier ? kernels::jit::kernel_name(type, *tier) : reference);
  }
  return out;
}

int run(const HardwareOptions& o) {
  const cpu::CpuInfo info = cpu::read_cpu_info();
  // The tier as the engine picks it: STRATA_ISA forces one (a bad value is
  // refused here as run and speed refuse it), STRATA_JIT=0 turns the
  // generated kernels off.
  const absl::StatusOr<std::optional<kernels::IsaTier>> engine = kernels::engine_isa();
  if (!engine.ok()) {
    std::fprintf(stderr, "strata hardware: %s\n",
                 std::string(engine.status().message()).c_str());
    return 2;
  }
  const std::optional<kernels::IsaTier> tier = *engine;
  const absl::StatusOr<kernels::IsaTier> cpu_tier = kernels::detect_isa();
  const std::string kernels_text = kernels::engine_kernels_text();
  const std::string tier_text =
      tier ? kernels::isa_name(*tier)
           : cpu_tier.ok() ? std::string("none used: ") + kernels_text
                           : "none: " + std::string(cpu_tier.status().message());
  const auto kernel_names = kernels_by_type(tier, kernels_text);
  const int threads = resolve_threads(o.threads);

  // Read bandwidth: arrays first touched by all T threads, then read by
  // 1 thread and by T threads.
  const int64_t n = cpu::default_stream_elements(info.last_level_cache_bytes());
  ThreadPool pool(threads);
  auto arrays = cpu::StreamArrays::create(n, pool);
  if (!arrays.ok()) {
    std::fprintf(stderr, "strata hardware: %s\n",
                 std::string(arrays.status().message()).c_str());
    return 1;
  }
  std::vector<ReadBandwidth> reads;
  {
    ThreadPool one(1);
    reads.push_back({1, cpu::measure_bandwidth(cpu::StreamOp::kRead, **arrays,
                                               one, kPasses)});
  }
  if (threads > 1) {
    reads.push_back({threads, cpu::measure_bandwidth(cpu::StreamOp::kRead,
                                                     **arrays, pool, kPasses)});
  }

  if (o.json) {
    nlohmann::json j;
    j["cpu"] = {{"vendor", info.vendor},
                {"model", info.model},
                {"logical_cpus", info.logical_cpus},
                {"physical_cores", info.physical_cores},
                {"packages", info.packages},
                {"allowed_cpus", info.allowed_cpus}};
    j["isa_flags"] = info.isa_flags;
    j["isa_tier"] = tier ? nlohmann::json(kernels::isa_name(*tier))
                         : nlohmann::json(nullptr);
    if (!tier) j["isa_error"] = tier_text;
    j["kernel_mode"] = kernels_text;
    j["caches"] = nlohmann::json::array();
    for (const cpu::CacheInfo& c : info.caches) {
      j["caches"].push_back({{"level", c.level},
                             {"type", c.type},
                             {"size_bytes", c.size_bytes},
                             {"shared_by", c.shared_by}});
    }
    nlohmann::json read = nlohmann::json::array();
    for (const ReadBandwidth& r : reads) {
      read.push_back({{"threads", r.threads},
                      {"best_gb_s", r.result.best_gb_s},
                      {"median_gb_s", r.result.median_gb_s}});
    }
    j["memory"] = {{"array_bytes", (*arrays)->bytes_per_array()},
                   {"passes", kPasses},
                   {"read", read}};
    nlohmann::json kernels = nlohmann::json::object();
    for (const auto& [type, name] : kernel_names) kernels[type] = name;
    j["kernels"] = kernels;
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::printf("CPU:       %s (%s)\n", info.model.c_str(), info.vendor.c_str());
  std::printf("cores:     %d physical, %d logical, %d package(s); this "
              "process may use %d\n",
              info.physical_cores, info.logical_cpus, info.packages,
              info.allowed_cpus);
  std::string caches;
  for (const cpu::CacheInfo& c : info.caches) {
    if (!caches.empty()) caches += ", ";
    caches += cache_name(c) + " " + cpu::format_cache_size(c.size_bytes);
    if (c.shared_by > 1) caches += " (" + std::to_string(c.shared_by) + " CPUs)";
  }
  std::printf("caches:    %s\n", caches.c_str());
  std::printf("ISA flags: %s\n", join(info.isa_flags).c_str());
  std::printf("ISA tier:  %s\n", tier_text.c_str());
  std::printf("memory:    read bandwidth, best (median) of %d passes over "
              "%s:\n",
              kPasses,
              cpu::format_cache_size((*arrays)->bytes_per_array()).c_str());
  for (const ReadBandwidth& r : reads) {
    std::printf("           %d thread%s: %.1f GB/s (%.1f)\n", r.threads,
                r.threads == 1 ? " " : "s", r.result.best_gb_s,
                r.result.median_gb_s);
  }
  std::printf("kernels:   matmul per weight type\n");
  for (const auto& [type, name] : kernel_names) {
    std::printf("           %-6s %s\n", type.c_str(), name.c_str());
  }
  return 0;
}

}  // namespace

void add_hardware_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<HardwareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "hardware",
      "Show the CPU, its caches and ISA, measured memory bandwidth and the "
      "kernel used per weight type");
  add_threads_flag(cmd, &o->threads, "threads of the bandwidth measurement");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace strata::cli
