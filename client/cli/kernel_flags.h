// The flags that choose how the cpu backend's kernels are generated, shared
// by the commands that run a model in this process (`strata run`, `strata
// speed`); they fill worker::CpuBackendOptions::isa / no_tune. Also the KV
// cache type flag of `strata run` and `strata serve`, and the one -t/--threads
// flag of every command that computes.
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/tuner.h"

namespace strata::cli {

// --isa TIER (avx2, avx512, avx512vnni; empty: STRATA_ISA, else CPUID) and
// --no-tune (the kernels' default parameters). A name that is no tier is
// refused at parse time (exit 2, as other bad flag values); a tier this CPU
// lacks, by check_engine_isa (exit 2) before the model is loaded.
inline void add_kernel_flags(CLI::App* cmd, std::string* isa, bool* no_tune) {
  cmd->add_option("--isa", *isa,
                  "ISA tier of the generated kernels: avx2, avx512 or avx512vnni "
                  "(default: STRATA_ISA, else the best this CPU runs)")
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            return kernels::parse_isa(name) ? "" : "not an ISA tier (avx2, avx512, avx512vnni): " + name;
          },
          "TIER"));
  cmd->add_flag("--no-tune", *no_tune,
                "the kernels' default parameters, no tuning (reproducible runs)");
}

// --kv-type f16|f32 (default f16, what *kv_type holds), refused at parse
// time otherwise; worker::parse_kv_type then always accepts the value.
inline void add_kv_type_flag(CLI::App* cmd, std::string* kv_type) {
  cmd->add_option("--kv-type", *kv_type, "KV cache type: f16 or f32 (f16)")
      ->check(CLI::IsMember({"f16", "f32"}));
}

// Most threads -t accepts.
inline constexpr int kMaxThreads = 1024;

// -t/--threads N: 0 (the default, what *threads holds) means one thread per
// CPU this process may run on (resolve_threads); N > kMaxThreads or N < 0 is
// refused at parse time. `what` describes the threads ("threads",
// "threads of the bandwidth measurement", ...).
inline void add_threads_flag(CLI::App* cmd, int* threads, const std::string& what) {
  cmd->add_option("-t,--threads", *threads, what + "; 0: all cores (0)")
      ->check(CLI::Range(0, kMaxThreads));
}

// Checks the tier the engine would run (--isa `isa`, else STRATA_ISA, else
// CPUID; kernels::engine_isa) before anything is loaded: an unknown name or
// a tier this CPU lacks prints "strata COMMAND: MESSAGE" and gives exit
// status 2 (a bad setting, as a bad flag value); 0 when it is usable.
inline int check_engine_isa(const char* command, const std::string& isa) {
  const auto tier = kernels::engine_isa(isa);
  if (tier.ok()) return 0;
  std::fprintf(stderr, "strata %s: %s\n", command, std::string(tier.status().message()).c_str());
  return 2;
}

// Whether a load with these settings tunes the kernels: generated kernels
// on, neither --no-tune nor STRATA_NO_TUNE, and no more threads than CPUs
// (the tuner keeps defaults then).
inline bool tunes(const std::string& isa, bool no_tune, int threads) {
  const auto tier = kernels::engine_isa(isa);
  return tier.ok() && tier->has_value() && !no_tune &&
         !kernels::jit::tuning_disabled_by_env() && threads <= cpu::usable_threads();
}

// The thread count -t asked for: t itself when t > 0, else
// cpu::usable_threads(). More threads than usable CPUs run (as llama.cpp's
// -t does), with a note on stderr: they share cores, and each parallel loop
// waits for its slowest thread.
inline int resolve_threads(int t) {
  const int usable = cpu::usable_threads();
  if (t > usable) {
    std::fprintf(stderr,
                 "note: -t %d runs %d threads on %d usable CPU%s: they take turns "
                 "(no spinning waits, no tuning), expect it slower than -t %d\n",
                 t, t, usable, usable == 1 ? "" : "s", usable);
  }
  return t > 0 ? t : usable;
}

}  // namespace strata::cli
