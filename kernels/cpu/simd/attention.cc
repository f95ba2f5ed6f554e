#include "kernels/cpu/simd/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd/attention_tiles.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd {
namespace {

using attention_internal::Item;
using attention_internal::kLaneKeys;
using attention_internal::load8;
using attention_internal::score_group;
using attention_internal::score_group_lanes;
using attention_internal::score_group_wide;
using attention_internal::softmax;
using attention_internal::softmax_wide;
using attention_internal::value_chunks;
using attention_internal::value_group;
using attention_internal::value_group_wide;

// Scores buffer of one head: the keys of [base, base + stride) where base is
// the first attended key rounded down to 8, so that 8-lane chunks line up
// with key 0 as in ggml_vec_soft_max_f32 (the reference sums that way).
int64_t scores_stride(int64_t max_kv) { return (max_kv + 16) / 8 * 8; }

// How many of `rest` heads one tile takes (at most 4).
int tile_heads(int rest) { return rest >= 4 && rest % 3 != 0 ? 4 : std::min(rest, 3); }

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
      score_group<kF16>(part, qh, dk, sc, stride, m);
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
    const float sink =
        it.sinks != nullptr ? it.sinks[hh] : -std::numeric_limits<float>::infinity();
    if (wide) {
      softmax_wide(scores + hh * stride, off, n, p.scale, kF16, sink);
    } else {
      softmax(scores + hh * stride, off, n, p.scale, kF16, sink);
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
      value_group<kF16>(it, ph, stride, oh, dv, c0, c1, m);
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
  it.v_bytes = int64_t{p.head_dim_v} * elem;
  it.j_begin = r.begin;
  it.j_end = r.end;
  if (p.sinks != nullptr) it.sinks = p.sinks + h0;
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
  // either way (the tiles of attention_tiles.h).
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
      it.prefetch = n_tokens == 1;  // a decode row: its cache is off the chip
      if (f16) {
        run_item<true>(it, p, heads, scores, stride, qr, buffers.wide());
      } else {
        run_item<false>(it, p, heads, scores, stride, qr, buffers.wide());
      }
    }
  });
}

}  // namespace strata::kernels::simd
