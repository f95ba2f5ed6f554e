// What a worker's machine does per second, for `strata plan` and the
// coordinator's placement (worker.proto DescribeResponse fields 10, 11):
//
//   read bandwidth  bytes/s at which decode reads weights: the generated
//                   Q4_K matmul (kernels/cpu/jit) on one activation row
//                   over matrices of 2048 x 8192 (9 MiB), one after
//                   another as a decode step runs a block's matmuls, on T
//                   threads, best of several passes (the kernel's own
//                   efficiency and its hand-offs between matmuls included),
//                   at a few working-set sizes (read_points): 2, 4, 7, 14
//                   matrices (18 to 126 MiB), and 28 (252 MiB) when the
//                   last-level cache reported is past 64 MiB. A model that
//                   fits the cache is read faster between tokens than one
//                   that streams from memory. read_bytes_per_s is the 126
//                   MiB point, the large-working-set figure. Without
//                   generated kernels: STREAM's `read` op
//                   (memory_bandwidth.h) over arrays 4x the last-level
//                   cache (at most 128 MiB each), which is measured either
//                   way as the machine's bound; no points then.
//   matmul overhead seconds one decode matmul costs besides its weight
//                   reads: a 256 x 64 Q4_K matrix (in cache) on one row,
//                   the median of 400 runs on T threads. A decode token
//                   pays it once per matrix it multiplies, which on small
//                   models (SmolLM2: 210 matmuls a token) is a large share.
//   FLOP rate       FLOP/s of the generated Q4_K matmul (kernels/cpu/jit) at
//                   64 activation rows on T threads, 2 FLOPs per weight and
//                   row: the bound of prefill. 0 when the engine runs no
//                   generated kernels (STRATA_JIT=0, no AVX2).
//
// Measuring takes about a second (the arrays are a few hundred MiB), so the
// figures are cached as the tuner caches its winners (kernels/cpu/jit/
// tuner.h): one file per CPU signature, ISA tier, generator version and
// thread count under the tune-cache folder,
//   $HOME/.cache/strata/tune-cache/rates-<cpu signature>-<tier>-g<N>-t<T>.txt
// holding a "format 2" line, "read_bandwidth", "decode_read_bandwidth",
// "stream_read_bandwidth" (bytes/s), "flop_rate" (FLOP/s) and
// "matmul_overhead" (s) lines, and one "read_point <bytes> <bytes/s>" line a
// point; a file that lacks them (format 1 files had no points) is measured
// again and replaced.
//
// Thread-safety: plain functions; measuring uses the pool it is given (no
// other work on it meanwhile).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/thread_pool.h"

namespace strata {
class Progress;  // model/progress.h
}  // namespace strata

namespace strata::cpu {

// The decode matmul's read rate over `bytes` of weights.
struct ReadPoint {
  int64_t bytes = 0;
  double bytes_per_s = 0;
};

struct MachineRates {
  double read_bytes_per_s = 0;         // decode's, else STREAM's; 0: unknown
  double decode_read_bytes_per_s = 0;  // the generated decode matmul's
  double stream_read_bytes_per_s = 0;  // STREAM read
  // The decode matmul's rate by working-set size, smallest first; empty
  // without generated kernels.
  std::vector<ReadPoint> read_points;
  double flops_per_s = 0;              // 0: unknown
  // Seconds a decode matmul costs besides reading its weights (the pool's
  // hand-offs, the activation's quantization); 0: unknown.
  double matmul_overhead_s = 0;
  bool from_cache = false;  // read from the cache file, not measured now
  std::string cache_path;   // the file read or written ("" : none)
};

// Measures both rates with `pool`'s threads. `progress` (may be null): one
// phase, "probing machine rates", of 4 steps (STREAM read, decode reads by
// working set, FLOP rate, matmul overhead).
MachineRates measure_machine_rates(ThreadPool& pool,
                                   Progress* progress = nullptr);

// The cached rates for pool.size() threads on this CPU, or measured and
// cached (a cache that cannot be written is only logged by the caller:
// cache_path stays set, the rates are still returned). `cache_dir` empty:
// $HOME/.cache/strata/tune-cache. `progress`: that of a measurement (none
// when read from the cache).
MachineRates cached_machine_rates(ThreadPool& pool,
                                  const std::string& cache_dir = "",
                                  Progress* progress = nullptr);

}  // namespace strata::cpu
