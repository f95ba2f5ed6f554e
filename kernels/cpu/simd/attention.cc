#include "kernels/cpu/simd/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd {
namespace {

// Scores buffer of one head: the keys of [base, base + stride) where base is
// the first attended key rounded down to 8, so that 8-lane chunks line up
// with key 0 as in ggml_vec_soft_max_f32 (the reference sums that way).
int64_t scores_stride(int64_t max_kv) { return (max_kv + 16) / 8 * 8; }

// 8 values of a cache row starting at `src` (f16 or f32) as f32.
template <bool kF16>
STRATA_AVX2 inline __m256 load8(const void* src) {
  if constexpr (kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(src)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(src));
  }
}

STRATA_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane l of the result: the horizontal sum of a[l], added in hsum()'s order
// ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)) — the order of a
// one-accumulator 8-lane dot product's reduction — so a key's score does not
// depend on whether it was computed in a block of 8 or alone.
STRATA_AVX2 inline __m256 halves(__m256 x, __m256 y) {  // [x lo + x hi | y lo + y hi]
  return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}

STRATA_AVX2 inline __m256 reduce8(const __m256* a) {
  // e[k] = low half + high half of a[k]: [x0+x4, x1+x5, x2+x6, x3+x7];
  // A = [e0 | e4], B = [e1 | e5], C = [e2 | e6], D = [e3 | e7].
  const __m256 A = halves(a[0], a[4]), B = halves(a[1], a[5]);
  const __m256 C = halves(a[2], a[6]), D = halves(a[3], a[7]);
  // 4 x 4 transpose within each 128-bit lane: E_i holds element i of each.
  const __m256 t0 = _mm256_unpacklo_ps(A, B), t1 = _mm256_unpackhi_ps(A, B);
  const __m256 t2 = _mm256_unpacklo_ps(C, D), t3 = _mm256_unpackhi_ps(C, D);
  const __m256 e0 = _mm256_shuffle_ps(t0, t2, 0x44), e1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 e2 = _mm256_shuffle_ps(t1, t3, 0x44), e3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  return _mm256_add_ps(_mm256_add_ps(e0, e2), _mm256_add_ps(e1, e3));
}

// Softmax over sc[off, off + n) in place after scaling it by `scale`, the
// rest of sc[0, round8(off + n)) zeroed; summed as the reference's
// softmax_keys (8-lane chunks from key 0, each in hsum()'s order, added in
// double chunk by chunk); then rounded to f16 when the cache is f16.
STRATA_AVX2 void softmax(float* sc, int64_t off, int64_t n, float scale, bool round_f16) {
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
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (int64_t k = 0; k < end; k += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(sc + k), inv);
    if (round_f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(sc + k, v);
  }
}

// softmax on 16 lanes: the same scaled scores, maximum, exponentials, sum
// (each 8-key chunk's in hsum()'s order, added in double chunk by chunk) and
// roundings, so the probabilities equal softmax()'s bit for bit.
STRATA_AVX512 void softmax_wide(float* sc, int64_t off, int64_t n, float scale,
                                bool round_f16) {
  const int64_t end = (off + n + 7) / 8 * 8;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float* x = sc + off;
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 m0 = _mm512_set1_ps(kNegInf), m1 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
    const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), vs);
    _mm512_storeu_ps(x + i, a);
    _mm512_storeu_ps(x + i + 16, b);
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
  }
  for (; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs);
    _mm512_mask_storeu_ps(x + i, k, a);
    m0 = _mm512_mask_max_ps(m0, k, m0, a);
  }
  const float max = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  // Pads hold max so that exp gives 1 there (no slow lanes); zeroed after.
  for (int64_t p = 0; p < off; ++p) sc[p] = max;
  for (int64_t p = off + n; p < end; ++p) sc[p] = max;
  const __m512 vm = _mm512_set1_ps(max);
  // exp of the lanes of `live` from sc + c, pads (outside [off, off + n))
  // zeroed, stored.
  auto chunk = [&](int64_t c, __mmask16 live) STRATA_AVX512 {
    __m512 v = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, sc + c), vm));
    if (c < off || c + 16 > off + n) {
      const int64_t lo = std::max<int64_t>(0, off - c);
      const int64_t hi = std::min<int64_t>(16, off + n - c);
      const uint32_t keep = hi > lo ? ((1u << hi) - 1) & ~((1u << lo) - 1) : 0u;
      v = _mm512_maskz_mov_ps(__mmask16(keep & live), v);
    }
    _mm512_mask_storeu_ps(sc + c, live, v);
    return v;
  };
  double sum = 0.0;
  int64_t c = 0;
  alignas(32) float lanes[8];
  for (; c + 64 <= end; c += 64) {  // 8 chunks' sums at once (reduce8)
    __m256 v[8];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512 z = chunk(c + 16 * q, 0xFFFF);
      v[2 * q] = _mm512_castps512_ps256(z);
      v[2 * q + 1] = _mm512_extractf32x8_ps(z, 1);
    }
    _mm256_store_ps(lanes, reduce8(v));
    for (float h : lanes) sum += static_cast<double>(h);
  }
  for (; c + 16 <= end; c += 16) {
    const __m512 z = chunk(c, 0xFFFF);
    sum += static_cast<double>(hsum(_mm512_castps512_ps256(z)));
    sum += static_cast<double>(hsum(_mm512_extractf32x8_ps(z, 1)));
  }
  if (c < end) sum += static_cast<double>(hsum(_mm512_castps512_ps256(chunk(c, 0x00FF))));
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  auto weigh = [&](__m512 v) STRATA_AVX512 {
    v = _mm512_mul_ps(v, inv);
    return round_f16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)) : v;
  };
  int64_t k = 0;
  for (; k + 16 <= end; k += 16) _mm512_storeu_ps(sc + k, weigh(_mm512_loadu_ps(sc + k)));
  if (k < end) _mm512_mask_storeu_ps(sc + k, 0x00FF, weigh(_mm512_maskz_loadu_ps(0x00FF, sc + k)));
}

