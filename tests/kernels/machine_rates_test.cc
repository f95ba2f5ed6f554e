// kernels/cpu/machine_rates.h: a worker's read bandwidth and FLOP rate,
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
