// The tuner: every candidate it keeps passes the reference check, winners
// go to the cache file and come back from it without measuring again.
#include <sched.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/jit/tuner.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/quantize.h"

namespace strata::kernels::jit {
namespace {

namespace ops = reference::ops;

// CPUs in this process's affinity mask (at least 1).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

std::vector<uint8_t> random_weights(GgmlType type, int64_t n_in, int64_t n_out) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t row_bytes = *ggml_row_bytes(type, n_in);
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * n_out));
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    for (float& v : row) v = dist(rng);
    EXPECT_TRUE(reference::quantize_row(type, row.data(), n_in,
                                        bytes.data() + r * row_bytes).ok());
  }
  return bytes;
}

// A random matrix of `type` with its bytes, and tuner options that write
// into a fresh folder `name` under the test's temporary directory.
struct TuneCase {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
  TuneOptions options;
};

std::unique_ptr<TuneCase> make_case(GgmlType type, int64_t n_in, int64_t n_out,
                                    const std::string& name) {
  auto c = std::make_unique<TuneCase>();
  c->options.cache_dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(c->options.cache_dir);
  c->bytes = random_weights(type, n_in, n_out);
  auto w = ops::make_weight_matrix("w", type, c->bytes.data(), n_in, n_out, c->bytes.size());
  EXPECT_TRUE(w.ok()) << w.status();
  if (w.ok()) c->w = *w;
  return c;
}

TEST(Tuner, KeepsACorrectWinnerAndCachesIt) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  const std::string dir = ::testing::TempDir() + "/strata-tune-test";
  std::filesystem::remove_all(dir);
  const int64_t n_in = 256, n_out = 67;
  const std::vector<uint8_t> bytes = random_weights(GgmlType::kQ4_K, n_in, n_out);
  auto w = ops::make_weight_matrix("w", GgmlType::kQ4_K, bytes.data(), n_in,
                                   n_out, bytes.size());
  ASSERT_TRUE(w.ok());
  ThreadPool pool(2);
  KernelCache cache;
  JitScratch scratch(64, n_in);
  TuneOptions options;
  options.cache_dir = dir;
  options.prefill_rows = 16;

  auto m = JitMatmul::create(*w, IsaTier::kAvx2, KernelParams{}, &cache, pool);
  ASSERT_TRUE(m.ok()) << m.status();
  Tuner tuner(IsaTier::kAvx2, pool.size(), options);
  ASSERT_TRUE(tuner.tune(**m, *w, scratch, pool).ok());
  EXPECT_EQ(tuner.measured(), 1);
  ASSERT_TRUE(tuner.save().ok());
  ASSERT_TRUE(std::filesystem::exists(tuner.cache_path())) << tuner.cache_path();
  const KernelParams tuned = (*m)->params();

  // The tuned matmul still equals the reference (bit for bit equal to the
  // default parameters: the summation order of an output does not change).
  std::vector<float> x(3 * n_in);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(3 * n_out), y_default(3 * n_out);
  (*m)->run(x.data(), 3, y.data(), scratch, pool);
  ASSERT_TRUE((*m)->set_params(KernelParams{}).ok());
  (*m)->run(x.data(), 3, y_default.data(), scratch, pool);
  EXPECT_EQ(y, y_default);

  // A second tuner reads the winner from the file without measuring.
  Tuner again(IsaTier::kAvx2, pool.size(), options);
  ASSERT_TRUE(again.tune(**m, *w, scratch, pool).ok());
  EXPECT_EQ(again.measured(), 0);
  EXPECT_EQ((*m)->params(), tuned);
  EXPECT_NE(again.summary().find("1 from the cache"), std::string::npos)
      << again.summary();
  std::filesystem::remove_all(dir);
}

