#include "kernels/cpu/jit/activations.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::kernels::jit {
namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Round half to even for |v| < 2^22 (as the reference and ggml).
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

template <typename T>
T* alloc(int64_t count) {
  const size_t n = static_cast<size_t>(round_up(std::max<int64_t>(count, 1) *
                                                    int64_t(sizeof(T)), 64));
  void* p = std::aligned_alloc(64, n);
  std::memset(p, 0, n);
  return static_cast<T*>(p);
}

#define STRATA_JIT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define STRATA_JIT_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))


// One 32-element block: amax of |x|, then q = round_even(x * id) (the
// reference's magic-number rounding, lane by lane) and the sum of q.
// Bit for bit the scalar loop.
STRATA_JIT_AVX2 float block_amax(const float* xb) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(xb));
  for (int j = 8; j < 32; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

STRATA_JIT_AVX2 int block_round(const float* xb, float id, int8_t* q) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i v[4];
  for (int k = 0; k < 4; ++k) {
    // vroundps, not the magic-number add: the compiler may fuse a multiply
    // and an add into one FMA, which rounds once, not twice.
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), vid),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v[k] = _mm256_cvtps_epi32(r);  // exact: r is an integer
  }
  const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]),
                                         _mm256_add_epi32(v[2], v[3]));
  // Pack to int8 (in-lane), then put the 32-bit groups back in order.
  const __m256i w01 = _mm256_packs_epi32(v[0], v[1]);
  const __m256i w23 = _mm256_packs_epi32(v[2], v[3]);
  const __m256i b = _mm256_packs_epi16(w01, w23);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The first of x[0, 256) whose magnitude is amax (one of them is).
STRATA_JIT_AVX2 float first_of_magnitude(const float* x, float amax) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 va = _mm256_set1_ps(amax);
  for (int j = 0; j < 256; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), va, _CMP_EQ_OQ));
    if (hit != 0) return x[j + __builtin_ctz(static_cast<unsigned>(hit))];
  }
  return 0.0f;
}

// f rounded to f16 and back (F16C: the same bits as reference::f32_to_f16).
STRATA_JIT_AVX2 float round_to_f16(float f) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)));
}

