// Grouped-query attention (Ainslie et al. 2023) of one sequence's new
// tokens against its KV cache, with a causal mask, an optional sliding
// window (Beltagy et al. 2020) and optional soft-capping of the scores
// (Gemma 2):
//
//   s[h][j] = q[t][h] · k[j][h / group]            group = n_head / n_head_kv
//   s       = softcap ? cap * tanh(s / cap) : s
//   p[h][:] = softmax(s * scale + mask)            mask: -inf where j > pos[t]
//                                                  or pos[t] - j >= window
//   out[t][h] = sum_j p[h][j] * v[j][h / group]
//
// With attention sinks (params.sinks, gpt-oss; Xiao et al. 2023, "Efficient
// Streaming Language Models with Attention Sinks"), head h's softmax has one
// more logit, sinks[h], in its denominator only:
//
//   m = max(max_j s'[j], sinks[h]),  s' = s * scale + mask
//   p[h][j] = e^(s'[j] - m) / (sum_j e^(s'[j] - m) + e^(sinks[h] - m))
//
// (ggml-cpu's soft_max with a sinks operand: the sink's term is expf of
// the f32 difference, added to the double sum after the keys').
//
// Layouts (row-major):
//   q    [n_tokens][n_head][head_dim_k]     f32
//   K    [n_ctx][n_head_kv][head_dim_k]     f16 or f32 (KvView); position j
//   V    [n_ctx][n_head_kv][head_dim_v]     of the sequence is row j
//   out  [n_tokens][n_head][head_dim_v]     f32
//   positions [n_tokens]: absolute positions of the query tokens; their own
//   keys must already be in the cache (rows <= positions[t] < n_kv).
//
// Numerics as llama.cpp's CPU path without flash attention: with an f16
// cache, q is rounded to f16 before q·k and the probabilities are rounded
// to f16 before they weigh V (ggml converts the operands of both mul_mats
// to the cache's type); softmax sums in double.
//
// Threads: work items are (token, KV head) pairs split over the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"

namespace strata::reference::ops {

// Per-thread buffers for attention over up to max_kv cached positions.
class AttentionScratch {
 public:
  AttentionScratch(int64_t max_kv, const kernels::AttentionParams& shape,
                   int n_threads);
  int64_t max_kv() const { return max_kv_; }

 private:
  friend void attention(const float*, const int32_t*, int64_t,
                        const kernels::KvView&,
                        const kernels::AttentionParams&, float*,
                        AttentionScratch&, ThreadPool&);
  int64_t max_kv_;
  int64_t per_thread_;
  std::vector<float> buffer_;  // [n_threads][per_thread_]
};

// Computes `out` as documented above. Requires kv.n_kv <= scratch.max_kv()
// and shapes no larger than those the scratch was made for (asserted).
void attention(const float* q, const int32_t* positions, int64_t n_tokens,
               const kernels::KvView& kv,
               const kernels::AttentionParams& params, float* out,
               AttentionScratch& scratch, ThreadPool& pool);

}  // namespace strata::reference::ops
