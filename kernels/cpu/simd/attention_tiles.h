// Internal to kernels/cpu/simd/attention*.cc (kernels/cpu/simd/attention.h
// is the op and its numerics). The op is split by ISA:
//
//   attention.cc         the driver: the work split, decode steps spread
//                        over the threads, the steps of one item (round q,
//                        score, normalize, weigh the values) and the choice
//                        of 8- or 16-lane tiles; AttentionBuffers
//   attention_avx2.cc    the 8-lane tiles (AVX2 + FMA + F16C): score and
//                        value tiles of up to 4 heads, the softmax
//   attention_avx512.cc  the same tiles on 512-bit registers (the avx512
//                        tiers), and the keys-in-lanes score tiles of a
//                        prefill step
//
// This header holds what they share: the item, the 8-lane loads and
// reductions, and the 8-lane score and value tiles, which the 512-bit tiles
// also run for their ragged tails (one key, one chunk of 8 values) — one
// definition of every operation a score or a value sees, whichever file
// calls it; then the entry points of each ISA's file.
//
// Threads: pure functions of their arguments; any thread may call them on
// its own buffers.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd::attention_internal {

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
  // The attention sinks of the item's heads ([heads], AttentionParams::
  // sinks from the item's first head); null: none.
  const float* sinks = nullptr;
  // Whether the score loops ask for the item's rows ahead (prefetch_ahead):
  // set for the decode row of a call on one thread, whose cache comes from
  // memory (a batched decode step's weights evicted it since the step
  // before).
  bool prefetch = false;
  int64_t v_bytes = 0;  // bytes of head g's value row (head_dim_v values)
};

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

// How far ahead of the tile being scored the score loops ask for an
// item's rows (Item::prefetch): its keys into L1, its values into L2 for
// the value pass that follows. A KV head's rows are n_head_kv rows apart
// in the cache ([n_ctx][n_head_kv][head_dim]), which the hardware
// prefetchers follow poorly; a batched decode step's caches, together
// larger than the last-level cache, made the loads wait on memory.
// attention_bench --caches 240 -t 1 (SmolLM2's shape, 240 caches of ctx
// 192 = 8 sequences x 30 layers; AMD EPYC Zen 4): 10.3 -> 16.1 GMAC/s with
// 64 rows (32: 13.5, 128: 15-16). On caches that fit the chip (--caches 24)
// the prefetches cost 15 % (31.7 -> 26.9), hence decode items only.
constexpr int64_t kPrefetchRows = 64;

// Prefetches the cache lines of [row, row + bytes) into L1 (kHint =
// _MM_HINT_T0) or L2 (_MM_HINT_T1). Volatile asm, not _mm_prefetch: GCC 12
// deleted the loops of prefetch_ahead, whose only statements were
// __builtin_prefetch calls (none was left in the object code).
template <int kHint>
inline void prefetch_row(const char* row, int64_t bytes) {
  static_assert(kHint == _MM_HINT_T0 || kHint == _MM_HINT_T1);
  const char* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(row) &
                                                   ~uintptr_t{63});
  for (; line < row + bytes; line += 64) {
    if constexpr (kHint == _MM_HINT_T0) {
      asm volatile("prefetcht0 %0" : : "m"(*line));
    } else {
      asm volatile("prefetcht1 %0" : : "m"(*line));
    }
  }
}

// The rows [from, to) of the item (clamped to its keys): keys of k_bytes
// into L1, values into L2.
inline void prefetch_ahead(const Item& it, int64_t k_bytes, int64_t from, int64_t to) {
  for (int64_t r = from; r < std::min(to, it.j_end); ++r) {
    prefetch_row<_MM_HINT_T0>(it.k + r * it.k_stride, k_bytes);
    prefetch_row<_MM_HINT_T1>(it.v + r * it.v_stride, it.v_bytes);
  }
}

// Scores of M query heads (rows of qr, dk apart) against the N keys from
// row kb on, written to sc[m * sc_stride + n]. Each key is loaded (and
// widened) once for all M heads; each (head, key) pair keeps its own
// accumulator over head_dim in increasing order, reduced in hsum()'s order.
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

// Value chunks (of 8) one tile of M heads covers: M * D + M + 1 <= 16
// registers.
constexpr int value_chunks(int m) { return m == 1 ? 8 : m == 2 ? 6 : m == 3 ? 4 : 2; }

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

// Keys per transposed block of a prefill step's keys (AttentionBuffers::
// keys_t, Item::kt; keys in lanes, attention_avx512.cc).
constexpr int kLaneKeys = 16;

// ---- attention_avx2.cc: the 8-lane tiles.

// Softmax over sc[off, off + n) in place after scaling it by `scale`, the
// rest of sc[0, round8(off + n)) zeroed; summed as the reference's
// softmax_keys (8-lane chunks from key 0, each in hsum()'s order, added in
// double chunk by chunk); then rounded to f16 when the cache is f16.
// `sink`: an attention sink's logit, which joins the maximum and, as expf
// of its difference, the sum after the keys' (the reference's order);
// -inf: none.
STRATA_AVX2 void softmax(float* sc, int64_t off, int64_t n, float scale, bool round_f16,
                         float sink);

// Scores of m (1..4) query heads (rows of qr, dk apart) for the item's keys
// [it.j_begin, it.j_end): sc[h * sc_stride + j - it.j_begin].
template <bool kF16>
STRATA_AVX2 void score_group(const Item& it, const float* qr, int dk, float* sc,
                             int64_t sc_stride, int m);

// out of m (1..4) heads, o[h * dv + ...], from their probabilities
// p[h * p_stride + j - it.j_begin], for the 8-value chunks [c_begin, c_end)
// of head_dim_v.
template <bool kF16>
STRATA_AVX2 void value_group(const Item& it, const float* p, int64_t p_stride, float* o,
                             int dv, int c_begin, int c_end, int m);

// ---- attention_avx512.cc: the same on 512-bit registers (the CPU must have
// the avx512 tier); each result equals the 8-lane function's bit for bit.

// softmax on 16 lanes: the same scaled scores, maximum, exponentials, sum
// (each 8-key chunk's in hsum()'s order, added in double chunk by chunk) and
// roundings, so the probabilities equal softmax()'s bit for bit.
STRATA_AVX512 void softmax_wide(float* sc, int64_t off, int64_t n, float scale,
                                bool round_f16, float sink);

// score_group on 512-bit tiles of up to 4 heads x 8 keys, then pairs, then one.
template <bool kF16>
STRATA_AVX512 void score_group_wide(const Item& it, const float* qr, int dk, float* sc,
                                    int64_t sc_stride, int m);

// value_group on 512-bit tiles of 16 values.
template <bool kF16>
STRATA_AVX512 void value_group_wide(const Item& it, const float* p, int64_t p_stride, float* o,
                                    int dv, int c_begin, int c_end, int m);

// The group's scores for keys [j0, j1) of an item with transposed keys
// (it.kt), at scores[h * stride + at + j - j0], up to 3 heads a tile (24
// accumulators of the 32 registers).
STRATA_AVX512 void score_group_lanes(const Item& it, int dk, int group, const float* qr,
                                     float* scores, int64_t stride, int64_t at, int64_t j0,
                                     int64_t j1);

}  // namespace strata::kernels::simd::attention_internal
