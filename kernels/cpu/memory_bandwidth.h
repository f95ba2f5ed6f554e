// Memory bandwidth, measured the way STREAM (McCalpin) does it: simple loops
// over arrays of doubles much larger than the last-level cache, timed best
// of several passes. One implementation for bench/stream_triad and
// `strata hardware`.
//
//   copy   c[i] = a[i]                2 arrays touched: 16 bytes / element
//   scale  b[i] = s * c[i]            16 bytes / element
//   add    c[i] = a[i] + b[i]         24 bytes / element
//   triad  a[i] = b[i] + s * c[i]     24 bytes / element
//   read   sum += a[i]                 8 bytes / element (no stores)
//
// Bytes are counted as STREAM counts them: each array read or written once,
// without the write-allocate traffic of stores. `read` is what a decode step
// does to the weights, so it is the bound that tg tok/s is held to.
// GB/s means 1e9 bytes per second.
//
// Usage:
//   ThreadPool pool(2);
//   auto arrays = StreamArrays::create(default_stream_elements(llc), pool);
//   BandwidthResult r = measure_bandwidth(StreamOp::kRead, **arrays, pool, 10);
//
// Threads: every op splits the arrays into the same contiguous chunks per
// pool thread, and the arrays are first touched in those chunks, so each
// thread reads memory local to its NUMA node. Calls on one StreamArrays must
// not overlap (the ops write the arrays).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/thread_pool.h"

namespace strata::cpu {

enum class StreamOp { kCopy, kScale, kAdd, kTriad, kRead };

inline constexpr StreamOp kAllStreamOps[] = {StreamOp::kCopy, StreamOp::kScale,
                                             StreamOp::kAdd, StreamOp::kTriad,
                                             StreamOp::kRead};

std::string_view stream_op_name(StreamOp op);  // "copy", ..., "read"
// Bytes counted per element, as in the table above.
int64_t stream_op_bytes_per_element(StreamOp op);

// Elements per array for arrays far larger than the last-level cache:
// 4 x llc_bytes per array (STREAM's rule), at least 64 MiB, rounded to a
// multiple of 4096 elements. llc_bytes 0 (unknown) gives the 64 MiB floor.
int64_t default_stream_elements(int64_t llc_bytes);

// Three arrays a, b, c of n doubles each (aligned to 4 KiB), first touched by
// the threads of `pool` in the chunks the ops use. Owns its memory.
class StreamArrays {
 public:
  // ResourceExhausted when the memory cannot be had; InvalidArgument when
  // n < 1 or 3 * n doubles overflow.
  static absl::StatusOr<std::unique_ptr<StreamArrays>> create(int64_t n,
                                                              ThreadPool& pool);
  ~StreamArrays();
  StreamArrays(const StreamArrays&) = delete;
  StreamArrays& operator=(const StreamArrays&) = delete;

  int64_t size() const { return n_; }
  int64_t bytes_per_array() const { return n_ * 8; }

 private:
  friend struct StreamKernels;
  // a, b and c start `stride` >= n elements apart in `memory`.
  StreamArrays(int64_t n, int64_t stride, double* memory);
  int64_t n_;
  double* memory_;  // 3 * stride doubles, owned (std::aligned_alloc)
  double* a_;       // [n_]
  double* b_;       // [n_]
  double* c_;       // [n_]
};

struct BandwidthResult {
  double best_gb_s = 0;    // fastest pass
  double median_gb_s = 0;  // median pass
  int64_t bytes_per_pass = 0;
  int passes = 0;
};

// Runs `op` once untimed (to settle page faults and clocks) and then
// `passes` (>= 1) timed passes over `arrays` with every thread of `pool`.
BandwidthResult measure_bandwidth(StreamOp op, StreamArrays& arrays,
                                  ThreadPool& pool, int passes);

}  // namespace strata::cpu
