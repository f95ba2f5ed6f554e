// Inline AVX2 + FMA + F16C helpers shared by the kernels of this folder
// (internal: included by its .cc files only). Functions carry the target
// attribute, so callers must be compiled or attributed for that tier too.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/reference/ops/elementwise.h"

#define STRATA_AVX2 __attribute__((target("avx2,fma,f16c")))
// The avx512 tier's helpers: AVX-512 F/BW/VL/DQ over the AVX2 set.
#define STRATA_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))

namespace strata::kernels::simd {

// ggml_v_expf (ggml-cpu/vec.h) on 8 lanes: the constants and operation order
// of reference::ops::exp_ggml, so each lane equals it bit for bit, its
// two-step scaling past the normal range (|n| > 126) included. No call
// inside: a call on that rare path made GCC keep the calling loop's sums
// and constants on the stack.
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
  const __m256 r = _mm256_fmadd_ps(k, j, k);
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  // Ordered compares: a NaN lane keeps r, as exp_ggml's !(|n| > 126).
  const __m256 far = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  if (_mm256_movemask_ps(far) == 0) return r;
  // g = n <= 0 ? 0x82000000 : 0; s1 = 2^(+-127) by bits; s2 = k / s1.
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(
      _mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 past = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 scaled = _mm256_blendv_ps(_mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1),
                                         _mm256_mul_ps(s1, s1), past);
  return _mm256_blendv_ps(r, scaled, far);
}

// exp8 on 16 lanes: the same operations per lane, so each lane equals exp8's
// (and exp_ggml's) bit for bit.
STRATA_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b = _mm512_fnmadd_ps(
      n, _mm512_set1_ps(0x1.7f7d1cp-20f),
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
  const __m512 k = _mm512_castsi512_ps(
      _mm512_add_epi32(e, _mm512_castps_si512(_mm512_set1_ps(1.0f))));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b,
                                      _mm512_set1_ps(0x1.573e2ep-5f)),
                      u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b,
                                      _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_mul_ps(_mm512_set1_ps(0x1.ffffecp-1f), b));
  const __m512 r = _mm512_fmadd_ps(k, j, k);
  const __m512 abs_n = _mm512_castsi512_ps(_mm512_andnot_si512(
      _mm512_castps_si512(_mm512_set1_ps(-0.0f)), _mm512_castps_si512(n)));
  const __mmask16 far = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(126.0f), _CMP_GT_OQ);
  if (far == 0) return r;
  const __mmask16 le0 = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512i g = _mm512_maskz_mov_epi32(le0, _mm512_set1_epi32(static_cast<int>(0x82000000u)));
  const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
  const __mmask16 past = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __m512 scaled = _mm512_mask_blend_ps(past, _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1),
                                             _mm512_mul_ps(s1, s1));
  return _mm512_mask_blend_ps(far, r, scaled);
}

}  // namespace strata::kernels::simd