TEST(Tuner, ZeroBudgetKeepsDefaults) {
  auto c = make_case(GgmlType::kQ8_0, 64, 5, "strata-tune-test-0");
  c->options.budget_s = 0.0;
  ThreadPool pool(1);
  JitScratch scratch(8, 64);
  auto m = JitMatmul::create(c->w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  ASSERT_TRUE(m.ok());
  Tuner tuner(IsaTier::kAvx2, 1, c->options);
  ASSERT_TRUE(tuner.tune(**m, c->w, scratch, pool).ok());
  EXPECT_EQ(tuner.measured(), 0);
  EXPECT_EQ((*m)->params(), default_params(GgmlType::kQ8_0));
  ASSERT_TRUE(tuner.save().ok());
  EXPECT_FALSE(std::filesystem::exists(tuner.cache_path()));
}

// Shapes measured earlier in the same load count as repeated, not cached.
TEST(Tuner, CountsARepeatedShapeApartFromTheCache) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  auto c = make_case(GgmlType::kQ8_0, 64, 9, "strata-tune-test-repeat");
  c->options.prefill_rows = 8;
  ThreadPool pool(1);
  JitScratch scratch(8, 64);
  auto a = JitMatmul::create(c->w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  auto b = JitMatmul::create(c->w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  ASSERT_TRUE(a.ok() && b.ok());
  Tuner tuner(IsaTier::kAvx2, 1, c->options);
  ASSERT_TRUE(tuner.tune(**a, c->w, scratch, pool).ok());
  ASSERT_TRUE(tuner.tune(**b, c->w, scratch, pool).ok());
  EXPECT_EQ(tuner.measured(), 1);
  EXPECT_EQ((*a)->params(), (*b)->params());
  EXPECT_NE(tuner.summary().find("0 from the cache, 1 repeated"), std::string::npos)
      << tuner.summary();
  std::filesystem::remove_all(c->options.cache_dir);
}

// Timings with more threads than CPUs measure the scheduler: defaults, and
// nothing written.
TEST(Tuner, OversubscribedPoolKeepsDefaultsAndCachesNothing) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  auto c = make_case(GgmlType::kQ4_0, 64, 9, "strata-tune-test-over");
  ThreadPool pool(2 * usable_cpus() + 1);
  ASSERT_TRUE(pool.oversubscribed());
  JitScratch scratch(8, 64);
  auto m = JitMatmul::create(c->w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  ASSERT_TRUE(m.ok());
  Tuner tuner(IsaTier::kAvx2, pool.size(), c->options);
  ASSERT_TRUE(tuner.tune(**m, c->w, scratch, pool).ok());
  EXPECT_EQ(tuner.measured(), 0);
  EXPECT_EQ((*m)->params(), default_params(GgmlType::kQ4_0));
  EXPECT_NE(tuner.summary().find("more threads than CPUs"), std::string::npos)
      << tuner.summary();
  ASSERT_TRUE(tuner.save().ok());
  EXPECT_FALSE(std::filesystem::exists(tuner.cache_path()));
}

// A cache file that cannot be replaced (here a folder stands at its path)
// is an error, and the temporary file is gone.
TEST(Tuner, FailedSaveLeavesNoTemporaryFile) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  auto c = make_case(GgmlType::kQ8_0, 64, 9, "strata-tune-test-fail");
  c->options.prefill_rows = 8;
  ThreadPool pool(1);
  JitScratch scratch(8, 64);
  auto m = JitMatmul::create(c->w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  ASSERT_TRUE(m.ok());
  Tuner tuner(IsaTier::kAvx2, 1, c->options);
  ASSERT_TRUE(tuner.tune(**m, c->w, scratch, pool).ok());
  ASSERT_EQ(tuner.measured(), 1);
  std::filesystem::create_directories(tuner.cache_path() + "/in-the-way");
  EXPECT_FALSE(tuner.save().ok());
  for (const auto& entry : std::filesystem::directory_iterator(c->options.cache_dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
  std::filesystem::remove_all(c->options.cache_dir);
}

}  // namespace
}  // namespace strata::kernels::jit