// Everything one (token, KV head) item needs.
struct Item {
  const float* q;      // [group][dk] the group's query heads
  float* out;          // [group][dv]
  const char* k;       // key row of position 0, head g
  const char* v;       // value row of position 0, head g
  int64_t k_stride;    // bytes between positions
  int64_t v_stride;
  int64_t j_begin, j_end;
  // The step's keys of head g transposed (AttentionBuffers::keys_t): block
  // b at kt + b * dk * 16, [dk][16 keys 16b..16b+15]; null when the step
  // has none (the scores then load the cache rows).
  const float* kt = nullptr;
};

// Scores of M query heads (rows of qr, dk apart) against the N keys from
// row kb on, written to sc[m * sc_stride + n]. Each key is loaded (and
// widened) once for all M heads; each (head, key) pair keeps its own
// accumulator over head_dim in increasing order, reduced in hsum()'s order.
// Stores the M x N scores of a tile's accumulators acc[m * N + n] (8 lanes
// over head_dim each) to sc[m * sc_stride + n], each reduced in hsum()'s
// order.
template <int M, int N>
STRATA_AVX2 inline void store_scores(const __m256* acc, float* sc, int64_t sc_stride) {
  if constexpr (N == 1) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) sc[m * sc_stride] = hsum(acc[m]);
  } else if constexpr (N == 8) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) _mm256_storeu_ps(sc + m * sc_stride, reduce8(acc + m * 8));
  } else if constexpr (N == 4) {
    // Two heads per reduce8: lanes 0..3 the first's keys, 4..7 the second's.
#pragma GCC unroll 2
    for (int m = 0; m < M; m += 2) {
      __m256 a[8];
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) a[l] = acc[(m + l / 4 < M ? m * N + l : m * N + l - 4)];
      const __m256 r = reduce8(a);
      _mm_storeu_ps(sc + m * sc_stride, _mm256_castps256_ps128(r));
      if (m + 1 < M) _mm_storeu_ps(sc + (m + 1) * sc_stride, _mm256_extractf128_ps(r, 1));
    }
  } else if constexpr (N == 2 && M == 4) {
    // Lanes (2m, 2m + 1): head m's two keys.
    const __m256 r = reduce8(acc);
    const __m128 lo = _mm256_castps256_ps128(r), hi = _mm256_extractf128_ps(r, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(sc), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(sc + sc_stride), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(sc + 2 * sc_stride), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(sc + 3 * sc_stride), hi);
  } else {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
      for (int n = 0; n < N; ++n) sc[m * sc_stride + n] = hsum(acc[m * N + n]);
    }
  }
}

template <bool kF16, int M, int N>
STRATA_AVX2 inline void score_tile(const float* qr, int dk, const char* kb, int64_t k_stride,
                                   float* sc, int64_t sc_stride) {
  constexpr int64_t kElem = kF16 ? 2 : 4;
  __m256 acc[M * N];
#pragma GCC unroll 16
  for (int a = 0; a < M * N; ++a) acc[a] = _mm256_setzero_ps();
  for (int d = 0; d < dk; d += 8) {
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n) {
      const __m256 kv = load8<kF16>(kb + n * k_stride + d * kElem);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        acc[m * N + n] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(qr + m * dk + d), acc[m * N + n]);
      }
    }
  }
  store_scores<M, N>(acc, sc, sc_stride);
}

// Scores of M heads for keys [j_begin, j_end): sc[m * sc_stride + j - j_begin].
template <bool kF16, int M>
STRATA_AVX2 void score_heads(const Item& it, const float* qr, int dk, float* sc,
                             int64_t sc_stride) {
  constexpr int N = M == 1 ? 8 : M == 4 ? 2 : 4;
  int64_t j = it.j_begin;
  for (; j + N <= it.j_end; j += N) {
    score_tile<kF16, M, N>(qr, dk, it.k + j * it.k_stride, it.k_stride, sc + (j - it.j_begin),
                           sc_stride);
  }
  for (; j < it.j_end; ++j) {
    score_tile<kF16, M, 1>(qr, dk, it.k + j * it.k_stride, it.k_stride, sc + (j - it.j_begin),
                           sc_stride);
  }
}

