// The 16-lane tiles of kernels/cpu/simd attention (the avx512 and
// avx512vnni tiers: AVX-512 F/BW/VL/DQ; the entry points are declared in
// attention_tiles.h). Each lane is updated by the same operations in the
// same order as in the 8-lane tiles (attention_avx2.cc), so the results are
// equal bit for bit; what changes is how many lanes one instruction
// carries: a score tile holds two keys' 8-lane accumulators in one register,
// a value tile 16 values of a row, the softmax 16 scores. A prefill step
// may instead score with the keys in lanes (below).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/simd/attention_tiles.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd::attention_internal {

// softmax on 16 lanes: the same scaled scores, maximum, exponentials, sum
// (each 8-key chunk's in hsum()'s order, added in double chunk by chunk) and
// roundings, so the probabilities equal softmax()'s bit for bit.
STRATA_AVX512 void softmax_wide(float* sc, int64_t off, int64_t n, float scale,
                                bool round_f16, float sink) {
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
  const float max = std::max(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)), sink);
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
  if (sink != kNegInf) sum += static_cast<double>(std::exp(sink - max));
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  auto weigh = [&](__m512 v) STRATA_AVX512 {
    v = _mm512_mul_ps(v, inv);
    return round_f16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)) : v;
  };
  int64_t k = 0;
  for (; k + 16 <= end; k += 16) _mm512_storeu_ps(sc + k, weigh(_mm512_loadu_ps(sc + k)));
  if (k < end) _mm512_mask_storeu_ps(sc + k, 0x00FF, weigh(_mm512_maskz_loadu_ps(0x00FF, sc + k)));
}

namespace {

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
  constexpr int64_t kElem = kF16 ? 2 : 4;
  int64_t j = it.j_begin;
  if (it.prefetch) prefetch_ahead(it, dk * kElem, j, j + kPrefetchRows);
  for (; j + 8 <= it.j_end; j += 8) {
    if (it.prefetch) prefetch_ahead(it, dk * kElem, j + kPrefetchRows, j + kPrefetchRows + 8);
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

// ---- Scores with keys in lanes (the avx512 tiers' prefill). A step with
// many query rows first copies its keys, transposed and widened to f32,
// into blocks of kLaneKeys = 16 keys (fill_keys_t, attention.cc); a tile
// then holds 16 keys of one head per register and needs no horizontal sum.
// To keep each score bit for bit what the tiles above give, a (head, key)
// pair still has 8 partial sums, over the dimensions d = l (mod 8) in
// increasing d (partial_lanes); they are added in hsum()'s order ((x0 + x4)
// + (x2 + x6)) + ((x1 + x5) + (x3 + x7)).

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

}  // namespace

template <bool kF16>
STRATA_AVX512 void score_group_wide(const Item& it, const float* qr, int dk, float* sc,
                                    int64_t sc_stride, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX512 {
    score_heads_wide<kF16, decltype(mh)::value>(it, qr, dk, sc, sc_stride);
  });
}

template <bool kF16>
STRATA_AVX512 void value_group_wide(const Item& it, const float* p, int64_t p_stride, float* o,
                                    int dv, int c_begin, int c_end, int m) {
  with_heads(m, [&](auto mh) STRATA_AVX512 {
    value_heads_wide<kF16, decltype(mh)::value>(it, p, p_stride, o, dv, c_begin, c_end);
  });
}

template void score_group_wide<true>(const Item&, const float*, int, float*, int64_t, int);
template void score_group_wide<false>(const Item&, const float*, int, float*, int64_t, int);
template void value_group_wide<true>(const Item&, const float*, int64_t, float*, int, int, int,
                                     int);
template void value_group_wide<false>(const Item&, const float*, int64_t, float*, int, int, int,
                                      int);

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

}  // namespace strata::kernels::simd::attention_internal
