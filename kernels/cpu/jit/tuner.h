// The tuner of the generated matmuls: for each (weight type, shape, ISA
// tier, thread count) it measures a bounded set of KernelParams candidates
// (prefill tile rows × cols, decode rows, prefetch distance, the columns of
// the few-column tiles of a batched decode step, unroll, row grain), each
// first checked against the reference matmul with the tests'
// tolerance (1e-5 of sum |w x|), and keeps the fastest. Winners are cached in
// a file under `cache_dir` named after the CPU model, the ISA tier and
// kGeneratorVersion, so a changed generator or another machine retunes.
//
// The cache file holds one line per shape:
//   matmul <type> <n_in> <n_out> <threads> <rows> <cols> <decode_rows>
//          <unroll> <prefetch> <act_block> <row_grain> <few_cols>
// Lines that do not parse are ignored (and dropped at the next save).
//
// Parameters change only the order of work, never the summation order of
// one output, so a tuned and an untuned run give bit-identical results.
//
// Usage:
//   Tuner tuner(tier, pool.size(), TuneOptions{});
//   for (each matrix) tuner.tune(*jit_matmul, weight_view, scratch, pool);
//   tuner.save();                  // writes new winners
//   tuner.summary();               // "tuned 5 matmul shapes in 4.1 s (3 from the cache, ...)"
//
// Threads: one thread at a time.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"

namespace strata::kernels::jit {

struct TuneOptions {
  std::string cache_dir;     // default: $HOME/.cache/strata/tune-cache
  double budget_s = 30.0;    // measuring time for one load; past it, the
                             // remaining shapes keep default parameters
  int prefill_rows = 64;     // rows the prefill candidates are timed on
};

// True when STRATA_NO_TUNE is on (1/true/yes/on; kernels/cpu/env_switch.h).
bool tuning_disabled_by_env();

class Tuner {
 public:
  Tuner(IsaTier tier, int n_threads, TuneOptions options);

  // Sets m's parameters to the cached winner for its shape, or measures the
  // candidates (within the budget) and keeps the fastest. With an
  // oversubscribed pool (more threads than CPUs) it keeps the defaults and
  // caches nothing. `w` is the
  // matrix m was created from (the correctness check runs the reference).
  // Errors: those of JitMatmul::set_params for the default parameters
  // (a candidate that fails is skipped).
  absl::Status tune(JitMatmul& m, const WeightMatrix& w, JitScratch& scratch,
                    ThreadPool& pool);

  // Writes the cache file when new winners were found (through a temporary
  // file renamed over it; the temporary is removed on failure). Errors: the
  // file cannot be written (the tuned parameters still apply).
  absl::Status save() const;

  // One line for the log: shapes measured and cached, seconds spent, file.
  std::string summary() const;
  const std::string& cache_path() const { return path_; }
  int measured() const { return measured_; }

 private:
  using Key = std::tuple<int, int64_t, int64_t, int>;  // type, n_in, n_out, threads
  void load();

  IsaTier tier_;
  int n_threads_;
  TuneOptions options_;
  std::string path_;
  std::map<Key, KernelParams> entries_;
  std::set<Key> tuned_here_;  // keys measured by this tuner (not loaded)
  bool dirty_ = false;
  int measured_ = 0;
  int from_cache_ = 0;      // shapes set from entries loaded from the file
  int reused_ = 0;          // shapes set from a winner measured in this load
  int over_budget_ = 0;
  int oversubscribed_ = 0;  // shapes left at defaults: the pool is oversubscribed
  double seconds_ = 0.0;
};

}  // namespace strata::kernels::jit
