// Inline AVX2 + FMA + F16C helpers shared by the kernels of this folder
// (internal: included by its .cc files only). Functions carry the target
// attribute, so callers must be compiled or attributed for that tier too.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/reference/ops/elementwise.h"

#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace strata::kernels::simd {

// ggml_v_expf (ggml-cpu/vec.h) on 8 lanes: the constants and operation order
// of reference::ops::exp_ggml, so each lane equals it bit for bit. Lanes
// whose exponent leaves the normal range take the scalar function.
STRATA_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b = _mm256_fnmadd_ps(
      n, _mm256_set1_ps(0x1.7f7d1cp-20f),
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(
      _mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                      _mm256_set1_ps(0x1.573e2ep-5f)),
                      u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                      _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const int out_of_range =
      _mm256_movemask_ps(_mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_NLE_UQ));
  __m256 r = _mm256_fmadd_ps(k, j, k);
  if (out_of_range != 0) {
    alignas(32) float xs[8];
    alignas(32) float rs[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(rs, r);
    for (int l = 0; l < 8; ++l) {
      if ((out_of_range >> l) & 1) rs[l] = reference::ops::exp_ggml(xs[l]);
    }
    r = _mm256_load_ps(rs);
  }
  return r;
}

}  // namespace strata::kernels::simd