// o[m * dv + 8 c] (c < D) = sum_i p[m * p_stride + i] * v_i[8 c], over the n
// rows of vb in increasing order, FMA from zero. Each value chunk is loaded
// (and widened) once for all M heads.
template <bool kF16, int M, int D>
STRATA_AVX2 inline void value_tile(const float* p, int64_t p_stride, int64_t n, const char* vb,
                                   int64_t v_stride, float* o, int dv) {
  constexpr int64_t kElem = kF16 ? 2 : 4;
  __m256 acc[M * D];
#pragma GCC unroll 16
  for (int a = 0; a < M * D; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    __m256 w[M];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) w[m] = _mm256_broadcast_ss(p + m * p_stride + i);
    const char* vr = vb + i * v_stride;
#pragma GCC unroll 8
    for (int c = 0; c < D; ++c) {
      const __m256 x = load8<kF16>(vr + c * 8 * kElem);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) acc[m * D + c] = _mm256_fmadd_ps(w[m], x, acc[m * D + c]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int c = 0; c < D; ++c) _mm256_storeu_ps(o + m * dv + c * 8, acc[m * D + c]);
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

// Value chunks (of 8) one tile of M heads covers: M * D + M + 1 <= 16
// registers.
constexpr int value_chunks(int m) { return m == 1 ? 8 : m == 2 ? 6 : m == 3 ? 4 : 2; }

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

// How many of `rest` heads one tile takes (at most 4).
int tile_heads(int rest) { return rest >= 4 && rest % 3 != 0 ? 4 : std::min(rest, 3); }

// Calls f(std::integral_constant<int, M>{}) for a tile of m = M heads (1..4):
// the tiles' head count as a template argument.
template <typename F>
inline void with_heads(int m, const F& f) {
  switch (m) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

// ---- The same tiles on 512-bit vectors (the avx512 and avx512vnni tiers).
// Each lane is updated by the same operations in the same order as in the
// 8-lane tiles above, so the results are equal bit for bit; what changes is
// how many lanes one instruction carries: a score tile holds two keys'
// 8-lane accumulators in one register, a value tile 16 values of a row.

// 8 values at `a` in lanes 0..7 and 8 at `b` in lanes 8..15, as f32.
template <bool kF16>
STRATA_AVX512 inline __m512 load8x2(const char* a, const char* b) {
  if constexpr (kF16) {
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(a))),
        _mm256_loadu_ps(reinterpret_cast<const float*>(b)), 1);
  }
}

// 16 values of a cache row starting at `src` as f32.
template <bool kF16>
STRATA_AVX512 inline __m512 load16(const void* src) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(src)));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(src));
  }
}

// score_tile for an even N: acc[m * N/2 + p] holds keys 2p (lanes 0..7) and
// 2p + 1 (lanes 8..15) of head m.
template <bool kF16, int M, int N>
STRATA_AVX512 inline void score_tile_wide(const float* qr, int dk, const char* kb,
                                          int64_t k_stride, float* sc, int64_t sc_stride) {
  static_assert(N % 2 == 0);
  constexpr int64_t kElem = kF16 ? 2 : 4;
  constexpr int P = N / 2;
  __m512 acc[M * P];
#pragma GCC unroll 16
  for (int a = 0; a < M * P; ++a) acc[a] = _mm512_setzero_ps();
  for (int d = 0; d < dk; d += 8) {
    __m512 qv[M];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) qv[m] = _mm512_broadcast_f32x8(_mm256_loadu_ps(qr + m * dk + d));
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const char* k0 = kb + 2 * p * k_stride + d * kElem;
      const __m512 kv = load8x2<kF16>(k0, k0 + k_stride);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) acc[m * P + p] = _mm512_fmadd_ps(kv, qv[m], acc[m * P + p]);
    }
  }
  __m256 lanes[M * N];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      lanes[m * N + 2 * p] = _mm512_castps512_ps256(acc[m * P + p]);
      lanes[m * N + 2 * p + 1] = _mm512_extractf32x8_ps(acc[m * P + p], 1);
    }
  }
  store_scores<M, N>(lanes, sc, sc_stride);
}

// score_heads on 512-bit tiles of M heads x 8 keys, then pairs, then one.
template <bool kF16, int M>
STRATA_AVX512 void score_heads_wide(const Item& it, const float* qr, int dk, float* sc,
                                    int64_t sc_stride) {
  int64_t j = it.j_begin;
  for (; j + 8 <= it.j_end; j += 8) {
    score_tile_wide<kF16, M, 8>(qr, dk, it.k + j * it.k_stride, it.k_stride,
                                sc + (j - it.j_begin), sc_stride);
  }
  for (; j + 2 <= it.j_end; j += 2) {
    score_tile_wide<kF16, M, 2>(qr, dk, it.k + j * it.k_stride, it.k_stride,
                                sc + (j - it.j_begin), sc_stride);
  }
  if (j < it.j_end) {
    score_tile<kF16, M, 1>(qr, dk, it.k + j * it.k_stride, it.k_stride, sc + (j - it.j_begin),
                           sc_stride);
  }
}

template <bool kF16>
STRATA_AVX512 void score_group_wide(const Item& it, const float* qr, int dk, float* sc,
                                    int64_t sc_stride, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX512 {
    score_heads_wide<kF16, decltype(mh)::value>(it, qr, dk, sc, sc_stride);
  });
}

// value_tile with D chunks of 16 values.
template <bool kF16, int M, int D>
STRATA_AVX512 inline void value_tile_wide(const float* p, int64_t p_stride, int64_t n,
                                          const char* vb, int64_t v_stride, float* o, int dv) {
  constexpr int64_t kElem = kF16 ? 2 : 4;
  __m512 acc[M * D];
#pragma GCC unroll 32
  for (int a = 0; a < M * D; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    __m512 w[M];
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) w[m] = _mm512_set1_ps(p[m * p_stride + i]);
    const char* vr = vb + i * v_stride;
#pragma GCC unroll 8
    for (int c = 0; c < D; ++c) {
      const __m512 x = load16<kF16>(vr + c * 16 * kElem);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) acc[m * D + c] = _mm512_fmadd_ps(w[m], x, acc[m * D + c]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int c = 0; c < D; ++c) _mm512_storeu_ps(o + m * dv + c * 16, acc[m * D + c]);
  }
}

template <bool kF16, int M, int D>
STRATA_AVX512 inline void value_rest_wide(int rest, const float* p, int64_t p_stride, int64_t n,
                                          const char* vb, int64_t v_stride, float* o, int dv) {
  if constexpr (D > 0) {
    if (rest == D) {
      value_tile_wide<kF16, M, D>(p, p_stride, n, vb, v_stride, o, dv);
    } else {
      value_rest_wide<kF16, M, D - 1>(rest, p, p_stride, n, vb, v_stride, o, dv);
    }
  }
}

