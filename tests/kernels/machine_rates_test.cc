// kernels/cpu/machine_rates.h: a worker's read bandwidth (by working-set
// size) and FLOP rate,
// measured once and cached per CPU, ISA tier, generator version and thread
// count. The figures depend on the machine; the tests hold the shape
// (positive, the cache read back equal, another thread count measured
// apart, a broken cache file measured again). About a second a measurement.
#include "kernels/cpu/machine_rates.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "model/progress.h"

namespace strata::cpu {
namespace {

namespace fs = std::filesystem;

class MachineRatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (fs::path(::testing::TempDir()) / "strata_rates_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

// Progress of a measurement: a start and an end line when not a terminal;
// nothing when read from the cache.
class RecordedProgress final : public ProgressOutput {
 public:
  bool terminal() const override { return false; }
  void write(std::string_view text) override { written += text; }
  void log(std::string_view line) override { lines.emplace_back(line); }
  std::string written;
  std::vector<std::string> lines;
};

TEST_F(MachineRatesTest, AMeasurementReportsItsProgressACacheReadDoesNot) {
  ThreadPool pool(1);
  RecordedProgress out;
  double now = 0;
  Progress progress(out, [&] { return now += 0.5; });
  EXPECT_FALSE(cached_machine_rates(pool, dir_, &progress).from_cache);
  ASSERT_EQ(out.lines.size(), 2u);
  EXPECT_EQ(out.lines[0], "probing machine rates: started (4 steps)");
  // The fake clock: begin at 0.5, end at 1.0 (advance reads no clock when
  // not on a terminal).
  EXPECT_EQ(out.lines[1], "probing machine rates: done, 4 steps in 0.50 s");
  EXPECT_TRUE(out.written.empty());
  EXPECT_TRUE(cached_machine_rates(pool, dir_, &progress).from_cache);
  EXPECT_EQ(out.lines.size(), 2u);
}

TEST_F(MachineRatesTest, MeasuredOnceThenReadFromTheCache) {
  ThreadPool pool(1);
  const MachineRates first = cached_machine_rates(pool, dir_);
  EXPECT_FALSE(first.from_cache);
  EXPECT_GT(first.read_bytes_per_s, 0);
  EXPECT_GT(first.stream_read_bytes_per_s, 0);
  EXPECT_GE(first.flops_per_s, 0);  // 0 without generated kernels
  ASSERT_TRUE(fs::exists(first.cache_path)) << first.cache_path;
  EXPECT_NE(first.cache_path.find("-t1.txt"), std::string::npos)
      << first.cache_path;

  const MachineRates again = cached_machine_rates(pool, dir_);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.cache_path, first.cache_path);
  EXPECT_DOUBLE_EQ(again.read_bytes_per_s, first.read_bytes_per_s);
  EXPECT_DOUBLE_EQ(again.stream_read_bytes_per_s,
                   first.stream_read_bytes_per_s);
  EXPECT_DOUBLE_EQ(again.decode_read_bytes_per_s,
                   first.decode_read_bytes_per_s);
  EXPECT_DOUBLE_EQ(again.flops_per_s, first.flops_per_s);

  // A file without the figures is measured again and replaced.
  std::ofstream(first.cache_path) << "read_bandwidth nonsense\n";
  const MachineRates remeasured = cached_machine_rates(pool, dir_);
  EXPECT_FALSE(remeasured.from_cache);
  EXPECT_TRUE(cached_machine_rates(pool, dir_).from_cache);
}

TEST_F(MachineRatesTest, ReadPointsRoundTripThroughTheCache) {
  ThreadPool pool(1);
  const MachineRates first = cached_machine_rates(pool, dir_);
  ASSERT_FALSE(first.from_cache);
  if (first.decode_read_bytes_per_s > 0) {
    // Measured at growing working sets; the large-working-set figure is
    // the 126 MiB one.
    ASSERT_GE(first.read_points.size(), 4u);
    for (size_t i = 0; i < first.read_points.size(); ++i) {
      EXPECT_GT(first.read_points[i].bytes_per_s, 0) << i;
      if (i > 0) {
        EXPECT_GT(first.read_points[i].bytes, first.read_points[i - 1].bytes);
      }
    }
    EXPECT_EQ(first.read_points[3].bytes, int64_t{126} << 20);
    EXPECT_DOUBLE_EQ(first.decode_read_bytes_per_s,
                     first.read_points[3].bytes_per_s);
  }
  const MachineRates again = cached_machine_rates(pool, dir_);
  ASSERT_TRUE(again.from_cache);
  ASSERT_EQ(again.read_points.size(), first.read_points.size());
  for (size_t i = 0; i < first.read_points.size(); ++i) {
    EXPECT_EQ(again.read_points[i].bytes, first.read_points[i].bytes);
    EXPECT_DOUBLE_EQ(again.read_points[i].bytes_per_s,
                     first.read_points[i].bytes_per_s);
  }

  // A file written by hand: points in any order come back sorted.
  std::ofstream(first.cache_path)
      << "format 2\nread_point 67108864 3e10\nread_point 16777216 4e10\n"
         "read_bandwidth 2.5e10\ndecode_read_bandwidth 2.5e10\n"
         "stream_read_bandwidth 2e10\nflop_rate 1e11\n"
         "matmul_overhead 5e-06\n";
  const MachineRates hand = cached_machine_rates(pool, dir_);
  ASSERT_TRUE(hand.from_cache);
  ASSERT_EQ(hand.read_points.size(), 2u);
  EXPECT_EQ(hand.read_points[0].bytes, 16777216);
  EXPECT_DOUBLE_EQ(hand.read_points[0].bytes_per_s, 4e10);
  EXPECT_EQ(hand.read_points[1].bytes, 67108864);
  EXPECT_DOUBLE_EQ(hand.read_points[1].bytes_per_s, 3e10);
  EXPECT_DOUBLE_EQ(hand.read_bytes_per_s, 2.5e10);
  EXPECT_DOUBLE_EQ(hand.matmul_overhead_s, 5e-6);

  // A format 1 file (no format line, no points) is measured again.
  std::ofstream(first.cache_path)
      << "read_bandwidth 2.5e10\ndecode_read_bandwidth 2.5e10\n"
         "stream_read_bandwidth 2e10\nflop_rate 1e11\n"
         "matmul_overhead 5e-06\n";
  EXPECT_FALSE(cached_machine_rates(pool, dir_).from_cache);
  // As is a format 2 file that measured the decode matmul but lost its
  // points.
  std::ofstream(first.cache_path)
      << "format 2\nread_bandwidth 2.5e10\ndecode_read_bandwidth 2.5e10\n"
         "stream_read_bandwidth 2e10\nflop_rate 1e11\n"
         "matmul_overhead 5e-06\n";
  EXPECT_FALSE(cached_machine_rates(pool, dir_).from_cache);
}

TEST_F(MachineRatesTest, EachThreadCountHasItsOwnFile) {
  ThreadPool one(1);
  ThreadPool two(2);
  const MachineRates a = cached_machine_rates(one, dir_);
  const MachineRates b = cached_machine_rates(two, dir_);
  EXPECT_NE(a.cache_path, b.cache_path);
  EXPECT_FALSE(b.from_cache);
}

}  // namespace
}  // namespace strata::cpu
