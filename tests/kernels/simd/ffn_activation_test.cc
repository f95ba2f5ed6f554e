// kernels/cpu/simd swiglu / geglu equal reference::ops's bit for bit, on
// values spanning both sides of every branch (|gate| near 10, exp's range
// edges near ±88, zeros, infinities) and lengths that are not multiples of 8
// or 16, on every vector width this CPU has (8 lanes: avx2; 16: avx512).
#include "kernels/cpu/simd/ffn_activation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/ops/elementwise.h"

namespace strata::kernels::simd {
namespace {

std::vector<float> gates(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = normal(rng);
  const float special[] = {0.0f, -0.0f, 10.0f, -10.0f, 9.999f, -9.999f, 10.001f, -10.001f,
                           88.5f, -88.5f, 104.0f, -104.0f, 1e-30f, -1e-30f, 65504.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(special) && i * 3 < g.size(); ++i) g[i * 3] = special[i];
  return g;
}

// The tiers this CPU runs (the engine passes its own; avx512vnni's vectors
// are avx512's).
std::vector<IsaTier> tiers() {
  std::vector<IsaTier> t{IsaTier::kAvx2};
  if (cpu_has(IsaTier::kAvx512)) t.push_back(IsaTier::kAvx512);
  if (cpu_has(IsaTier::kAvx512Vnni)) t.push_back(IsaTier::kAvx512Vnni);
  return t;
}

void expect_bitwise_equal(const std::vector<float>& want, const std::vector<float>& got) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << "at " << i << ": reference " << want[i] << ", simd " << got[i];
  }
}

// exp's two-step scaling (|x| > 126 ln 2 ~ 87.3) and its saturation (|x| >
// 192 ln 2 ~ 133.1), crossed densely from both sides: every lane of the
// vector exp takes the scalar function's path and value.
TEST(SimdFfnActivation, SwigluEqualsReferenceAcrossExpRangeEdges) {
  if (!ffn_activation_supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::vector<float> g;
  for (float x = 80.0f; x < 140.0f; x += 0.0078125f) {
    g.push_back(x);
    g.push_back(-x);
  }
  const std::vector<float> u(g.size(), 1.5f);
  std::vector<float> want(g.size()), got(g.size());
  ThreadPool pool(1);
  reference::ops::swiglu(g.data(), u.data(), static_cast<int64_t>(g.size()), want.data(), pool);
  for (IsaTier tier : tiers()) {
    SCOPED_TRACE(isa_name(tier));
    std::fill(got.begin(), got.end(), 0.0f);
    swiglu(g.data(), u.data(), static_cast<int64_t>(g.size()), got.data(), pool, tier);
    expect_bitwise_equal(want, got);
  }
}

TEST(SimdFfnActivation, SwigluEqualsReferenceBitForBit) {
  if (!ffn_activation_supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (int64_t n : {1, 7, 8, 15, 16, 17, 61, 5000, 20011}) {
    SCOPED_TRACE(n);
    const std::vector<float> g = gates(n, static_cast<uint32_t>(n));
    const std::vector<float> u = gates(n, static_cast<uint32_t>(n + 1));
    ThreadPool pool(2);
    std::vector<float> want(g.size()), got(g.size());
    reference::ops::swiglu(g.data(), u.data(), n, want.data(), pool);
    for (IsaTier tier : tiers()) {
      SCOPED_TRACE(isa_name(tier));
      std::fill(got.begin(), got.end(), 0.0f);
      swiglu(g.data(), u.data(), n, got.data(), pool, tier);
      expect_bitwise_equal(want, got);
    }
  }
}

TEST(SimdFfnActivation, GegluEqualsReferenceBitForBit) {
  if (!ffn_activation_supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (int64_t n : {1, 7, 8, 15, 16, 17, 61, 5000, 20011}) {
    SCOPED_TRACE(n);
    const std::vector<float> g = gates(n, static_cast<uint32_t>(n + 2));
    const std::vector<float> u = gates(n, static_cast<uint32_t>(n + 3));
    ThreadPool pool(2);
    std::vector<float> want(g.size()), got(g.size());
    reference::ops::geglu(g.data(), u.data(), n, want.data(), pool);
    for (IsaTier tier : tiers()) {
      SCOPED_TRACE(isa_name(tier));
      std::fill(got.begin(), got.end(), 0.0f);
      geglu(g.data(), u.data(), n, got.data(), pool, tier);
      expect_bitwise_equal(want, got);
    }
  }
}

TEST(SimdFfnActivation, OutputMayAliasGate) {
  if (!ffn_activation_supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const std::vector<float> g = gates(999, 5), u = gates(999, 6);
  ThreadPool pool(2);
  std::vector<float> want(g.size());
  reference::ops::geglu(g.data(), u.data(), 999, want.data(), pool);
  for (IsaTier tier : tiers()) {
    SCOPED_TRACE(isa_name(tier));
    std::vector<float> inplace = g;
    geglu(inplace.data(), u.data(), 999, inplace.data(), pool, tier);
    expect_bitwise_equal(want, inplace);
  }
}

// The fused-row forms read [gate | up] rows in place of split arrays.
TEST(SimdFfnActivation, FusedRowsEqualReferenceOnSplitRows) {
  if (!ffn_activation_supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (auto [n_rows, f] : {std::pair<int64_t, int64_t>{1, 1536}, {7, 13}, {3, 23}, {300, 64}}) {
    SCOPED_TRACE(f);
    const std::vector<float> gu = gates(n_rows * 2 * f, static_cast<uint32_t>(f));
    std::vector<float> g(static_cast<size_t>(n_rows * f)), u(g.size());
    for (int64_t t = 0; t < n_rows; ++t) {
      std::copy(gu.begin() + t * 2 * f, gu.begin() + t * 2 * f + f, g.begin() + t * f);
      std::copy(gu.begin() + t * 2 * f + f, gu.begin() + (t + 1) * 2 * f, u.begin() + t * f);
    }
    ThreadPool pool(2);
    std::vector<float> want(g.size()), got(g.size());
    for (IsaTier tier : tiers()) {
      SCOPED_TRACE(isa_name(tier));
      reference::ops::swiglu(g.data(), u.data(), n_rows * f, want.data(), pool);
      swiglu_rows(gu.data(), n_rows, f, got.data(), pool, tier);
      expect_bitwise_equal(want, got);
      reference::ops::geglu(g.data(), u.data(), n_rows * f, want.data(), pool);
      geglu_rows(gu.data(), n_rows, f, got.data(), pool, tier);
      expect_bitwise_equal(want, got);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::simd