// value_heads on 512-bit tiles: chunks of 8 values [c_begin, c_end) taken 16
// values at a time (M x D accumulators, M broadcasts and a load fit the 32
// registers), an odd last chunk by the 8-lane tile.
template <bool kF16, int M>
STRATA_AVX512 void value_heads_wide(const Item& it, const float* p, int64_t p_stride, float* o,
                                    int dv, int c_begin, int c_end) {
  constexpr int64_t kElem = kF16 ? 2 : 4;
  constexpr int D = M <= 2 ? 8 : 6;
  const int64_t n = it.j_end - it.j_begin;
  const char* vb = it.v + it.j_begin * it.v_stride;
  int c = c_begin;
  for (; c + 2 * D <= c_end; c += 2 * D) {
    value_tile_wide<kF16, M, D>(p, p_stride, n, vb + c * 8 * kElem, it.v_stride, o + c * 8, dv);
  }
  const int pairs = (c_end - c) / 2;
  if (pairs > 0) {
    value_rest_wide<kF16, M, D - 1>(pairs, p, p_stride, n, vb + c * 8 * kElem, it.v_stride,
                                    o + c * 8, dv);
    c += 2 * pairs;
  }
  if (c < c_end) {
    value_tile<kF16, M, 1>(p, p_stride, n, vb + c * 8 * kElem, it.v_stride, o + c * 8, dv);
  }
}

template <bool kF16>
STRATA_AVX512 void value_group_wide(const Item& it, const float* p, int64_t p_stride, float* o,
                                    int dv, int c_begin, int c_end, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX512 {
    value_heads_wide<kF16, decltype(mh)::value>(it, p, p_stride, o, dv, c_begin, c_end);
  });
}

// ---- Scores with keys in lanes (the avx512 tiers' prefill). A step with
// many query rows first copies its keys, transposed and widened to f32,
// into blocks of 16 keys (fill_keys_t below); a tile then holds 16 keys of
// one head per register and needs no horizontal sum. To keep each score
// bit for bit what the tiles above give, a (head, key) pair still has 8
// partial sums, over the dimensions d = l (mod 8) in increasing d
// (partial_lanes); they are added in hsum()'s order ((x0 + x4) + (x2 +
// x6)) + ((x1 + x5) + (x3 + x7)).
constexpr int kLaneKeys = 16;

// p[m * B + b] = partial sum l of head m (row m of qr, dk apart) and the
// 16 keys of transposed block kt[b] ([dk][16]): the FMA chain from zero over
// d = l, l + 8, ... < dk in increasing d. Each of the M broadcasts of q
// feeds B blocks (one load for B FMAs).
template <int M, int B>
STRATA_AVX512 inline void partial_lanes(const float* const* kt, const float* qr, int dk, int l,
                                        __m512* p) {
  static_assert(B == 1 || B == 2);
#pragma GCC unroll 8
  for (int i = 0; i < M * B; ++i) p[i] = _mm512_setzero_ps();
  const float* k0p = kt[0] + l * kLaneKeys;
  const float* k1p = kt[B - 1] + l * kLaneKeys;
  const float* qp = qr + l;
  for (int d = l; d < dk; d += 8) {
    // Keep k in a register: left alone, GCC folds this load into each
    // head's FMA (M loads of 64 bytes instead of one).
    __m512 k0 = _mm512_load_ps(k0p);
    asm("" : "+v"(k0));
    __m512 k1 = k0;
    if constexpr (B == 2) {
      k1 = _mm512_load_ps(k1p);
      asm("" : "+v"(k1));
    }
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) {
      const __m512 q = _mm512_set1_ps(qp[m * dk]);
      p[m * B] = _mm512_fmadd_ps(k0, q, p[m * B]);
      if constexpr (B == 2) p[m * B + 1] = _mm512_fmadd_ps(k1, q, p[m * B + 1]);
    }
    k0p += 8 * kLaneKeys;
    k1p += 8 * kLaneKeys;
    qp += 8;
  }
}

template <int N>
STRATA_AVX512 inline void add_into(__m512* a, const __m512* b) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) a[i] = _mm512_add_ps(a[i], b[i]);
}

// s[m * B + b] = the scores of M heads for the 16 keys of each of the B
// transposed blocks kt[b]. A (head, key) pair's score is its 8 partial sums
// (partial_lanes) added in hsum()'s order ((p0 + p4) + (p2 + p6)) + ((p1 +
// p5) + (p3 + p7)), so it equals the 8-lane tiles' bit for bit. The
// partials are computed one after another (each is its own chain, so the
// order does not change them), so at most four sets of M * B registers are
// live; holding all eight at once left room for one block (B = 1) only.
// Two blocks halve the q broadcasts per FMA (a zmm op with a memory operand
// issues about once a cycle on Ice Lake: 4 loads per 3 FMAs for M = 3,
// B = 1, 5 per 6 for B = 2; B = 3 spills).
template <int M, int B>
STRATA_AVX512 inline void score_lanes_tile(const float* const* kt, const float* qr, int dk,
                                           __m512* s) {
  constexpr int T = M * B;
  // a = p_la + p_lb (b is scratch).
  auto pair_sum = [&](int la, int lb, __m512* a, __m512* b) STRATA_AVX512 {
    partial_lanes<M, B>(kt, qr, dk, la, a);
    partial_lanes<M, B>(kt, qr, dk, lb, b);
    add_into<T>(a, b);
  };
  __m512 t[T], u[T], v[T];
  pair_sum(0, 4, s, t);
  pair_sum(2, 6, t, u);
  add_into<T>(s, t);  // (p0 + p4) + (p2 + p6)
  pair_sum(1, 5, t, u);
  pair_sum(3, 7, u, v);
  add_into<T>(t, u);  // (p1 + p5) + (p3 + p7)
  add_into<T>(s, t);
}

