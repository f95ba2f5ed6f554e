// Grouped-query attention vectorised for AVX2 + FMA + F16C: the same op as
// reference::ops::attention (kernels/cpu/reference/ops/attention.h — the
// formula, the layouts of q, the KV cache and out, causal and sliding-window
// masks, soft-capping, attention sinks, and llama.cpp's non-flash-attention numerics with an
// f16 cache: q rounded to f16 before q·k, probabilities rounded to f16 before
// they weigh V, softmax summed as ggml_vec_soft_max_f32 sums), computed with
// 8-lane vectors:
//
//   scores   the query heads of one KV head's group in tiles of up to 4
//            heads x a few keys (1 x 8, 2 x 4, 3 x 4, 4 x 2): each key row
//            is loaded (f16 widened with vcvtph2ps) once per head_dim step
//            for all heads of the tile; every (head, key) pair has its own
//            8-lane accumulator over head_dim in increasing order, reduced
//            in the order ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))
//            whatever the tile (reduce8 for 8 pairs, hsum for one), so a
//            score does not depend on the tiling;
//   softmax  ggml_v_expf's polynomial on 8 lanes (bit for bit the
//            reference's exp_ggml), the sum grouped exactly as the reference
//            (a sink's logit, when params.sinks is set, joins the maximum
//            and adds expf(sink - max) after the keys, as the reference);
//   values   out_h += p_j * v_j with FMA from zero, j increasing, in tiles
//            of up to 4 heads x a few chunks of 8 of head_dim_v (1 x 8,
//            2 x 6, 3 x 4, 4 x 2: accumulators and p_j broadcasts fit the
//            16 registers): each value chunk is loaded (and widened) once
//            for all heads of the tile.
//
// On the avx512 and avx512vnni tiers (AttentionBuffers' isa) the same tiles
// run on 512-bit registers: a score tile of up to 4 heads x 8 keys holds two
// keys' 8-lane accumulators per register, a value tile 16 values of a row,
// and the softmax runs on 16 lanes; each lane sees the same operations in
// the same order, so the results equal the 8-lane tiles' bit for bit
// (tests/kernels/simd: WideTilesEqualEightLaneTiles).
//
// A prefill step on those tiers (16 or more query rows; head_dim_k up to
// 96 and a GQA group other than 1 or 4, the shapes where it measured
// faster: attention.cc, lanes_pay) first copies the keys it attends to into
// a transposed f32 buffer, 16 keys per block, and scores with the keys in
// lanes: one register holds 16 keys of one head, with 8 registers of
// partial sums per head (the dimensions d = l mod 8) added in the order
// above, so the scores are again the same floats.
//
// Results differ from the reference only by f32 summation order in q·k and
// by FMA rounding in the value sum (tests/kernels/simd: within 1e-5 of
// sum |terms|); they do not depend on the tiling or the thread count.
//
// Work split: (token, KV head) items cut into one contiguous range per
// thread of equal cost (keys attended), so a causal prefill's later rows,
// which attend to more keys, do not leave one thread waiting on the other.
// A step with fewer than 4 items per thread (a decode step) is spread
// instead: the threads take chunks of 32 keys of any item and score them
// for the whole GQA group (whoever scores an item's last chunk normalizes
// it), then take (item, range of value chunks) pieces. Every score and
// output is computed by the same code in the same order either way.
//
// Requirements (supported() says): the CPU has AVX2 + FMA + F16C, head_dim_k
// and head_dim_v are multiples of 8. The caller falls back to the reference
// op otherwise.
//
// Sources: the driver (work split, decode spread, the steps of an item) in
// attention.cc; the 8-lane tiles in attention_avx2.cc, the 512-bit ones in
// attention_avx512.cc; what they share in attention_tiles.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace strata::kernels::simd {

// True when attention() can run `params` on this CPU.
bool attention_supported(const AttentionParams& params);

// Per-thread buffers for up to max_kv cached positions (scores of one
// query's group of heads, its q rounded to the cache's type).
class AttentionBuffers {
 public:
  // isa: the tier whose vectors the tiles use; avx512 and avx512vnni run
  // them on 512-bit registers (when the CPU has them), with results equal bit
  // for bit to the 8-lane tiles' (tests/kernels/simd).
  AttentionBuffers(int64_t max_kv, const AttentionParams& shape, int n_threads,
                   IsaTier isa = IsaTier::kAvx2);
  int64_t max_kv() const { return max_kv_; }
  // True when the tiles run on 512-bit registers.
  bool wide() const { return wide_; }
  float* thread_buffer(int thread) { return buffer_.data() + thread * per_thread_; }

  // A step spread over the threads by keys (a decode step, see
  // attention.cc): up to max_spread_items() (token, KV head) items, each
  // with a shared slice as a thread buffer is laid out, a count of its key
  // chunks not yet scored, and the index of its first chunk.
  int64_t max_spread_items() const { return max_spread_items_; }
  float* spread_item(int64_t i) { return spread_.data() + i * per_thread_; }
  std::atomic<int64_t>& items_left(int64_t i) { return left_[i]; }
  int64_t* first_chunk() { return first_chunk_.data(); }

  // Wide tiers only: room for a step's keys transposed and widened to f32
  // (attention_avx512.cc, keys in lanes), [n_head_kv][keys_t_capacity() / 16]
  // [head_dim_k][16], 64-byte aligned; keys_t_capacity() is max_kv rounded
  // up to 16, or fewer keys when that would pass 32 MiB, or 0 (narrow
  // tiles). The memory is reserved, not touched, until a step uses it.
  int64_t keys_t_capacity() const { return keys_t_capacity_; }
  int64_t keys_t_head_stride() const { return keys_t_head_stride_; }  // floats
  float* keys_t() { return keys_t_.get(); }

 private:
  struct FreeAligned {
    void operator()(float* p) const;
  };
  int64_t max_kv_;
  bool wide_;
  int64_t per_thread_;
  std::vector<float> buffer_;  // [n_threads][per_thread_], 32-byte rows
  int64_t max_spread_items_ = 0;
  std::vector<float> spread_;  // [max_spread_items_][per_thread_]
  std::unique_ptr<std::atomic<int64_t>[]> left_;
  std::vector<int64_t> first_chunk_;  // [max_spread_items_ + 1]
  int64_t keys_t_capacity_ = 0;
  int64_t keys_t_head_stride_ = 0;
  std::unique_ptr<float[], FreeAligned> keys_t_;
};

// As reference::ops::attention. Requires attention_supported(params),
// kv.n_kv <= buffers.max_kv(), shapes no larger than those the buffers
// were made for, and positions[t] < kv.n_kv (asserted).
void attention(const float* q, const int32_t* positions, int64_t n_tokens,
               const KvView& kv, const AttentionParams& params, float* out,
               AttentionBuffers& buffers, ThreadPool& pool);

}  // namespace strata::kernels::simd
