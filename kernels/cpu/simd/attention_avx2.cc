// The 8-lane tiles of kernels/cpu/simd attention (AVX2 + FMA + F16C; the
// entry points and what the 16-lane tiles share with these are in
// attention_tiles.h): the softmax of a head's score row, and the score and
// value tiles of up to 4 heads of a GQA group.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/simd/attention_tiles.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd::attention_internal {

STRATA_AVX2 void softmax(float* sc, int64_t off, int64_t n, float scale, bool round_f16,
                         float sink) {
  const int64_t end = (off + n + 7) / 8 * 8;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Scale and max in one pass; four maxima, so no chain of dependent maxes.
  float* x = sc + off;
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 m[4] = {_mm256_set1_ps(kNegInf), _mm256_set1_ps(kNegInf), _mm256_set1_ps(kNegInf),
                 _mm256_set1_ps(kNegInf)};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * q), vs);
      _mm256_storeu_ps(x + i + 8 * q, v);
      m[q] = _mm256_max_ps(m[q], v);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(x + i, v);
    m[0] = _mm256_max_ps(m[0], v);
  }
  float max = kNegInf;
  for (; i < n; ++i) {
    x[i] *= scale;
    max = std::max(max, x[i]);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
  for (float l : lanes) max = std::max(max, l);
  max = std::max(max, sink);
  // Pads hold max so that exp gives 1 there (no slow lanes); zeroed after.
  for (int64_t p = 0; p < off; ++p) sc[p] = max;
  for (int64_t p = off + n; p < end; ++p) sc[p] = max;
  const __m256 vm = _mm256_set1_ps(max);
  auto chunk = [&](int64_t c) STRATA_AVX2 {  // exp of chunk c, pads zeroed, stored
    __m256 v = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + c), vm));
    if (c < off || c + 8 > off + n) {
      alignas(32) float t[8];
      _mm256_store_ps(t, v);
      for (int l = 0; l < 8; ++l) {
        if (c + l < off || c + l >= off + n) t[l] = 0.0f;
      }
      v = _mm256_load_ps(t);
    }
    _mm256_storeu_ps(sc + c, v);
    return v;
  };
  double sum = 0.0;
  int64_t c = 0;
  for (; c + 64 <= end; c += 64) {  // 8 chunks' sums at once (reduce8)
    __m256 v[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) v[q] = chunk(c + 8 * q);
    _mm256_store_ps(lanes, reduce8(v));
    for (float h : lanes) sum += static_cast<double>(h);
  }
  for (; c < end; c += 8) sum += static_cast<double>(hsum(chunk(c)));
  if (sink != kNegInf) sum += static_cast<double>(std::exp(sink - max));
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (int64_t k = 0; k < end; k += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(sc + k), inv);
    if (round_f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(sc + k, v);
  }
}

namespace {

// Scores of M heads for keys [j_begin, j_end): sc[m * sc_stride + j - j_begin].
template <bool kF16, int M>
STRATA_AVX2 void score_heads(const Item& it, const float* qr, int dk, float* sc,
                             int64_t sc_stride) {
  constexpr int N = M == 1 ? 8 : M == 4 ? 2 : 4;
  constexpr int64_t kElem = kF16 ? 2 : 4;
  int64_t j = it.j_begin;
  if (it.prefetch) prefetch_ahead(it, dk * kElem, j, j + kPrefetchRows);
  for (; j + N <= it.j_end; j += N) {
    if (it.prefetch) prefetch_ahead(it, dk * kElem, j + kPrefetchRows, j + kPrefetchRows + N);
    score_tile<kF16, M, N>(qr, dk, it.k + j * it.k_stride, it.k_stride, sc + (j - it.j_begin),
                           sc_stride);
  }
  for (; j < it.j_end; ++j) {
    score_tile<kF16, M, 1>(qr, dk, it.k + j * it.k_stride, it.k_stride, sc + (j - it.j_begin),
                           sc_stride);
  }
}

// value_tile for the last `rest` (< D) chunks of a row.
template <bool kF16, int M, int D>
STRATA_AVX2 inline void value_rest(int rest, const float* p, int64_t p_stride, int64_t n,
                                   const char* vb, int64_t v_stride, float* o, int dv) {
  if constexpr (D > 0) {
    if (rest == D) {
      value_tile<kF16, M, D>(p, p_stride, n, vb, v_stride, o, dv);
    } else {
      value_rest<kF16, M, D - 1>(rest, p, p_stride, n, vb, v_stride, o, dv);
    }
  }
}

// out of M heads from their probabilities p[m * p_stride + j - j_begin], for
// the 8-value chunks [c_begin, c_end) of head_dim_v.
template <bool kF16, int M>
STRATA_AVX2 void value_heads(const Item& it, const float* p, int64_t p_stride, float* o,
                             int dv, int c_begin, int c_end) {
  constexpr int64_t kElem = kF16 ? 2 : 4;
  constexpr int D = value_chunks(M);
  const int64_t n = it.j_end - it.j_begin;
  const char* vb = it.v + it.j_begin * it.v_stride;
  int c = c_begin;
  for (; c + D <= c_end; c += D) {
    value_tile<kF16, M, D>(p, p_stride, n, vb + c * 8 * kElem, it.v_stride, o + c * 8, dv);
  }
  if (c < c_end) {
    value_rest<kF16, M, D - 1>(c_end - c, p, p_stride, n, vb + c * 8 * kElem, it.v_stride,
                               o + c * 8, dv);
  }
}

}  // namespace

template <bool kF16>
STRATA_AVX2 void score_group(const Item& it, const float* qr, int dk, float* sc,
                             int64_t sc_stride, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX2 {
    score_heads<kF16, decltype(mh)::value>(it, qr, dk, sc, sc_stride);
  });
}

template <bool kF16>
STRATA_AVX2 void value_group(const Item& it, const float* p, int64_t p_stride, float* o,
                             int dv, int c_begin, int c_end, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX2 {
    value_heads<kF16, decltype(mh)::value>(it, p, p_stride, o, dv, c_begin, c_end);
  });
}

template void score_group<true>(const Item&, const float*, int, float*, int64_t, int);
template void score_group<false>(const Item&, const float*, int, float*, int64_t, int);
template void value_group<true>(const Item&, const float*, int64_t, float*, int, int, int, int);
template void value_group<false>(const Item&, const float*, int64_t, float*, int, int, int, int);

}  // namespace strata::kernels::simd::attention_internal