// Stores the M scores vectors s[m * B + b] of block `blk` (keys blk * 16 ..
// + 16) that fall in [j0, j1) to sc[m * sc_stride + j - j0].
template <int M, int B>
STRATA_AVX512 inline void store_lanes(const __m512* s, int b, int64_t blk, int64_t j0,
                                      int64_t j1, float* sc, int64_t sc_stride) {
  const int64_t first = blk * kLaneKeys;
  if (first >= j0 && first + kLaneKeys <= j1) {
#pragma GCC unroll 4
    for (int m = 0; m < M; ++m) _mm512_storeu_ps(sc + m * sc_stride + (first - j0), s[m * B + b]);
    return;
  }
  const int64_t lo = std::max(first, j0), hi = std::min(first + kLaneKeys, j1);
  alignas(64) float tmp[kLaneKeys];
  for (int m = 0; m < M; ++m) {
    _mm512_store_ps(tmp, s[m * B + b]);
    for (int64_t j = lo; j < hi; ++j) sc[m * sc_stride + (j - j0)] = tmp[j - first];
  }
}

// Scores of M heads for keys [j0, j1) from the transposed blocks kt:
// sc[m * sc_stride + j - j0], two blocks at a time. Blocks cut by j0 or j1
// store their keys in range only.
template <int M>
STRATA_AVX512 void score_heads_lanes(const float* kt, int dk, int64_t j0, int64_t j1,
                                     const float* qr, float* sc, int64_t sc_stride) {
  const int64_t blk_end = (j1 + kLaneKeys - 1) / kLaneKeys;
  int64_t blk = j0 / kLaneKeys;
  auto run = [&](auto nb) STRATA_AVX512 {
    constexpr int B = decltype(nb)::value;
    const float* blocks[B];
    for (int b = 0; b < B; ++b) blocks[b] = kt + (blk + b) * dk * kLaneKeys;
    __m512 s[M * B];
    score_lanes_tile<M, B>(blocks, qr, dk, s);
    for (int b = 0; b < B; ++b) store_lanes<M, B>(s, b, blk + b, j0, j1, sc, sc_stride);
    blk += B;
  };
  while (blk + 2 <= blk_end) run(std::integral_constant<int, 2>{});
  if (blk < blk_end) run(std::integral_constant<int, 1>{});
}

// The group's scores for keys [j0, j1) of an item with transposed keys, up
// to 3 heads a tile (24 accumulators of the 32 registers).
STRATA_AVX512 void score_group_lanes(const Item& it, int dk, int group, const float* qr,
                                     float* scores, int64_t stride, int64_t at, int64_t j0,
                                     int64_t j1) {
  for (int h0 = 0; h0 < group;) {
    const int rest = group - h0;
    const int m = rest == 4 ? 2 : std::min(rest, 3);
    const float* qh = qr + h0 * dk;
    float* sc = scores + h0 * stride + at;
    switch (m) {
      case 1: score_heads_lanes<1>(it.kt, dk, j0, j1, qh, sc, stride); break;
      case 2: score_heads_lanes<2>(it.kt, dk, j0, j1, qh, sc, stride); break;
      default: score_heads_lanes<3>(it.kt, dk, j0, j1, qh, sc, stride); break;
    }
    h0 += m;
  }
}

// The steps of one item (a token's `group` query heads of one KV head),
// which run_item takes in turn and a decode step spreads over the threads.

// The scores of head hh, key j sit at scores[hh * stride + j - base] with
// base = j_begin rounded down to 8 (see scores_stride).

// q of the group, as the cache's type represents it: qr [group][dk].
template <bool kF16>
STRATA_AVX2 void round_q(const Item& it, int group, int dk, float* qr) {
  for (int hh = 0; hh < group; ++hh) {
    for (int d = 0; d < dk; d += 8) {
      __m256 x = _mm256_loadu_ps(it.q + hh * dk + d);
      if constexpr (kF16) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      _mm256_storeu_ps(qr + hh * dk + d, x);
    }
  }
}

// Scores of the group's heads for keys [j0, j1) of the item, up to 4 heads
// at a time.
template <bool kF16>
STRATA_AVX2 void score_keys(const Item& it, int dk, int group, const float* qr, float* scores,
                            int64_t stride, int64_t j0, int64_t j1, bool wide) {
  Item part = it;
  part.j_begin = j0;
  part.j_end = j1;
  const int64_t at = j0 - it.j_begin / 8 * 8;
  if (wide && it.kt != nullptr) {
    score_group_lanes(it, dk, group, qr, scores, stride, at, j0, j1);
    return;
  }
  for (int h0 = 0; h0 < group;) {
    const int m = tile_heads(group - h0);
    const float* qh = qr + h0 * dk;
    float* sc = scores + h0 * stride + at;
    if (wide) {
      score_group_wide<kF16>(part, qh, dk, sc, stride, m);
    } else {
      with_heads(m, [&](auto mh) STRATA_AVX2 {
        score_heads<kF16, decltype(mh)::value>(part, qh, dk, sc, stride);
      });
    }
    h0 += m;
  }
}

// Soft-cap, scale and softmax of the group's score rows, in place.
template <bool kF16>
STRATA_AVX2 void normalize(const Item& it, const AttentionParams& p, int group, float* scores,
                           int64_t stride, bool wide) {
  const int64_t off = it.j_begin - it.j_begin / 8 * 8;
  const int64_t n = it.j_end - it.j_begin;
  const float cap = p.softcap;
  for (int hh = 0; hh < group; ++hh) {
    float* sc = scores + hh * stride + off;
    if (cap > 0.0f) {
      for (int64_t i = 0; i < n; ++i) sc[i] = std::tanh(sc[i] * (1.0f / cap)) * cap;
    }
    if (wide) {
      softmax_wide(scores + hh * stride, off, n, p.scale, kF16);
    } else {
      softmax(scores + hh * stride, off, n, p.scale, kF16);
    }
  }
}

