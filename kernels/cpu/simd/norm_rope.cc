#include "kernels/cpu/simd/norm_rope.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd {
namespace {

// Values per parallel chunk: below this a pass of the pool costs more.
constexpr int64_t kGrainValues = 4096;

STRATA_AVX2 void rms_norm_row(const float* x, const float* weight, int64_t dim,
                              float eps, float* y) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);  // f32 squares, as the reference
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  double sum = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
  for (; i < dim; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(dim));
  const float s = 1.0f / std::sqrt(mean + eps);
  const __m256 vs = _mm256_set1_ps(s);
  i = 0;
  for (; i + 8 <= dim; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (weight != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < dim; ++i) {
    const float v = x[i] * s;
    y[i] = weight != nullptr ? v * weight[i] : v;
  }
}

// x += delta over one row (f32 sums, as reference::ops::add).
STRATA_AVX2 void add_row(float* x, const float* delta, int64_t dim) {
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(delta + i)));
  }
  for (; i < dim; ++i) x[i] += delta[i];
}

// All-ones in the first min(n, 8) lanes.
STRATA_AVX2 inline __m256i lanes_below(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// One token: pairs (2i, 2i+1) of every head, cs interleaved (c, s) as the
// pairs are: x * (c, c) + swap(x) * (-s, s). (Not vaddsubps: GCC fuses it
// with the product into vfmaddsub even under -ffp-contract=off.)
STRATA_AVX2 void rotate_normal(float* x, int n_heads, int head_dim, int n_rot,
                               const float* cs) {
  const __m256 even_sign = _mm256_castsi256_ps(
      _mm256_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
  // even lanes x0 c + x1 (-s), odd lanes x1 c + x0 s (= x0 s + x1 c).
  auto rotate = [&](__m256 v, __m256 a) STRATA_AVX2 {
    const __m256 c = _mm256_moveldup_ps(a);
    const __m256 s = _mm256_xor_ps(_mm256_movehdup_ps(a), even_sign);
    return _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), s));
  };
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + int64_t{h} * head_dim;
    int i = 0;
    for (; i + 8 <= n_rot; i += 8) {
      _mm256_storeu_ps(xh + i, rotate(_mm256_loadu_ps(xh + i), _mm256_loadu_ps(cs + i)));
    }
    if (i < n_rot) {
      // The last pairs of a width that is not a multiple of 4 pairs go
      // through the same vector code, masked (a scalar tail would be
      // vectorised by GCC into vfmaddsub, fused, even under
      // -ffp-contract=off). Masked moves only here: they are slow on AMD.
      const __m256i m = lanes_below(n_rot - i);
      _mm256_maskstore_ps(xh + i, m, rotate(_mm256_maskload_ps(xh + i, m),
                                            _mm256_maskload_ps(cs + i, m)));
    }
  }
}

// One token: pairs (i, i + n_rot/2); cs split into cos and sin first.
STRATA_AVX2 void rotate_neox(float* x, int n_heads, int head_dim, int n_rot,
                             const float* cs, float* c, float* s) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    c[i] = cs[2 * i];
    s[i] = cs[2 * i + 1];
  }
  for (int h = 0; h < n_heads; ++h) {
    float* xa = x + int64_t{h} * head_dim;
    float* xb = xa + half;
    // Lanes [i, i + 8) of both halves; masked for the tail, as above.
    auto step = [&](int i, bool masked) STRATA_AVX2 {
      const __m256i m = lanes_below(half - i);
      auto load = [&](const float* p) STRATA_AVX2 {
        return masked ? _mm256_maskload_ps(p + i, m) : _mm256_loadu_ps(p + i);
      };
      auto store = [&](float* p, __m256 v) STRATA_AVX2 {
        if (masked) {
          _mm256_maskstore_ps(p + i, m, v);
        } else {
          _mm256_storeu_ps(p + i, v);
        }
      };
      const __m256 x0 = load(xa), x1 = load(xb), vc = load(c), vs = load(s);
      store(xa, _mm256_sub_ps(_mm256_mul_ps(x0, vc), _mm256_mul_ps(x1, vs)));
      store(xb, _mm256_add_ps(_mm256_mul_ps(x0, vs), _mm256_mul_ps(x1, vc)));
    };
    int i = 0;
    for (; i + 8 <= half; i += 8) step(i, false);
    if (i < half) step(i, true);
  }
}

}  // namespace

bool norm_rope_supported() { return cpu_features().avx2; }

void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim,
              float eps, float* y, ThreadPool& pool) {
  const int64_t grain = std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, dim));
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      rms_norm_row(x + r * dim, weight, dim, eps, y + r * dim);
    }
  }, grain);
}

void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n_rows,
                  int64_t dim, float eps, float* y, ThreadPool& pool) {
  const int64_t grain = std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, dim));
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      add_row(x + r * dim, delta + r * dim, dim);
      if (y != nullptr) rms_norm_row(x + r * dim, weight, dim, eps, y + r * dim);
    }
  }, grain);
}

void rope_rotate(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 RopeOrder order, int n_rot, const float* cs, ThreadPool& pool) {
  const int64_t per_token = int64_t{n_heads} * head_dim;
  const int64_t grain = std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, per_token));
  pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end, int) {
    float c[512], s[512];  // n_rot / 2 of one token (GGUF head sizes <= 1024)
    std::vector<float> heap;
    float* cp = c;
    float* sp = s;
    if (order == RopeOrder::kNeox && n_rot / 2 > 512) {
      heap.resize(static_cast<size_t>(n_rot));
      cp = heap.data();
      sp = heap.data() + n_rot / 2;
    }
    for (int64_t t = begin; t < end; ++t) {
      float* xt = x + t * per_token;
      const float* ct = cs + t * n_rot;
      if (order == RopeOrder::kNormal) {
        rotate_normal(xt, n_heads, head_dim, n_rot, ct);
      } else {
        rotate_neox(xt, n_heads, head_dim, n_rot, ct, cp, sp);
      }
    }
  }, grain);
}

}  // namespace strata::kernels::simd
