// kernels/cpu/simd rms_norm, add_rms_norm and rope_rotate against
// reference::ops: the residual sum bit for bit; RMSNorm
// within one ulp (it sums the same double squares in another order) and, on
// these inputs, almost always bit-equal; the RoPE rotation bit for bit, for
// both pair orders, partial rotation (n_rot < head_dim) and widths that are
// not multiples of the vector. Also: the reference's rope equals
// rope_angles + rope_rotate, and rope_angles against cos/sin computed here
// directly from the formula.
#include "kernels/cpu/simd/norm_rope.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/ops/elementwise.h"

namespace strata::kernels::simd {
namespace {

namespace ops = reference::ops;

std::vector<float> randoms(int64_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

int64_t ulps(float a, float b) {
  const int32_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return std::llabs(int64_t{ia} - int64_t{ib});
}

TEST(SimdRmsNorm, WithinOneUlpOfTheReference) {
  if (!norm_rope_supported()) GTEST_SKIP() << "this CPU lacks AVX2";
  ThreadPool pool(2);
  int64_t values = 0, unequal = 0;
  for (int64_t dim : {1, 7, 8, 9, 64, 256, 576, 640, 2049}) {
    for (int64_t rows : {1, 3, 37}) {
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(testing::Message() << dim << " x " << rows << " weighted " << weighted);
        // Rows of very different scales, as residual streams have.
        std::vector<float> x = randoms(rows * dim, static_cast<uint32_t>(dim * rows), 1.0f);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < dim; ++i) x[r * dim + i] *= std::ldexp(1.0f, int(r % 7) * 5 - 10);
        }
        const std::vector<float> w = randoms(dim, 99, 0.5f);
        const float* wp = weighted ? w.data() : nullptr;
        std::vector<float> want(x.size()), got(x.size());
        ops::rms_norm(x.data(), wp, rows, dim, 1e-6f, want.data(), pool);
        simd::rms_norm(x.data(), wp, rows, dim, 1e-6f, got.data(), pool);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_LE(ulps(want[i], got[i]), 1) << i << ": " << want[i] << " vs " << got[i];
          unequal += want[i] != got[i];
        }
        values += static_cast<int64_t>(x.size());
        // In place (y aliasing x) gives the same.
        std::vector<float> in_place = x;
        simd::rms_norm(in_place.data(), wp, rows, dim, 1e-6f, in_place.data(), pool);
        ASSERT_EQ(in_place, got);
      }
    }
  }
  EXPECT_LT(unequal * 1000, values) << unequal << " of " << values << " differ";
}

TEST(SimdAddRmsNorm, SumEqualsReferenceAddAndNormEqualsRmsNorm) {
  if (!norm_rope_supported()) GTEST_SKIP() << "this CPU lacks AVX2";
  ThreadPool pool(2);
  for (int64_t dim : {1, 9, 576, 2049}) {
    for (int64_t rows : {1, 5, 64}) {
      SCOPED_TRACE(testing::Message() << dim << " x " << rows);
      const std::vector<float> x0 = randoms(rows * dim, static_cast<uint32_t>(dim + rows), 3.0f);
      const std::vector<float> delta = randoms(rows * dim, static_cast<uint32_t>(7 * dim), 0.7f);
      const std::vector<float> w = randoms(dim, 5, 0.5f);
      std::vector<float> want_x(x0.size());
      ops::add(x0.data(), delta.data(), rows * dim, want_x.data());
      std::vector<float> want_y(x0.size());
      simd::rms_norm(want_x.data(), w.data(), rows, dim, 1e-5f, want_y.data(), pool);

      std::vector<float> x = x0, y(x0.size(), -1.0f);
      simd::add_rms_norm(x.data(), delta.data(), w.data(), rows, dim, 1e-5f, y.data(), pool);
      ASSERT_EQ(x, want_x);
      ASSERT_EQ(y, want_y);
      // Without y: only the sum.
      std::vector<float> x2 = x0;
      simd::add_rms_norm(x2.data(), delta.data(), w.data(), rows, dim, 1e-5f, nullptr, pool);
      ASSERT_EQ(x2, want_x);
    }
  }
}

struct RopeCase {
  RopeOrder order;
  int n_heads, head_dim, n_rot;
};

TEST(SimdRope, RotationEqualsReferenceBitForBit) {
  if (!norm_rope_supported()) GTEST_SKIP() << "this CPU lacks AVX2";
  ThreadPool pool(2);
  const RopeCase cases[] = {
      {RopeOrder::kNormal, 9, 64, 64},   {RopeOrder::kNeox, 4, 256, 256},
      {RopeOrder::kNormal, 3, 128, 96},  {RopeOrder::kNeox, 5, 128, 64},
      {RopeOrder::kNormal, 2, 24, 22},   {RopeOrder::kNeox, 3, 40, 34},
      {RopeOrder::kNormal, 1, 2, 2},     {RopeOrder::kNeox, 1, 8, 6},
  };
  for (const RopeCase& c : cases) {
    for (int64_t n : {1, 5, 67}) {
      SCOPED_TRACE(testing::Message() << int(c.order) << " heads " << c.n_heads << " dim "
                                      << c.head_dim << " rot " << c.n_rot << " tokens " << n);
      RopeParams p;
      p.order = c.order;
      p.n_rot = c.n_rot;
      p.freq_base = 10000.0f;
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(t * 37 + 3);
      std::vector<float> cs(static_cast<size_t>(n * c.n_rot));
      ops::rope_angles(pos.data(), n, p, cs.data(), pool);
      const std::vector<float> x = randoms(n * c.n_heads * c.head_dim, 5, 2.0f);
      std::vector<float> want = x, got = x, whole = x;
      ops::rope_rotate(want.data(), n, c.n_heads, c.head_dim, c.order, c.n_rot, cs.data(), pool);
      simd::rope_rotate(got.data(), n, c.n_heads, c.head_dim, c.order, c.n_rot, cs.data(), pool);
      ops::rope(whole.data(), pos.data(), n, c.n_heads, c.head_dim, p, pool);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
            << i << ": " << want[i] << " vs " << got[i];
      }
      ASSERT_EQ(whole, want);
      // Dimensions past n_rot are untouched.
      for (int64_t r = 0; r < n * c.n_heads; ++r) {
        for (int d = c.n_rot; d < c.head_dim; ++d) {
          ASSERT_EQ(got[r * c.head_dim + d], x[r * c.head_dim + d]);
        }
      }
    }
  }
}

TEST(RopeAngles, FollowTheFormula) {
  ThreadPool pool(1);
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 500000.0f;
  p.freq_scale = 0.5f;
  p.attn_factor = 1.25f;
  std::vector<float> factors(32);
  for (int i = 0; i < 32; ++i) factors[i] = 1.0f + 0.25f * float(i % 4);
  p.freq_factors = factors.data();
  const std::vector<int32_t> pos = {0, 1, 17, 4000};
  std::vector<float> cs(pos.size() * 64);
  ops::rope_angles(pos.data(), static_cast<int64_t>(pos.size()), p, cs.data(), pool);
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int i = 0; i < 32; ++i) {
      // theta_i = pos * base^(-2i/n_rot) * freq_scale / factor_i, in double.
      const double theta = pos[t] * std::pow(500000.0, -2.0 * i / 64) * 0.5 / factors[i];
      EXPECT_NEAR(cs[t * 64 + 2 * i], std::cos(theta) * 1.25, 2e-3) << t << " " << i;
      EXPECT_NEAR(cs[t * 64 + 2 * i + 1], std::sin(theta) * 1.25, 2e-3) << t << " " << i;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::simd
