// The cpu implementation of Backend (private to worker/cpu/): generated matmuls
// (kernels/cpu/jit, over weights repacked at load) for every linear layer and
// the head whose type a generator serves, reference ops
// (kernels/cpu/reference/ops) for the rest, over weights mapped from the
// GGUF. Block recipes are in forward.cc (the mixture-of-experts
// feed-forward in moe.cc); sequences and the step in cpu_backend.cc.
// Environment: STRATA_JIT=0 runs the reference matmul everywhere;
// STRATA_ISA=avx2|avx512|avx512vnni forces the ISA tier (kernels/cpu/isa.h);
// STRATA_NO_TUNE=1 keeps the kernels' default parameters instead of tuned
// ones (kernels/cpu/jit/tuner.h); STRATA_PIN=1 pins the pool's workers to
// CPUs of the affinity mask (thread_pool.h).
//
// Buffers are sized at creation for max_batch rows (and the attention
// scratch at add_sequence for the longest context), so a decode step does
// not allocate.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/reference/ops/attention.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/simd/attention.h"
#include "kernels/cpu/simd/ffn_activation.h"
#include "kernels/cpu/simd/norm_rope.h"
#include "worker/backend.h"
#include "worker/cpu/cpu_weights.h"
#include "worker/head_picks.h"
#include "worker/kv_cache.h"

namespace strata::worker {

// Rows of a step whose experts run together in the mixture-of-experts
// step: all of a step's rows (at most max_batch), unless rows x
// n_expert_used slots would pass max_slots (CpuBackendOptions::
// moe_max_slots); then fewer, so that the buffer of every slot's output
// ([rows][k][n_embd] floats) stays max_slots x n_embd however many experts
// a file asks each token to use. An expert's weights are read once per
// block of rows (realistic k of 2-8 keep a whole 512-row chunk in one
// block). A row's outputs do not depend on the blocking.
inline int moe_block_rows(int max_batch, int n_expert_used, int max_slots) {
  return std::max(1, std::min(max_batch, max_slots / std::max(n_expert_used, 1)));
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const gguf::GgufModel> model,
             const arch::Hyperparameters& hp, BlockRange range,
             const CpuBackendOptions& options,
             std::unique_ptr<ShardWeights> weights);

  std::string_view name() const override { return "cpu"; }
  const arch::Hyperparameters& hyperparameters() const override { return hp_; }
  BlockRange range() const override { return range_; }
  int n_vocab() const override { return w_->n_vocab; }
  int max_batch() const override { return options_.max_batch; }

  absl::Status add_sequence(int seq, int n_ctx) override;
  absl::Status remove_sequence(int seq) override;
  absl::StatusOr<int> sequence_length(int seq) const override;
  absl::StatusOr<int> sequence_context(int seq) const override;
  absl::Status truncate_sequence(int seq, int n) override;
  int64_t kv_row_bytes() const override;
  absl::Status read_kv(int seq, int pos, int n, uint8_t* out) const override;
  absl::Status append_kv(int seq, int n, const uint8_t* in) override;
  absl::Status forward(const ForwardRequest& request,
                       ForwardResult* result) override;

  // Generates the matmul kernels of the loaded weights for `tier`
  // (make_cpu_backend calls it once).
  absl::Status attach_kernels(kernels::IsaTier tier);

 private:
  bool is_first() const { return range_.first == 0; }
  bool is_last() const { return range_.last == hp_.n_layer; }

  // One slice of the current step (forward()): rows [row0, row0 + rows)
  // of the step buffers, positions pos0 .. of sequence `seq`.
  struct StepSlice {
    int seq = 0;
    KvCache* cache = nullptr;
    int row0 = 0;
    int rows = 0;
    int pos0 = 0;
    Logits logits = Logits::kNone;
  };
  // Sequence seq's (length, n_ctx), or NotFound (check_forward's extent).
  absl::StatusOr<std::pair<int, int>> extent(int seq) const;

