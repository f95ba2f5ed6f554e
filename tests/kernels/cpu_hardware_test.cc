// kernels/cpu/cpu_info.h and memory_bandwidth.h: what `strata hardware` and
// bench/stream_triad rest on. The figures themselves depend on the machine;
// these tests hold the shape (positive, best >= median, bytes counted as
// STREAM counts them) on small arrays so they stay fast.
#include <gtest/gtest.h>
#include <sched.h>

#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/memory_bandwidth.h"

namespace strata::cpu {
namespace {

constexpr int64_t kSmall = int64_t{1} << 18;  // 2 MiB per array

TEST(MemoryBandwidth, ReadGivesAPositiveRate) {
  ThreadPool pool(2);
  auto arrays = StreamArrays::create(kSmall, pool);
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  const BandwidthResult r = measure_bandwidth(StreamOp::kRead, **arrays, pool, 3);
  EXPECT_GT(r.best_gb_s, 0.0);
  EXPECT_GT(r.median_gb_s, 0.0);
  EXPECT_GE(r.best_gb_s, r.median_gb_s);
  EXPECT_EQ(r.bytes_per_pass, kSmall * 8);
  EXPECT_EQ(r.passes, 3);
}

TEST(MemoryBandwidth, EveryOpGivesAPositiveRateOnRaggedSizes) {
  // Not a multiple of the page-sized chunks or of the read loop's 8.
  const int64_t n = kSmall + 13;
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    auto arrays = StreamArrays::create(n, pool);
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    for (StreamOp op : kAllStreamOps) {
      const BandwidthResult r = measure_bandwidth(op, **arrays, pool, 1);
      EXPECT_GT(r.best_gb_s, 0.0) << stream_op_name(op);
      EXPECT_EQ(r.bytes_per_pass, n * stream_op_bytes_per_element(op))
          << stream_op_name(op);
    }
  }
}

TEST(MemoryBandwidth, DefaultArraysAreFourTimesTheLastLevelCache) {
  EXPECT_EQ(default_stream_elements(0) * 8, int64_t{64} << 20);
  EXPECT_GE(default_stream_elements(int64_t{32} << 20) * 8, int64_t{128} << 20);
  EXPECT_EQ(default_stream_elements(int64_t{32} << 20) % 4096, 0);
}

TEST(StreamArrays, RejectsSizesOutOfRange) {
  ThreadPool pool(1);
  EXPECT_EQ(StreamArrays::create(0, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StreamArrays::create(int64_t{1} << 62, pool).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuInfo, ReportsCpusAndCaches) {
  const CpuInfo info = read_cpu_info();
  EXPECT_GE(info.logical_cpus, 1);
  EXPECT_GE(info.allowed_cpus, 1);
  EXPECT_LE(info.allowed_cpus, info.logical_cpus);
  EXPECT_FALSE(info.model.empty());
#if defined(__x86_64__)
  EXPECT_TRUE(info.has("sse2"));  // baseline of x86-64
  EXPECT_FALSE(info.vendor.empty());
#endif
  for (const CacheInfo& c : info.caches) {
    EXPECT_GE(c.level, 1);
    EXPECT_GT(c.size_bytes, 0) << "L" << c.level << " " << c.type;
  }
}

// usable_threads() follows the affinity mask: pinned to one CPU, it is 1;
// with the mask restored, the mask's count.
TEST(CpuInfo, UsableThreadsFollowTheAffinityMask) {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &saved)) first = c;
  }
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int pinned = cpu::usable_threads();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(pinned, 1);
  EXPECT_EQ(cpu::usable_threads(), CPU_COUNT(&saved));
}

TEST(CpuInfo, FormatsCacheSizes) {
  EXPECT_EQ(format_cache_size(32 << 10), "32 KiB");
  EXPECT_EQ(format_cache_size(32 << 20), "32 MiB");
  EXPECT_EQ(format_cache_size(1536), "1536 B");
}

}  // namespace
}  // namespace strata::cpu
