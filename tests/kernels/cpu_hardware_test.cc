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
  int expected = CPU_COUNT(&saved);
  if (const std::optional<double> limit = cpu::cgroup_cpu_limit()) {
    expected = std::max(1, std::min(expected, static_cast<int>(*limit)));
  }
  EXPECT_EQ(cpu::usable_threads(), expected);
}

// The cgroup files' text, as the kernel writes them (cgroup v2
// Documentation/admin-guide/cgroup-v2.rst "cpu.max"; v1 CFS bandwidth
// control: cpu.cfs_quota_us of -1 is no limit).
TEST(CpuInfo, ParsesCgroupCpuLimits) {
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("150000 100000\n"), 1.5);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("400000 100000"), 4.0);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("50000 100000"), 0.5);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max(""), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("150000"), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("x 100000"), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup2_cpu_max("100000 0"), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup1_cpu_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(cpu::parse_cgroup1_cpu_quota("200000\n", "100000\n"), 2.0);
  EXPECT_EQ(cpu::parse_cgroup1_cpu_quota("", ""), std::nullopt);
  EXPECT_EQ(cpu::cgroup2_path("0::/kubepods/pod1/c1\n"), "/kubepods/pod1/c1");
  EXPECT_EQ(cpu::cgroup2_path("12:memory:/a\n"), "");
  EXPECT_EQ(cpu::cgroup1_cpu_path("12:memory:/a\n4:cpu,cpuacct:/docker/abc\n0::/\n"),
            "/docker/abc");
  EXPECT_EQ(cpu::cgroup1_cpu_path("0::/x\n"), "");
}

TEST(CpuInfo, FormatsCacheSizes) {
  EXPECT_EQ(format_cache_size(32 << 10), "32 KiB");
  EXPECT_EQ(format_cache_size(32 << 20), "32 MiB");
  EXPECT_EQ(format_cache_size(1536), "1536 B");
}

}  // namespace
}  // namespace strata::cpu