  // forward.cc: one block of each recipe, over rows [0, n) of x_ (the
  // slices of step_slices_).
  void llama_block(int layer, int n);
  void gemma_block(int layer, int n);
  // Shared steps of the blocks.
  void attention_step(int layer, int n);  // xn_ -> proj_
  // Asks the caches for the KV rows block il's attention reads at a decode
  // step at position pos (from the first key its window keeps).
  void prefetch_kv(int il, int pos, const KvCache& cache) const;
  void feed_forward_step(int layer, int n);               // xn_ -> proj_
  // moe.cc: the mixture-of-experts feed-forward (hp_.moe), xn_ -> proj_.
  void moe_step(int layer, int n);
  void moe_experts(const ExpertWeights& x, const float* xn, int n,
                   const int32_t* route_experts, const float* route_weights, float* proj);
  // Biases of one expert's projections (gpt-oss), null: none.
  struct FfnBias {
    const float* gate = nullptr;  // [f]
    const float* up = nullptr;    // [f]
    const float* down = nullptr;  // [n_embd]
  };
  // y = W_down act(W_gate x + b_gate, W_up x + b_up) + b_down for n rows,
  // f the FFN width, act the family's (SwiGLU silu(g) u, or gpt-oss's
  // clamped one, kernels/cpu/reference/ops/swiglu_oai.h); gate_up: the
  // fused matrix when present. Uses gate_ and up_.
  void swiglu_ffn(const Linear& gate_up, const Linear& gate, const Linear& up,
                  const Linear& down, int64_t f, const float* x, int n, float* y,
                  const FfnBias& bias);
  // Output norm and head for the rows `rows` of x_, into logits_
  // ([rows.size()][n_vocab], in that order).
  void head(std::span<const int> rows);
  // y = x · Wᵀ for n rows: the generated matmul when l has one, else the
  // reference.
  void matmul(const Linear& l, const float* x, int n, float* y);
  // RMSNorm of n rows of dim values (kernels/cpu/simd when on, else the
  // reference op).
  void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim,
                float* y);
  // The residual add x += delta over n rows of n_embd, then, when `weight`
  // is given, xn_ = RMSNorm(x) with it (one pass with the simd kernels).
  void residual_add(const float* delta, int n, const float* weight);
  // Rotates q [n][n_head][dk] and k [n][n_head_kv][dk] by RoPE with `rope`.
  // The angles are computed once per step for each distinct `rope` (every
  // layer of llama, Gemma 3's local and global layers) and shared by q and k.
  void rotate_qk(const kernels::RopeParams& rope, int n, float* q,
                 float* k);
  // The heads' shape (no scale, window or cap) that sizes attention buffers.
  kernels::AttentionParams attention_shape() const;

  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  BlockRange range_;
  CpuBackendOptions options_;
  std::unique_ptr<ShardWeights> w_;
  ThreadPool pool_;
  reference::ops::MatmulScratch matmul_scratch_;
  kernels::jit::KernelCache kernel_cache_;  // code of the generated matmuls
  kernels::jit::JitScratch jit_scratch_;
  std::unique_ptr<reference::ops::AttentionScratch> attention_scratch_;
  // The vectorised attention (kernels/cpu/simd) when the generated kernels
  // are on and it supports the model's heads; else the reference op.
  bool simd_attention_ = false;
  kernels::IsaTier simd_isa_ = kernels::IsaTier::kAvx2;  // attention and FFN activation vectors
  bool simd_ffn_activation_ = false;  // kernels/cpu/simd swiglu / geglu
  bool simd_norm_rope_ = false;       // kernels/cpu/simd rms_norm / rope_rotate
  // RoPE angle tables of the current step ([B][n_rot] each, reserved at
  // construction): the params they were made with, and the step.
  struct RopeTable {
    kernels::RopeParams params;
    uint64_t step = 0;  // 0: empty
    std::vector<float> cs;
  };
  RopeTable rope_tables_[2];
  int rope_table_next_ = 0;  // the slot the next new table replaces
  uint64_t step_ = 0;        // forward() calls so far
  std::unique_ptr<kernels::simd::AttentionBuffers> simd_attention_buffers_;
  // Per pool thread: a pool of one and attention buffers for one thread,
  // for the decode slices of a step with several (forward.cc).
  struct SerialAttention {
    explicit SerialAttention(int64_t max_kv, const kernels::AttentionParams& shape,
                             kernels::IsaTier isa)
        : pool(1), buffers(max_kv, shape, 1, isa) {}
    ThreadPool pool;
    kernels::simd::AttentionBuffers buffers;
  };
  std::vector<std::unique_ptr<SerialAttention>> serial_attention_;  // [n_threads]
  std::vector<const StepSlice*> decode_slices_;  // of the current step
  std::map<int, std::unique_ptr<KvCache>> sequences_;

  // Step buffers, B = max_batch rows (shape comments per row).
  std::vector<int32_t> positions_;  // [B] absolute positions
  std::vector<float> x_;            // [B][n_embd] residual stream
  std::vector<float> xn_;           // [B][n_embd] normed input of a sublayer
  std::vector<float> q_;            // [B][n_head][dk]
  std::vector<float> k_;            // [B][n_head_kv][dk]
  std::vector<float> v_;            // [B][n_head_kv][dv]
  std::vector<float> qkv_;          // [B][(n_head + n_head_kv) dk + n_head_kv dv]
                                    // (fused projections only)
  std::vector<float> attn_;         // [B][n_head][dv]
  std::vector<float> proj_;         // [B][n_embd] sublayer output
  std::vector<float> gate_;         // [B][ff] (fused: [B][2 ff]), ff the
                                    // widest of n_ff, n_ff_expert, n_ff_shared
  std::vector<float> up_;           // [B][ff]
  // Mixture-of-experts buffers (moe.cc; empty for a dense model), k =
  // n_expert_used.
  std::vector<float> router_logits_;   // [B][n_expert]
  std::vector<int32_t> route_experts_; // [B][k] expert of each slot
  std::vector<float> route_weights_;   // [B][k] its weight
  std::vector<float> route_scratch_;   // [2 n_expert]
  std::vector<int32_t> expert_begin_;  // [n_expert + 1] first slot of each expert
  std::vector<int32_t> expert_fill_;   // [n_expert] (grouping cursor)
  std::vector<int32_t> expert_slots_;  // [B k] slots (t k + j) grouped by expert
  std::vector<float> moe_x_;           // [B][n_embd] one expert's gathered rows
  std::vector<float> moe_y_;           // [B][n_embd] their outputs (then the
                                       // shared expert's)
  std::vector<float> expert_out_;      // [R][k][n_embd] output of each slot of
                                       // R = moe_block_rows(B, k) rows
  std::vector<float> logits_;       // [rows][n_vocab], grown on demand
  std::vector<float> embeddings_;   // [embedding slices][n_embd]
  HeadPicks picks_;  // the kArgmax and kTopK slices' (take_picked_rows)
  std::vector<StepSlice> step_slices_;  // [slices] of the current step
  std::vector<int> head_rows_;          // [rows] that get logits
};

}  // namespace strata::worker