// out_h = sum_j p_j v_j for the group's heads, 8-value chunks [c0, c1) of
// head_dim_v, up to 4 heads at a time.
template <bool kF16>
STRATA_AVX2 void weigh_values(const Item& it, int dv, int group, const float* scores,
                              int64_t stride, int c0, int c1, bool wide) {
  const int64_t off = it.j_begin - it.j_begin / 8 * 8;
  for (int h0 = 0; h0 < group;) {
    const int m = tile_heads(group - h0);
    const float* ph = scores + h0 * stride + off;
    float* oh = it.out + h0 * dv;
    if (wide) {
      value_group_wide<kF16>(it, ph, stride, oh, dv, c0, c1, m);
    } else {
      with_heads(m, [&](auto mh) STRATA_AVX2 {
        value_heads<kF16, decltype(mh)::value>(it, ph, stride, oh, dv, c0, c1);
      });
    }
    h0 += m;
  }
}

template <bool kF16>
STRATA_AVX2 void run_item(const Item& it, const AttentionParams& p, int group,
                          float* scores, int64_t stride, float* qr, bool wide) {
  round_q<kF16>(it, group, p.head_dim_k, qr);
  score_keys<kF16>(it, p.head_dim_k, group, qr, scores, stride, it.j_begin, it.j_end, wide);
  normalize<kF16>(it, p, group, scores, stride, wide);
  weigh_values<kF16>(it, p.head_dim_v, group, scores, stride, 0, p.head_dim_v / 8, wide);
}

// Keys item `i` attends to (its cost in the work split).
struct KeyRange {
  int64_t begin, end;
};
KeyRange keys_of(const int32_t* positions, int64_t t, const AttentionParams& p) {
  const int64_t pos = positions[t];
  const int64_t begin =
      p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
  return {begin, pos + 1};
}

}  // namespace

bool attention_supported(const AttentionParams& p) {
  return cpu_features().avx2 && p.head_dim_k % 8 == 0 && p.head_dim_v % 8 == 0 &&
         p.head_dim_k > 0 && p.head_dim_v > 0 && p.n_head_kv > 0 &&
         p.n_head % p.n_head_kv == 0;
}

AttentionBuffers::AttentionBuffers(int64_t max_kv, const AttentionParams& s,
                                   int n_threads, IsaTier isa)
    : max_kv_(max_kv), wide_(isa != IsaTier::kAvx2 && cpu_has(isa)) {
  const int64_t group = s.n_head / std::max(1, s.n_head_kv);
  per_thread_ = (group * scores_stride(max_kv) + group * s.head_dim_k + 7) / 8 * 8;
  buffer_.resize(static_cast<size_t>(per_thread_) * std::max(1, n_threads));
  if (n_threads > 1) {
    // Spread steps: fewer than 4 items per thread (attention()).
    max_spread_items_ = 4 * int64_t{n_threads} - 1;
    spread_.resize(static_cast<size_t>(max_spread_items_ * per_thread_));
    left_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(max_spread_items_));
    first_chunk_.resize(static_cast<size_t>(max_spread_items_ + 1));
  }
  if (wide_) {
    constexpr int64_t kMaxBytes = int64_t{32} << 20;
    const int64_t per_key = int64_t{std::max(1, s.n_head_kv)} * s.head_dim_k * 4;
    keys_t_capacity_ = std::min((max_kv + 15) / 16 * 16, kMaxBytes / per_key / 16 * 16);
    keys_t_head_stride_ = keys_t_capacity_ * s.head_dim_k;
    if (keys_t_capacity_ > 0) {
      const size_t bytes = static_cast<size_t>(keys_t_capacity_ * per_key);
      keys_t_.reset(static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      if (keys_t_ == nullptr) keys_t_capacity_ = 0;
    }
  }
}

void AttentionBuffers::FreeAligned::operator()(float* p) const { std::free(p); }