// Sum of 16 int8 values.
STRATA_JIT_AVX2 int sum16(const int8_t* q) {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i d = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The scale and correction of unit u of a Q8_0 / Q8_1 row: d (f16-rounded,
// d16) and int32 A_z(u) = z sum q (zero point) or A(u) = Q8_1's s16 =
// f16(d_unrounded sum q), which the caller rounds.
inline void store_q8_32_unit(const PackedLayout& l, int64_t u, float d16,
                             int sum, float s16, float* d, float* corr) {
  d[u] = d16;
  if (l.correction == Correction::kZeroPoint) {
    const int32_t z_sum = l.zero_point * sum;  // |.| <= 128 * 32 * 127
    std::memcpy(&corr[u], &z_sum, sizeof z_sum);
  } else if (l.correction == Correction::kMin) {
    corr[u] = s16;
  }
}

// Q8_0 / Q8_1 of one row: per 32 elements, q, d and the correction. The
// AVX2 loop is one function of that target, so its helpers inline (called
// per block from baseline code, they and the calls took 10.7 % of a Q8_0
// prefill's samples on Zen 4, against 2.4 % inlined; docs/perf.md).
// Units [u0, l.n_units) of the row.
STRATA_JIT_AVX2 void quantize_q8_32_avx2(const PackedLayout& l, const float* x,
                                         int8_t* q, float* d, float* corr, int64_t u0 = 0) {
  for (int64_t u = u0; u < l.n_units; ++u) {
    const float* xb = x + u * 32;
    const float amax = block_amax(xb);
    const float dd = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int sum = block_round(xb, id, q + u * 32);
    store_q8_32_unit(l, u, round_to_f16(dd), sum,
                     round_to_f16(dd * static_cast<float>(sum)), d, corr);
  }
}

// max of f32 lanes, or (kAdd) sum of int32 lanes.
template <bool kAdd>
STRATA_JIT_AVX512 inline __m512 lane_op(__m512 a, __m512 b) {
  if constexpr (kAdd) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  } else {
    return _mm512_max_ps(a, b);
  }
}

// Lane b of the result: the max of v[b]'s 16 f32 lanes, or (kAdd) the sum
// of its int32 lanes (the order within one reduction is not the scalar
// loop's, which max and an exact integer sum do not see). A butterfly of
// 128-bit and 32-bit shuffles: 45 shuffles and ops for 16 vectors, against
// 8 a vector reduced alone.
template <bool kAdd>
STRATA_JIT_AVX512 inline __m512 reduce16x16(const __m512* v) {
  constexpr auto op = lane_op<kAdd>;
  __m512 r[8], s[4], t[2];
  for (int i = 0; i < 8; ++i) {  // [v 2i (8) | v 2i+1 (8)]
    r[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  for (int j = 0; j < 4; ++j) {  // [v 4j | v 4j+1 | v 4j+2 | v 4j+3], 4 each
    s[j] = op(_mm512_shuffle_f32x4(r[2 * j], r[2 * j + 1], 0x88),
              _mm512_shuffle_f32x4(r[2 * j], r[2 * j + 1], 0xDD));
  }
  for (int k = 0; k < 2; ++k) {  // 128-bit lane L: [v 8k+L (2) | v 8k+4+L (2)]
    t[k] = op(_mm512_shuffle_ps(s[2 * k], s[2 * k + 1], 0x44),
              _mm512_shuffle_ps(s[2 * k], s[2 * k + 1], 0xEE));
  }
  // 128-bit lane L: [v L, v 4+L, v 8+L, v 12+L]; lane i holds v[i / 4 + 4 (i % 4)].
  const __m512 u = op(_mm512_shuffle_ps(t[0], t[1], 0x88), _mm512_shuffle_ps(t[0], t[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, u);
}

// quantize_q8_32_avx2 on 16 blocks at a time, the blocks' maxima, scales
// and sums in the lanes of one vector (one division for 16 blocks instead
// of two scalar ones a block, and batched horizontal reductions): the same
// amax, d = amax / 127, id = 127 / amax, q = round_even(x id) and sums, so
// the same bytes and floats. The tail of fewer than 16 blocks runs the
// AVX2 loop.
STRATA_JIT_AVX512 void quantize_q8_32_avx512(const PackedLayout& l, const float* x, int8_t* q,
                                             float* d, float* corr) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  int64_t u = 0;
  for (; u + 16 <= l.n_units; u += 16) {
    const float* xb = x + u * 32;
    __m512 m[16];
    for (int b = 0; b < 16; ++b) {
      m[b] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xb + 32 * b), abs_mask),
                           _mm512_and_ps(_mm512_loadu_ps(xb + 32 * b + 16), abs_mask));
    }
    const __m512 amax = reduce16x16<false>(m);
    const __m512 dd = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    const __m512 id = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0f), amax);
    alignas(64) float ids[16];
    _mm512_store_ps(ids, id);
    __m512 sums[16];
    for (int b = 0; b < 16; ++b) {
      const __m512 vid = _mm512_set1_ps(ids[b]);
      const __m512i q0 = _mm512_cvt_roundps_epi32(
          _mm512_mul_ps(_mm512_loadu_ps(xb + 32 * b), vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q1 = _mm512_cvt_roundps_epi32(
          _mm512_mul_ps(_mm512_loadu_ps(xb + 32 * b + 16), vid),
          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      int8_t* qb = q + (u + b) * 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtsepi32_epi8(q1));
      sums[b] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
    }
    const __m512i sum = _mm512_castps_si512(reduce16x16<true>(sums));
    const __m512 d16 = _mm512_cvtph_ps(_mm512_cvtps_ph(dd, _MM_FROUND_TO_NEAREST_INT));
    _mm512_storeu_ps(d + u, d16);
    if (l.correction == Correction::kZeroPoint) {
      _mm512_storeu_si512(corr + u, _mm512_mullo_epi32(sum, _mm512_set1_epi32(l.zero_point)));
    } else if (l.correction == Correction::kMin) {
      const __m512 s = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sum));
      _mm512_storeu_ps(corr + u, _mm512_cvtph_ps(_mm512_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT)));
    }
  }
  quantize_q8_32_avx2(l, x, q, d, corr, u);  // the tail of fewer than 16
}

void quantize_q8_32(const PackedLayout& l, const float* x, int8_t* q, float* d,
                    float* corr) {
  static const bool avx2 = cpu_features().avx2;
  // 16-row groups: the VNNI tier's layouts, whose CPUs have AVX-512
  // F/BW/VL/DQ; a tier forced lower (STRATA_ISA=avx2, avx512) keeps the
  // AVX2 loop, as it keeps that tier's kernels.
  static const bool avx512 = cpu_has(IsaTier::kAvx512);
  if (l.row_group == 16 && avx512) {
    quantize_q8_32_avx512(l, x, q, d, corr);
    return;
  }
  if (avx2) {
    quantize_q8_32_avx2(l, x, q, d, corr);
    return;
  }
  for (int64_t u = 0; u < l.n_units; ++u) {
    const float* xb = x + u * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float dd = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(round_even(xb[j] * id));
      q[u * 32 + j] = static_cast<int8_t>(v);
      sum += v;
    }
    auto f16 = [](float f) { return reference::f16_to_f32(reference::f32_to_f16(f)); };
    store_q8_32_unit(l, u, f16(dd), sum, f16(dd * static_cast<float>(sum)), d, corr);
  }
}

