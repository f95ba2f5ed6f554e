// Reference ops against naive formulas, on ragged shapes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/attention.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/ops/swiglu_oai.h"
#include "kernels/cpu/reference/quantize.h"

namespace strata::reference::ops {
namespace {

using kernels::AttentionParams;
using kernels::KvView;
using kernels::RopeOrder;
using kernels::RopeParams;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class MatmulTest : public ::testing::TestWithParam<GgmlType> {};

// y = x · Wᵀ equals the f64 dot of the dequantized weights with the
// activations as the paired type rounds them, for ragged row counts.
TEST_P(MatmulTest, MatchesDequantizedDot) {
  const GgmlType type = GetParam();
  const int64_t block = ggml_type_info(type).block_size;
  const int64_t n_in = block == 256 ? 512 : 96;
  const int64_t n_out = 37;  // not a multiple of any chunk
  const int64_t row_bytes = *ggml_row_bytes(type, n_in);
  std::vector<uint8_t> w(row_bytes * n_out);
  const std::vector<float> wf = randn(n_in * n_out, 1);
  for (int64_t r = 0; r < n_out; ++r) {
    ASSERT_TRUE(quantize_row(type, wf.data() + r * n_in, n_in, w.data() + r * row_bytes).ok());
  }
  auto m = make_weight_matrix("w", type, w.data(), n_in, n_out, w.size());
  ASSERT_TRUE(m.ok()) << m.status();
  for (int n_rows : {1, 3, 5}) {
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      MatmulScratch scratch(8, n_in, threads);
      const std::vector<float> x = randn(n_rows * n_in, 2 + n_rows);
      std::vector<float> y(n_rows * n_out);
      matmul(*m, x.data(), n_rows, y.data(), scratch, pool);
      std::vector<float> wrow(n_in), xa(n_in);
      for (int t = 0; t < n_rows; ++t) {
        round_activations(activation_type(type), x.data() + t * n_in, n_in, xa.data());
        for (int64_t r = 0; r < n_out; ++r) {
          ASSERT_TRUE(dequantize_row(type, w.data() + r * row_bytes, n_in, wrow.data()).ok());
          double ref = 0;
          for (int64_t i = 0; i < n_in; ++i) ref += double(wrow[i]) * xa[i];
          // Q8_1's cached block sum s is rounded to f16 (as ggml does), so
          // weights with an offset (*_1) see m * f16(s): a looser bound.
          const bool offset = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
          EXPECT_NEAR(y[t * n_out + r], ref,
                      (offset ? 1e-2 : 2e-3) * (1 + std::fabs(ref)))
              << ggml_type_info(type).name << " row " << r << " token " << t;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, MatmulTest,
    ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                      GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                      GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ2_K,
                      GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                      GgmlType::kQ6_K, GgmlType::kMXFP4),
    [](const ::testing::TestParamInfo<GgmlType>& p) {
      return std::string(ggml_type_info(p.param).name);
    });

TEST(Matmul, RefusesRowsThatAreNotWholeBlocks) {
  std::vector<uint8_t> w(1000);
  auto m = make_weight_matrix("blk.0.attn_q.weight", GgmlType::kQ4_K, w.data(), 100, 2, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(RmsNorm, MatchesFormula) {
  ThreadPool pool(2);
  const int rows = 3, dim = 13;
  const std::vector<float> x = randn(rows * dim, 5), w = randn(dim, 6);
  std::vector<float> y(rows * dim);
  rms_norm(x.data(), w.data(), rows, dim, 1e-5f, y.data(), pool);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double s = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) {
      EXPECT_NEAR(y[r * dim + i], x[r * dim + i] * s * w[i], 1e-5);
    }
  }
}

// RoPE rotates pair (a, b) by pos * base^(-2i/n_rot); dims past n_rot stay.
TEST(Rope, NormalAndNeoxPairsMatchFormula) {
  ThreadPool pool(2);
  const int heads = 2, head_dim = 10, n_rot = 8;
  const std::vector<int32_t> pos = {0, 7, 123};
  for (RopeOrder order : {RopeOrder::kNormal, RopeOrder::kNeox}) {
    std::vector<float> x = randn(pos.size() * heads * head_dim, 7);
    const std::vector<float> x0 = x;
    RopeParams p;
    p.order = order;
    p.n_rot = n_rot;
    p.freq_base = 10000.0f;
    rope(x.data(), pos.data(), static_cast<int64_t>(pos.size()), heads, head_dim, p, pool);
    for (size_t t = 0; t < pos.size(); ++t) {
      for (int h = 0; h < heads; ++h) {
        const float* in = x0.data() + (t * heads + h) * head_dim;
        const float* out = x.data() + (t * heads + h) * head_dim;
        for (int i = 0; i < n_rot / 2; ++i) {
          const int a = order == RopeOrder::kNormal ? 2 * i : i;
          const int b = order == RopeOrder::kNormal ? 2 * i + 1 : i + n_rot / 2;
          const double theta = pos[t] * std::pow(10000.0, -2.0 * i / n_rot);
          EXPECT_NEAR(out[a], in[a] * std::cos(theta) - in[b] * std::sin(theta), 1e-3);
          EXPECT_NEAR(out[b], in[a] * std::sin(theta) + in[b] * std::cos(theta), 1e-3);
        }
        for (int d = n_rot; d < head_dim; ++d) EXPECT_EQ(out[d], in[d]);
      }
    }
  }
}

// Attention by the formula of attention.h, in double, for f32 q [n][n_head]
// [dk], k [pos][n_head_kv][dk], v [pos][n_head_kv][dv]: causal, p's sliding
// window, soft-cap, scale and sinks (head h's sink joins its softmax
// denominator unscaled). Out: [n][n_head][dv].
std::vector<double> direct_attention(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v,
                                     const std::vector<int32_t>& pos, const AttentionParams& p) {
  const int n_tokens = static_cast<int>(pos.size());
  std::vector<double> out(static_cast<size_t>(n_tokens) * p.n_head * p.head_dim_v);
  for (int t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      const int g = h / (p.n_head / p.n_head_kv);
      std::vector<double> s;
      std::vector<int> keys;
      for (int j = 0; j <= pos[t]; ++j) {
        if (p.sliding_window > 0 && pos[t] - j >= p.sliding_window) continue;
        double d = 0;
        for (int i = 0; i < p.head_dim_k; ++i) {
          d += double(q[(t * p.n_head + h) * p.head_dim_k + i]) *
               k[(j * p.n_head_kv + g) * p.head_dim_k + i];
        }
        if (p.softcap > 0) d = p.softcap * std::tanh(d / p.softcap);
        s.push_back(d * p.scale);
        keys.push_back(j);
      }
      double mx = p.sinks != nullptr ? p.sinks[h] : -1e30;
      for (double e : s) mx = std::max(mx, e);
      double sum = p.sinks != nullptr ? std::exp(p.sinks[h] - mx) : 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int dv = 0; dv < p.head_dim_v; ++dv) {
        double ref = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
          ref += s[i] / sum * v[(keys[i] * p.n_head_kv + g) * p.head_dim_v + dv];
        }
        out[(t * p.n_head + h) * p.head_dim_v + dv] = ref;
      }
    }
  }
  return out;
}

// Attention with GQA, causal and sliding-window masks, soft-capping, f32
// cache: against a direct evaluation of the formula in attention.h.
TEST(Attention, MatchesNaiveWithMasksAndGqa) {
  ThreadPool pool(3);
  AttentionParams p;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.head_dim_k = 8;
  p.head_dim_v = 6;
  const int n_ctx = 11, n_tokens = 4, pos0 = 7;
  const std::vector<float> k = randn(n_ctx * p.n_head_kv * p.head_dim_k, 8);
  const std::vector<float> v = randn(n_ctx * p.n_head_kv * p.head_dim_v, 9);
  const std::vector<float> q = randn(n_tokens * p.n_head * p.head_dim_k, 10);
  std::vector<int32_t> pos(n_tokens);
  for (int t = 0; t < n_tokens; ++t) pos[t] = pos0 + t;
  for (int window : {0, 3}) {
    for (float cap : {0.0f, 2.0f}) {
      p.sliding_window = window;
      p.softcap = cap;
      p.scale = 0.35f;
      AttentionScratch scratch(n_ctx, p, pool.size());
      std::vector<float> out(n_tokens * p.n_head * p.head_dim_v);
      attention(q.data(), pos.data(), n_tokens, KvView{GgmlType::kF32, k.data(), v.data(), n_ctx},
                p, out.data(), scratch, pool);
      const std::vector<double> want = direct_attention(q, k, v, pos, p);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(out[i], want[i], 1e-4) << "window " << window << " cap " << cap;
      }
    }
  }
}