namespace {

// The item of token t's heads [h0, h0 + heads of the item) of KV head g,
// attending to keys r. elem: bytes per cache value.
Item make_item(const float* q, float* out, const KvView& kv, const AttentionParams& p,
               int64_t t, int g, int64_t h0, KeyRange r, int64_t elem) {
  assert(r.end <= kv.n_kv);
  Item it;
  it.q = q + (t * p.n_head + h0) * p.head_dim_k;
  it.out = out + (t * p.n_head + h0) * p.head_dim_v;
  it.k_stride = int64_t{p.n_head_kv} * p.head_dim_k * elem;
  it.v_stride = int64_t{p.n_head_kv} * p.head_dim_v * elem;
  it.k = static_cast<const char*>(kv.k) + g * p.head_dim_k * elem;
  it.v = static_cast<const char*>(kv.v) + g * p.head_dim_v * elem;
  it.j_begin = r.begin;
  it.j_end = r.end;
  return it;
}

// A step with fewer items (token, KV head) than 4 per thread — a decode
// step — spread over the threads by keys, then by value chunks:
//   1. every item's keys are cut into chunks of kSpreadKeys; the threads
//      take chunks and write their scores; whoever finishes an item's last
//      chunk soft-caps, scales and normalizes its score rows;
//   2. the threads take (item, range of value chunks) pieces.
// Each score and each output value is computed by the same code, in the
// same order, as run_item computes it, so the results are equal bit for
// bit (tests/kernels/simd: OutputDoesNotDependOnTiling).
constexpr int64_t kSpreadKeys = 32;

template <bool kF16>
STRATA_AVX2 void spread_step(const float* q, const int32_t* positions, int64_t n_tokens,
                             const KvView& kv, const AttentionParams& p, float* out,
                             AttentionBuffers& buffers, ThreadPool& pool) {
  const int group = p.n_head / p.n_head_kv;
  const int64_t elem = kF16 ? 2 : 4;
  const int64_t n_items = n_tokens * p.n_head_kv;
  const int64_t stride = scores_stride(buffers.max_kv());
  auto item_of = [&](int64_t i) {
    const int64_t t = i / p.n_head_kv;
    const int g = static_cast<int>(i % p.n_head_kv);
    return make_item(q, out, kv, p, t, g, int64_t{g} * group, keys_of(positions, t, p), elem);
  };
  // Item i's scores, then its rounded q, in its slice of the spread buffer.
  auto scores_of = [&](int64_t i) { return buffers.spread_item(i); };
  auto qr_of = [&](int64_t i) { return buffers.spread_item(i) + group * stride; };

  int64_t* first = buffers.first_chunk();
  first[0] = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    const Item it = item_of(i);
    const int64_t chunks = (it.j_end - it.j_begin + kSpreadKeys - 1) / kSpreadKeys;
    first[i + 1] = first[i] + chunks;
    buffers.items_left(i).store(chunks, std::memory_order_relaxed);
    round_q<kF16>(it, group, p.head_dim_k, qr_of(i));
  }
  pool.parallel_for_dynamic(first[n_items], [&](int64_t b, int64_t e, int) {
    int64_t i = 0;
    for (int64_t c = b; c < e; ++c) {
      while (first[i + 1] <= c) ++i;
      const Item it = item_of(i);
      const int64_t j0 = it.j_begin + (c - first[i]) * kSpreadKeys;
      const int64_t j1 = std::min(it.j_end, j0 + kSpreadKeys);
      // The chunk's cache rows come from memory (a decode step's weights
      // evicted them): ask for all of them first, K and the V that step 2
      // reads, so the misses overlap instead of following the loads.
      for (int64_t j = j0; j < j1; ++j) {
        for (int64_t o = 0; o < p.head_dim_k * elem; o += 64) {
          _mm_prefetch(it.k + j * it.k_stride + o, _MM_HINT_T0);
        }
        for (int64_t o = 0; o < p.head_dim_v * elem; o += 64) {
          _mm_prefetch(it.v + j * it.v_stride + o, _MM_HINT_T1);
        }
      }
      score_keys<kF16>(it, p.head_dim_k, group, qr_of(i), scores_of(i), stride, j0, j1,
                       buffers.wide());
      if (buffers.items_left(i).fetch_sub(1, std::memory_order_acq_rel) == 1) {
        normalize<kF16>(it, p, group, scores_of(i), stride, buffers.wide());
      }
    }
  });
  const int chunks = p.head_dim_v / 8;
  const int per_piece = value_chunks(tile_heads(group));
  const int pieces = (chunks + per_piece - 1) / per_piece;
  pool.parallel_for_dynamic(n_items * pieces, [&](int64_t b, int64_t e, int) {
    for (int64_t x = b; x < e; ++x) {
      const int64_t i = x / pieces;
      const int c0 = static_cast<int>(x % pieces) * per_piece;
      weigh_values<kF16>(item_of(i), p.head_dim_v, group, scores_of(i), stride, c0,
                         std::min(chunks, c0 + per_piece), buffers.wide());
    }
  });
}

// A prefill step's keys [16 b0, 16 b1) of every KV head, transposed and
// widened to f32 into buffers.keys_t() (keys past kv.n_kv are zeros), for
// the keys-in-lanes score tiles. The conversion is exact, so the scores
// see the same values as from the cache rows.
template <bool kF16>
STRATA_AVX2 void fill_keys_t(const KvView& kv, const AttentionParams& p, int64_t b0,
                             int64_t b1, AttentionBuffers& buffers, ThreadPool& pool) {
  const int dk = p.head_dim_k;
  const int64_t elem = kF16 ? 2 : 4;
  const int64_t k_stride = int64_t{p.n_head_kv} * dk * elem;
  const int64_t n_blocks = b1 - b0;
  float* kt = buffers.keys_t();
  const int64_t head_stride = buffers.keys_t_head_stride();
  pool.parallel_for(int64_t{p.n_head_kv} * n_blocks, [&](int64_t x0, int64_t x1, int) STRATA_AVX2 {
    for (int64_t x = x0; x < x1; ++x) {
      const int64_t g = x / n_blocks;
      const int64_t b = b0 + x % n_blocks;
      float* dst = kt + g * head_stride + b * dk * kLaneKeys;
      const char* src = static_cast<const char*>(kv.k) + g * dk * elem;
      for (int i = 0; i < kLaneKeys; ++i) {
        const int64_t j = b * kLaneKeys + i;
        if (j >= kv.n_kv) {
          for (int d = 0; d < dk; ++d) dst[d * kLaneKeys + i] = 0.0f;
          continue;
        }
        const char* row = src + j * k_stride;
        for (int d = 0; d < dk; d += 8) {
          alignas(32) float t[8];
          _mm256_store_ps(t, load8<kF16>(row + d * elem));
#pragma GCC unroll 8
          for (int l = 0; l < 8; ++l) dst[(d + l) * kLaneKeys + i] = t[l];
        }
      }
    }
  }, 1);
}

// Query rows a step needs for the transposed keys to pay: each block is
// copied once and then read by every row (token, head) of the step.
constexpr int64_t kLaneMinTokens = 16;