// Q8_K of one row: per 256 elements; corrections per unit (K min:
// d sum q) or per 16 elements (Q6_K zero point: int32 32 sum q).
void quantize_q8_k(const PackedLayout& l, const float* x, int8_t* q, float* d,
                   float* corr) {
  static const bool avx2 = cpu_features().avx2;
  for (int64_t sb = 0; sb < l.n_units / 8; ++sb) {
    const float* xb = x + sb * 256;
    int8_t* qb = q + sb * 256;
    float amax = 0.0f, max = 0.0f;
    if (avx2) {  // the first element of the largest magnitude, as below
      for (int k = 0; k < 8; ++k) amax = std::max(amax, block_amax(xb + 32 * k));
      max = first_of_magnitude(xb, amax);
    } else {
      for (int j = 0; j < 256; ++j) {
        if (std::fabs(xb[j]) > amax) {
          amax = std::fabs(xb[j]);
          max = xb[j];
        }
      }
    }
    float dd = 0.0f;
    // The sums of each 32 q values: block_round's with AVX2, zero when
    // amax is; otherwise summed below.
    int sums[8] = {};
    const bool have_sums = avx2 || amax == 0.0f;
    if (amax == 0.0f) {
      std::memset(qb, 0, 256);
    } else {
      const float iscale = -127.0f / max;
      dd = 1.0f / iscale;
      if (avx2) {  // |iscale x| <= 127: the clamp below never applies
        for (int k = 0; k < 8; ++k) sums[k] = block_round(xb + 32 * k, iscale, qb + 32 * k);
      } else {
        for (int j = 0; j < 256; ++j) {
          qb[j] = static_cast<int8_t>(std::min(127.0f, round_even(iscale * xb[j])));
        }
      }
    }
    for (int j = 0; j < 8; ++j) d[sb * 8 + j] = dd;
    const int group = l.paired_scales ? 16 : 32;
    for (int g = 0; g < 256 / group; ++g) {
      int sum = 0;
      if (have_sums && group == 32) {
        sum = sums[g];
      } else if (have_sums && avx2) {  // group 16: the first half's sum, or the rest
        const int first = sum16(qb + (g & ~1) * 16);
        sum = g % 2 == 0 ? first : sums[g / 2] - first;
      } else {
        for (int j = 0; j < group; ++j) sum += qb[g * group + j];
      }
      float* c = &corr[sb * (256 / group) + g];
      if (l.correction == Correction::kZeroPoint) {
        const int32_t z_sum = l.zero_point * sum;
        std::memcpy(c, &z_sum, sizeof z_sum);
      } else {
        *c = dd * static_cast<float>(sum);
      }
    }
  }
}

}  // namespace

ActivationBuffers::ActivationBuffers(int64_t max_rows, int64_t max_in)
    : max_rows_(max_rows),
      max_in_(max_in),
      q_(alloc<int8_t>(max_rows * round_up(max_in, 32))),
      d_(alloc<float>(max_rows * (max_in / 8 + 16))),
      corr_(alloc<float>(max_rows * (round_up(max_in / 16 + 1, 8) + 8))),
      f_(alloc<float>(max_rows * round_up(max_in, 8))) {}

void prepare_activations(const PackedLayout& l, const float* x, int64_t n_rows,
                         ActivationBuffers& buf, ThreadPool& pool) {
  assert(n_rows <= buf.max_rows() && l.n_in <= buf.max_in());
  const int64_t n = l.n_in;
  pool.parallel_for(n_rows, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* xr = x + t * n;
      switch (l.act) {
        case ActKind::kF32:
        case ActKind::kF16:
        case ActKind::kBF16: {
          float* f = buf.f() + t * l.n_in_pad;
          if (l.act == ActKind::kF32) {
            std::memcpy(f, xr, static_cast<size_t>(n) * sizeof(float));
          } else if (l.act == ActKind::kF16) {
            for (int64_t i = 0; i < n; ++i) {
              f[i] = reference::f16_to_f32(reference::f32_to_f16(xr[i]));
            }
          } else {
            for (int64_t i = 0; i < n; ++i) {
              f[i] = reference::bf16_to_f32(reference::f32_to_bf16(xr[i]));
            }
          }
          std::fill(f + n, f + l.n_in_pad, 0.0f);
          break;
        }
        case ActKind::kQ8_0:
        case ActKind::kQ8_1:
        case ActKind::kQ8_K: {
          int8_t* q = buf.q() + t * n;
          float* d = buf.d() + t * l.act_d_stride;
          float* corr = buf.corr() + t * l.corr_len;
          if (l.act == ActKind::kQ8_K) {
            quantize_q8_k(l, xr, q, d, corr);
          } else {
            quantize_q8_32(l, xr, q, d, corr);
          }
          const int64_t used = l.correction == Correction::kZeroPoint
                                   ? l.n_scales
                                   : l.n_units;
          if (l.corr_len > 0) std::fill(corr + used, corr + l.corr_len, 0.0f);
          break;
        }
      }
    }
  });
}

}  // namespace strata::kernels::jit
