#include "kernels/cpu/reference/ops/elementwise.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::reference::ops {

using kernels::RopeOrder;
using kernels::RopeParams;
using kernels::WeightMatrix;

void embedding_lookup(const WeightMatrix& table, const int32_t* ids,
                      int64_t n, float* out, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      assert(ids[i] >= 0 && ids[i] < table.n_out);
      const absl::Status st =
          dequantize_row(table.type, table.data + ids[i] * table.row_bytes,
                         table.n_in, out + i * table.n_in);
      assert(st.ok());
      (void)st;
    }
  });
}

void rms_norm(const float* x, const float* weight, int64_t n_rows,
              int64_t dim, float eps, float* y, ThreadPool& pool) {
  // Rows per chunk: a pass of the pool costs more than normalising a few
  // thousand values (a decode step's one row, QK-norm's few heads).
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, dim));
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double sum = 0.0;  // ggml_float of f32 squares, as ggml's rms_norm
      for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i] * xr[i]);
      const float mean = static_cast<float>(sum / static_cast<double>(dim));
      const float s = 1.0f / std::sqrt(mean + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * s;
      if (weight != nullptr) {
        for (int64_t i = 0; i < dim; ++i) yr[i] *= weight[i];
      }
    }
  }, grain);
}

namespace {

// YaRN correction range (ggml_rope_yarn_corr_dims, Peng et al. 2023 eq. 17).
void yarn_corr_dims(int n_dims, int n_ctx_orig, float base, float beta_fast,
                    float beta_slow, float dims[2]) {
  auto corr_dim = [&](float n_rot) {
    return n_dims *
           std::log(static_cast<float>(n_ctx_orig) /
                    (n_rot * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(base));
  };
  dims[0] = std::max(0.0f, std::floor(corr_dim(beta_fast)));
  dims[1] = std::min(static_cast<float>(n_dims - 1),
                     std::ceil(corr_dim(beta_slow)));
}

// cos/sin of one pair's angle, with linear scaling and the YaRN ramp
// (rope_yarn in ggml-cpu ops.cpp).
void yarn_angle(float theta_extrap, const RopeParams& p, const float corr[2],
                int i0, float* cos_out, float* sin_out) {
  const float theta_interp = p.freq_scale * theta_extrap;
  float theta = theta_interp;
  float mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const float y = (static_cast<float>(i0) / 2.0f - corr[0]) /
                    std::max(0.001f, corr[1] - corr[0]);
    const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) *
                       p.ext_factor;
    theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
    mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  }
  *cos_out = std::cos(theta) * mscale;
  *sin_out = std::sin(theta) * mscale;
}

}  // namespace

namespace {

// cos/sin of token t's pairs into cs[i][2] (i < n_rot/2).
void angles_of(float position, const RopeParams& p, float theta_scale,
               const float corr[2], float* cs) {
  float theta = position;
  for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
    const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
    yarn_angle(theta / ff, p, corr, i0, &cs[i0], &cs[i0 + 1]);
    theta *= theta_scale;
  }
}

// Rotates the pairs of one token's heads by its angles cs[i][2].
void rotate_token(float* x, int n_heads, int head_dim, RopeOrder order,
                  int n_rot, const float* cs) {
  const int half = n_rot / 2;
  for (int i0 = 0; i0 < n_rot; i0 += 2) {
    const float c = cs[i0], s = cs[i0 + 1];
    // The two elements of this pair.
    const int a = order == RopeOrder::kNormal ? i0 : i0 / 2;
    const int b = order == RopeOrder::kNormal ? i0 + 1 : i0 / 2 + half;
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + int64_t{h} * head_dim;
      const float x0 = xh[a];
      const float x1 = xh[b];
      xh[a] = x0 * c - x1 * s;
      xh[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

void rope_angles(const int32_t* positions, int64_t n_tokens,
                 const RopeParams& p, float* cs, ThreadPool& pool) {
  assert(p.n_rot % 2 == 0);
  const float theta_scale =
      std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float corr[2] = {0.0f, 0.0f};
  if (p.ext_factor != 0.0f) {
    yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast,
                   p.beta_slow, corr);
  }
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      angles_of(static_cast<float>(positions[t]), p, theta_scale, corr,
                cs + t * p.n_rot);
    }
  });
}

void rope_rotate(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 RopeOrder order, int n_rot, const float* cs,
                 ThreadPool& pool) {
  assert(n_rot % 2 == 0 && n_rot <= head_dim);
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      rotate_token(x + t * n_heads * head_dim, n_heads, head_dim, order,
                   n_rot, cs + t * n_rot);
    }
  });
}

void rope(float* x, const int32_t* positions, int64_t n_tokens, int n_heads,
          int head_dim, const RopeParams& p, ThreadPool& pool) {
  assert(p.n_rot % 2 == 0 && p.n_rot <= head_dim);
  std::vector<float> cs(static_cast<size_t>(n_tokens * p.n_rot));
  rope_angles(positions, n_tokens, p, cs.data(), pool);
  rope_rotate(x, n_tokens, n_heads, head_dim, p.order, p.n_rot, cs.data(),
              pool);
}

void swiglu(const float* gate, const float* up, int64_t n, float* out,
            ThreadPool& pool) {
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = gate[i];
          out[i] = g / (1.0f + exp_ggml(-g)) * up[i];
        }
      },
      /*grain=*/4096);  // a decode step's row runs inline
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

void geglu(const float* gate, const float* up, int64_t n, float* out,
           ThreadPool& pool) {
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = gate[i];
          float gelu;
          if (g <= -10.0f) {
            gelu = 0.0f;
          } else if (g >= 10.0f) {
            gelu = g;
          } else {
            const float g16 = f16_to_f32(f32_to_f16(g));
            gelu = f16_to_f32(f32_to_f16(gelu_tanh(g16)));
          }
          out[i] = gelu * up[i];
        }
      },
      /*grain=*/4096);  // a decode step's row runs inline
}

void soft_cap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}

float exp_ggml(float x) {
  // Constants of ggml_v_expf (ggml-cpu/vec.h): 1/ln2, ln2 split in two, and
  // the polynomial's coefficients.
  constexpr float kShift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, kShift);
  const float n = z - kShift;  // round(x / ln2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
  const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));
  const float u = b * b;
  const float j = std::fma(
      std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
               std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
      u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(k, j, k);
  // Near or past the f32 range: scale in two steps (or saturate).
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = std::bit_cast<float>(g + 0x7f000000u);
  const float s2 = std::bit_cast<float>(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

void softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max == -std::numeric_limits<float>::infinity()) {
    std::fill(x, x + n, 0.0f);
    return;
  }
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = x[i + l] = exp_ggml(x[i + l] - max);
    const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6],
                a3 = v[3] + v[7];
    sum += static_cast<double>((a0 + a2) + (a1 + a3));
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t r = 0; r < n; ++r) x[r] *= inv;
}

void add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim) {
  for (int64_t r = 0; r < n_rows; ++r) add(x + r * dim, bias, dim, x + r * dim);
}

}  // namespace strata::reference::ops