// Whether keys in lanes beat the key-pair tiles for this shape. What they
// save is the tiles' horizontal sums, one per (head, key) however long
// head_dim is; what they pay is a broadcast load of q per head and
// dimension. Measured on Zen 5 (attention_bench -t 2 --tokens 512
// --no-decode, ms, key-pair tiles / keys in lanes): group 3 at head_dim
// 64 1.52 / 1.38, at 96 2.22 / 2.05, at 128 3.31 / 3.26, at 256 2.67 /
// 2.74; group 2 at 64 1.68 / 1.53; group 6 at 64 0.91 / 0.79; group 4
// (tiles of 2 + 2) at 64 2.38 / 2.37, at 128 1.87 / 2.01, at 256 1.55 /
// 1.70; group 1 at 64 2.82 / 2.92. So: head_dim up to 96, and groups
// that split into tiles of 2 and 3 heads.
bool lanes_pay(const AttentionParams& p) {
  const int group = p.n_head / p.n_head_kv;
  return p.head_dim_k <= 96 && group != 1 && group != 4;
}

}  // namespace

void attention(const float* q, const int32_t* positions, int64_t n_tokens,
               const KvView& kv, const AttentionParams& p, float* out,
               AttentionBuffers& buffers, ThreadPool& pool) {
  assert(kv.n_kv <= buffers.max_kv());
  assert(attention_supported(p));
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = kv.type == GgmlType::kF16;
  const int64_t elem = f16 ? 2 : 4;
  if (pool.size() > 1 && n_tokens * p.n_head_kv < 4 * int64_t{pool.size()} &&
      n_tokens * p.n_head_kv <= buffers.max_spread_items()) {
    if (f16) {
      spread_step<true>(q, positions, n_tokens, kv, p, out, buffers, pool);
    } else {
      spread_step<false>(q, positions, n_tokens, kv, p, out, buffers, pool);
    }
    return;
  }
  // An item is `heads` query heads of one KV head for one token: the whole
  // group (keys read once for all of it) when there are items enough for
  // every thread or there is one thread (a pool of one: the decode rows of a
  // batched step, the cpu backend's forward.cc), single heads otherwise (a decode
  // step's few KV heads over several threads). A score is the same float
  // either way (the tiles above).
  const int heads =
      pool.size() == 1 || n_tokens * p.n_head_kv >= 4 * int64_t{pool.size()} ? group : 1;
  const int64_t per_kv = group / heads;
  const int64_t n_items = n_tokens * p.n_head_kv * per_kv;
  const int64_t stride = scores_stride(buffers.max_kv());
  constexpr int64_t kItemOverhead = 16;  // in keys: q rounding, softmax setup

  int64_t total = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const KeyRange r = keys_of(positions, t, p);
    total += (r.end - r.begin + kItemOverhead) * p.n_head_kv * per_kv;
  }
  // The items in slots of equal cost, several per thread, taken off a
  // shared counter (parallel_for_dynamic): a thread whose core another
  // process slows takes fewer slots, instead of the other thread waiting
  // for its fixed share. Slot s holds the items whose cost midpoint lies in
  // [total s / n_slots, total (s + 1) / n_slots): first_item[s] onward.
  constexpr int kSlotsPerThread = 8;
  constexpr int kMaxSlots = 64;
  const int n_slots = static_cast<int>(
      std::min<int64_t>({int64_t{kSlotsPerThread} * pool.size(), kMaxSlots, n_items}));
  int64_t first_item[kMaxSlots + 1];
  {
    int64_t prefix = 0;
    int s = 0;
    for (int64_t item = 0; item < n_items; ++item) {
      const KeyRange r = keys_of(positions, item / (p.n_head_kv * per_kv), p);
      const int64_t mid = prefix + (r.end - r.begin + kItemOverhead) / 2;
      prefix += r.end - r.begin + kItemOverhead;
      while (s < n_slots && mid >= total * s / n_slots) first_item[s++] = item;
    }
    while (s <= n_slots) first_item[s++] = n_items;
  }
  const float* kt = nullptr;
  if (buffers.wide() && n_tokens >= kLaneMinTokens && lanes_pay(p) &&
      kv.n_kv <= buffers.keys_t_capacity()) {
    int64_t lo = kv.n_kv, hi = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const KeyRange r = keys_of(positions, t, p);
      lo = std::min(lo, r.begin);
      hi = std::max(hi, r.end);
    }
    if (lo < hi) {
      const int64_t b0 = lo / kLaneKeys, b1 = (hi + kLaneKeys - 1) / kLaneKeys;
      if (f16) {
        fill_keys_t<true>(kv, p, b0, b1, buffers, pool);
      } else {
        fill_keys_t<false>(kv, p, b0, b1, buffers, pool);
      }
      kt = buffers.keys_t();
    }
  }
  const int64_t kt_head_stride = buffers.keys_t_head_stride();
  pool.parallel_for_dynamic(n_slots, [&](int64_t b, int64_t e, int thread) {
    float* buf = buffers.thread_buffer(thread);
    float* scores = buf;
    float* qr = buf + group * stride;
    for (int64_t item = first_item[b]; item < first_item[e]; ++item) {
      const int64_t t = item / (p.n_head_kv * per_kv);
      const int g = static_cast<int>(item / per_kv % p.n_head_kv);
      const int64_t h0 = int64_t{g} * group + item % per_kv * heads;  // first head
      Item it = make_item(q, out, kv, p, t, g, h0, keys_of(positions, t, p), elem);
      if (kt != nullptr) it.kt = kt + g * kt_head_stride;
      if (f16) {
        run_item<true>(it, p, heads, scores, stride, qr, buffers.wide());
      } else {
        run_item<false>(it, p, heads, scores, stride, qr, buffers.wide());
      }
    }
  });
}

}  // namespace strata::kernels::simd