// Attention sinks (gpt-oss): head h's softmax gets sinks[h] in its
// denominator, p_j = e^(s_j - m) / (sum_k e^(s_k - m) + e^(sink - m)) with
// m = max(s, sink), the sink unscaled; with and without a sliding window,
// sinks both above and below the scores. Against a direct evaluation.
TEST(Attention, SinksJoinTheSoftmaxDenominator) {
  ThreadPool pool(2);
  AttentionParams p;
  p.n_head = 6;
  p.n_head_kv = 2;
  p.head_dim_k = 8;
  p.head_dim_v = 5;
  p.scale = 0.4f;
  const std::vector<float> sinks = {-3.0f, 0.0f, 1.5f, 9.0f, -0.5f, 4.0f};
  p.sinks = sinks.data();
  const int n_ctx = 13, n_tokens = 5, pos0 = 8;
  const std::vector<float> k = randn(n_ctx * p.n_head_kv * p.head_dim_k, 18);
  const std::vector<float> v = randn(n_ctx * p.n_head_kv * p.head_dim_v, 19);
  const std::vector<float> q = randn(n_tokens * p.n_head * p.head_dim_k, 20);
  std::vector<int32_t> pos(n_tokens);
  for (int t = 0; t < n_tokens; ++t) pos[t] = pos0 + t;
  for (int window : {0, 4}) {
    p.sliding_window = window;
    AttentionScratch scratch(n_ctx, p, pool.size());
    std::vector<float> out(n_tokens * p.n_head * p.head_dim_v);
    attention(q.data(), pos.data(), n_tokens, KvView{GgmlType::kF32, k.data(), v.data(), n_ctx},
              p, out.data(), scratch, pool);
    const std::vector<double> want = direct_attention(q, k, v, pos, p);
    for (size_t i = 0; i < want.size(); ++i) {
      const size_t t = i / (p.n_head * p.head_dim_v), h = i / p.head_dim_v % p.n_head;
      EXPECT_NEAR(out[i], want[i], 1e-5) << "window " << window << " token " << t << " head " << h;
    }
  }
}

