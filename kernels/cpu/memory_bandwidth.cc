#include "kernels/cpu/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::cpu {
namespace {

constexpr double kScalar = 3.0;
constexpr int64_t kAlignment = 4096;
// Chunks split at multiples of this many elements (one 4 KiB page), so no
// two threads share a cache line or a page.
constexpr int64_t kGrain = 512;

// Two doubles: the baseline x86-64 vector (SSE2). The read loop keeps four
// of them in flight so that the adds' latency does not bound it.
using Double2 = double __attribute__((vector_size(16)));

double read_sum(const double* a, int64_t begin, int64_t end) {
  Double2 s0 = {0, 0}, s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    Double2 v0, v1, v2, v3;
    std::memcpy(&v0, a + i, 16);
    std::memcpy(&v1, a + i + 2, 16);
    std::memcpy(&v2, a + i + 4, 16);
    std::memcpy(&v3, a + i + 6, 16);
    s0 += v0;
    s1 += v1;
    s2 += v2;
    s3 += v3;
  }
  const Double2 s = (s0 + s1) + (s2 + s3);
  double sum = s[0] + s[1];
  for (; i < end; ++i) sum += a[i];
  return sum;
}

}  // namespace

// The loops, with access to the arrays.
struct StreamKernels {
  static void run(StreamOp op, StreamArrays& x, ThreadPool& pool,
                  std::vector<double>& partial) {
    double* __restrict a = x.a_;
    double* __restrict b = x.b_;
    double* __restrict c = x.c_;
    pool.parallel_for(
        x.n_,
        [&](int64_t begin, int64_t end, int thread) {
          switch (op) {
            case StreamOp::kCopy:
              for (int64_t i = begin; i < end; ++i) c[i] = a[i];
              break;
            case StreamOp::kScale:
              for (int64_t i = begin; i < end; ++i) b[i] = kScalar * c[i];
              break;
            case StreamOp::kAdd:
              for (int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
              break;
            case StreamOp::kTriad:
              for (int64_t i = begin; i < end; ++i) a[i] = b[i] + kScalar * c[i];
              break;
            case StreamOp::kRead:
              partial[thread] = read_sum(a, begin, end);
              break;
          }
        },
        kGrain);
  }

  static void first_touch(StreamArrays& x, ThreadPool& pool) {
    double* a = x.a_;
    double* b = x.b_;
    double* c = x.c_;
    pool.parallel_for(
        x.n_,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t i = begin; i < end; ++i) {
            a[i] = 1.0;
            b[i] = 2.0;
            c[i] = 0.0;
          }
        },
        kGrain);
  }
};

std::string_view stream_op_name(StreamOp op) {
  switch (op) {
    case StreamOp::kCopy:
      return "copy";
    case StreamOp::kScale:
      return "scale";
    case StreamOp::kAdd:
      return "add";
    case StreamOp::kTriad:
      return "triad";
    case StreamOp::kRead:
      return "read";
  }
  return "?";
}

int64_t stream_op_bytes_per_element(StreamOp op) {
  switch (op) {
    case StreamOp::kCopy:
    case StreamOp::kScale:
      return 16;
    case StreamOp::kAdd:
    case StreamOp::kTriad:
      return 24;
    case StreamOp::kRead:
      return 8;
  }
  return 0;
}

int64_t default_stream_elements(int64_t llc_bytes) {
  const int64_t bytes = std::max<int64_t>(int64_t{64} << 20, 4 * llc_bytes);
  const int64_t elements = bytes / 8;
  return (elements + 4095) / 4096 * 4096;
}

StreamArrays::StreamArrays(int64_t n, int64_t stride, double* memory)
    : n_(n),
      memory_(memory),
      a_(memory),
      b_(memory + stride),
      c_(memory + 2 * stride) {}

StreamArrays::~StreamArrays() { std::free(memory_); }

absl::StatusOr<std::unique_ptr<StreamArrays>> StreamArrays::create(
    int64_t n, ThreadPool& pool) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 8 / 3;
  if (n < 1 || n > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream arrays: ", n, " elements per array, expected 1..",
                     kMax));
  }
  // Each array starts on its own page: round n up to whole pages.
  const int64_t per_page = kAlignment / 8;
  const int64_t n_padded = (n + per_page - 1) / per_page * per_page;
  const int64_t bytes = 3 * n_padded * 8;
  // On 2 MiB boundaries with huge pages asked for (transparent huge pages in
  // "madvise" mode), as the packed weights a decode step streams
  // (kernels/cpu/jit/packed_weights.cc): the read rate then is not limited
  // by TLB misses on either side.
  constexpr int64_t kHuge = int64_t{2} << 20;
  const int64_t alloc_bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  void* memory = std::aligned_alloc(kHuge, static_cast<size_t>(alloc_bytes));
  if (memory != nullptr) madvise(memory, static_cast<size_t>(alloc_bytes), MADV_HUGEPAGE);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stream arrays: cannot allocate 3 x ", n_padded * 8, " bytes"));
  }
  // The ops run over n elements; the padding only aligns b and c.
  std::unique_ptr<StreamArrays> arrays(
      new StreamArrays(n, n_padded, static_cast<double*>(memory)));
  StreamKernels::first_touch(*arrays, pool);
  return arrays;
}

BandwidthResult measure_bandwidth(StreamOp op, StreamArrays& arrays,
                                  ThreadPool& pool, int passes) {
  passes = std::max(1, passes);
  std::vector<double> partial(static_cast<size_t>(pool.size()), 0.0);
  volatile double sink = 0;
  StreamKernels::run(op, arrays, pool, partial);  // untimed warm-up
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(passes));
  for (int p = 0; p < passes; ++p) {
    const auto start = std::chrono::steady_clock::now();
    StreamKernels::run(op, arrays, pool, partial);
    const auto stop = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
    double sum = 0;
    for (double s : partial) sum += s;
    sink = sink + sum;  // keeps the read loop's result alive
  }
  BandwidthResult result;
  result.passes = passes;
  result.bytes_per_pass = arrays.size() * stream_op_bytes_per_element(op);
  std::sort(seconds.begin(), seconds.end());
  const double bytes = static_cast<double>(result.bytes_per_pass);
  result.best_gb_s = bytes / std::max(seconds.front(), 1e-9) / 1e9;
  const size_t mid = seconds.size() / 2;
  const double median = seconds.size() % 2 == 1
                            ? seconds[mid]
                            : 0.5 * (seconds[mid - 1] + seconds[mid]);
  result.median_gb_s = bytes / std::max(median, 1e-9) / 1e9;
  return result;
}

}  // namespace strata::cpu