TEST(Activations, SwiGluAndGeGlu) {
  ThreadPool pool(2);
  const std::vector<float> g = {-12.0f, -1.5f, 0.0f, 0.7f, 3.0f, 11.0f};
  const std::vector<float> u = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.0f};
  std::vector<float> y(g.size());
  swiglu(g.data(), u.data(), g.size(), y.data(), pool);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(y[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-5);
  }
  geglu(g.data(), u.data(), g.size(), y.data(), pool);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double gelu = 0.5 * x * (1 + std::tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(y[i], gelu * u[i], 2e-3 * (1 + std::fabs(gelu * u[i])));  // f16 table
  }
}

// gpt-oss's clamped SwiGLU against the formula in f64: gate clamped from
// above at the limit, up on both sides, then x sigmoid(alpha x) (up + 1).
TEST(Activations, SwiGluOaiClampsAndShifts) {
  ThreadPool pool(2);
  const std::vector<float> g = {-30.0f, -7.5f, -1.0f, 0.0f, 0.3f, 2.0f, 6.99f, 7.0f, 12.0f, 90.0f};
  const std::vector<float> u = {0.5f, 20.0f, -20.0f, 3.0f, -1.0f, -7.0f, 7.5f, 0.0f, -2.0f, 1.0f};
  std::vector<float> y(g.size());
  swiglu_oai(g.data(), u.data(), g.size(), kGptOssAlpha, kGptOssLimit, y.data(), pool);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = std::min<double>(g[i], 7.0);
    const double up = std::clamp<double>(u[i], -7.0, 7.0);
    const double want = x / (1.0 + std::exp(-1.702 * x)) * (up + 1.0);
    EXPECT_NEAR(y[i], want, 1e-6 * (1.0 + std::fabs(want))) << "gate " << g[i] << " up " << u[i];
  }
  // Above the limit the gate is the limit: 12 and 90 give 7's value.
  EXPECT_EQ(swiglu_oai_one(12.0f, 1.0f, kGptOssAlpha, kGptOssLimit),
            swiglu_oai_one(7.0f, 1.0f, kGptOssAlpha, kGptOssLimit));
  // up + 1 = 0 at up = -1: the output is exactly 0 whatever the gate.
  EXPECT_EQ(swiglu_oai_one(3.0f, -1.0f, kGptOssAlpha, kGptOssLimit), 0.0f);
  // In place (out aliasing gate).
  std::vector<float> inplace = g;
  swiglu_oai(inplace.data(), u.data(), g.size(), kGptOssAlpha, kGptOssLimit, inplace.data(), pool);
  EXPECT_EQ(inplace, y);
}

TEST(SoftCap, BoundsValues) {
  std::vector<float> x = {-1000.0f, 0.0f, 1.0f, 1000.0f};
  soft_cap(x.data(), x.size(), 30.0f);
  EXPECT_NEAR(x[0], -30.0f, 1e-4);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_NEAR(x[2], 30 * std::tanh(1.0 / 30), 1e-6);
  EXPECT_NEAR(x[3], 30.0f, 1e-4);
}

}  // namespace
}  // namespace strata::reference::ops

namespace strata::reference::ops {
namespace {

TEST(ExpGgml, CloseToExpAndZeroAtMinusInfinity) {
  for (float x = -87.0f; x < 88.0f; x += 0.137f) {  // normal results
    const double ref = std::exp(double(x));
    EXPECT_NEAR(exp_ggml(x), ref, 4e-7 * ref) << x;
  }
  EXPECT_EQ(exp_ggml(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_ggml(0.0f), 1.0f);
}

}  // namespace
}  // namespace strata::reference::ops
