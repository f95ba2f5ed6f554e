// The weights of one shard as the cpu backend uses them: matrices are views
// into the GGUF mapping (any ggml type matmul supports); vectors (norm
// weights, biases, RoPE frequency factors) are converted to f32 and owned.
// Shapes are [rows][elements per row], i.e. [ne1][ne0] of GGUF. Each linear
// layer may carry a generated matmul (kernels/cpu/jit) with its weights
// repacked, attached after load by attach_jit_kernels.
//
// Ownership: ShardWeights owns its vectors and the generated matmuls; the
// matrices point into the GgufModel, which must outlive it. Immutable after
// load: any thread reads.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/jit/tuner.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "worker/backend.h"

namespace strata::worker {

using kernels::WeightMatrix;

// A linear layer's weight matrix: the GGUF view and, when a generator serves
// its type, the generated matmul over its repacked rows (null: the
// reference matmul runs).
// A weight matrix and, when a generator serves its type, its generated
// matmul. A matrix fused at load (attach_jit_kernels) may have only `jit`:
// its packed copy is all there is.
struct Linear {
  WeightMatrix w;
  std::shared_ptr<const kernels::jit::JitMatmul> jit;
  bool present() const { return w.data != nullptr || jit != nullptr; }
};

// The mixture-of-experts feed-forward of one block (arch::MoeParams). The
// GGUF holds each projection of all experts as one 3-D tensor
// ("blk.N.ffn_gate_exps.weight", ne = [n_embd, n_ff_expert, n_expert]);
// expert e's matrix is the view of its ne0 x ne1 slice (data + e x the
// slice's bytes), with its own generated matmul.
struct ExpertWeights {
  Linear router;                // ffn_gate_inp: [n_expert][n_embd]
  std::vector<Linear> gate;     // [n_expert] x [n_ff_expert][n_embd]
  std::vector<Linear> up;       // [n_expert] x [n_ff_expert][n_embd]
  std::vector<Linear> down;     // [n_expert] x [n_embd][n_ff_expert]
  std::vector<Linear> gate_up;  // [n_expert] x [2 n_ff_expert][n_embd], fused
                                // at load (gate rows then up rows)
  // The shared expert (qwen2moe), run on every token and scaled by
  // sigmoid(shared_router · x); absent (empty) otherwise.
  Linear shared_router;         // ffn_gate_inp_shexp: [1][n_embd]
  Linear shared_gate;           // [n_ff_shared][n_embd]
  Linear shared_up;             // [n_ff_shared][n_embd]
  Linear shared_down;           // [n_embd][n_ff_shared]
  Linear shared_gate_up;        // fused at load: [2 n_ff_shared][n_embd]
  // Biases (gpt-oss), f32; null when the family has none.
  const float* router_bias = nullptr;  // ffn_gate_inp.bias [n_expert]
  const float* gate_bias = nullptr;    // ffn_gate_exps.bias [n_expert][n_ff_expert]
  const float* up_bias = nullptr;      // ffn_up_exps.bias [n_expert][n_ff_expert]
  const float* down_bias = nullptr;    // ffn_down_exps.bias [n_expert][n_embd]
  bool present() const { return router.present(); }
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  Linear wq;                         // [n_head * dk][n_embd]
  Linear wk;                         // [n_head_kv * dk][n_embd]
  Linear wv;                         // [n_head_kv * dv][n_embd]
  Linear wqkv;                       // fused: [(n_head + n_head_kv) * dk
                                     //          + n_head_kv * dv][n_embd]
  Linear wqk;                        // fused at load when v differs (type or
                                     // width; Q4_K_M files: some layers' v):
                                     // [(n_head + n_head_kv) * dk][n_embd]
  const float* bq = nullptr;         // [n_head * dk], optional
  const float* bk = nullptr;         // [n_head_kv * dk], optional
  const float* bv = nullptr;         // [n_head_kv * dv], optional
  const float* q_norm = nullptr;     // [dk] (QK-norm); olmoe: [n_head * dk]
  const float* k_norm = nullptr;     // [dk]; olmoe: [n_head_kv * dk]
  Linear wo;                         // [n_embd][n_head * dv]
  const float* bo = nullptr;         // [n_embd] attn_output.bias (gpt-oss)
  const float* attn_sinks = nullptr; // [n_head] one logit per head (gpt-oss)
  const float* post_attn_norm = nullptr;  // [n_embd]
  const float* ffn_norm = nullptr;        // [n_embd]
  // Dense FFN (absent in a mixture-of-experts block, which has `experts`).
  Linear w_gate;                     // [n_ff][n_embd]
  Linear w_up;                       // [n_ff][n_embd]; fused: [2 n_ff][n_embd]
  Linear w_down;                     // [n_embd][n_ff]
  Linear w_gate_up;                  // fused at load: [2 n_ff][n_embd],
                                     // gate rows then up rows
  const float* post_ffn_norm = nullptr;   // [n_embd]
  ExpertWeights experts;             // mixture-of-experts FFN (hp.moe.n_expert > 0)
};

struct ShardWeights {
  WeightMatrix token_embd;            // [n_vocab][n_embd] (first stage)
  std::vector<LayerWeights> layers;   // [range.last - range.first]
  const float* output_norm = nullptr; // [n_embd] (last stage)
  Linear output;                      // [n_vocab][n_embd] (last stage;
                                      // token_embd when tied)
  const float* rope_freqs = nullptr;  // [n_rot / 2], optional (llama3)
  int n_vocab = 0;
  std::deque<std::vector<float>> owned;  // storage of the vectors above
  std::deque<std::vector<uint8_t>> owned_bytes;  // fused matrices' rows
                                                 // that a JitMatmul views
  // The model the views point into (it outlives the weights): once a
  // generated matmul has packed its own copy of a matrix, attach_jit_kernels
  // releases the matrix's mapped pages (GgufModel::release_pages), so the
  // process holds each weight once. nullptr: nothing released.
  const gguf::GgufModel* source = nullptr;
  uint64_t released_bytes = 0;  // released so
};

// Loads and checks the weights of `range`. See make_cpu_backend for errors.
absl::StatusOr<std::unique_ptr<ShardWeights>> load_shard_weights(
    const gguf::GgufModel& model, const arch::Hyperparameters& hp,
    BlockRange range);

// Creates the generated matmul of every linear layer and the head whose
// type a generator serves (others keep the reference matmul), packing rows
// on `pool`; kernels are shared through `cache`, which must outlive `w`.
// With `tuner`, each matmul takes its tuned parameters (measured on
// `scratch` and `pool` when not cached; kernels/cpu/jit/tuner.h); without,
// the defaults.
// Decode reads every weight once per token, and each matmul is a pass of
// the pool: so q, k and v of a layer (and gate and up) whose type and
// width agree are fused into one matrix (wqkv, w_gate_up: rows
// concatenated in that order, packed once; per-row results are those of
// the separate matrices bit for bit).
// `progress` (may be null): one phase, "repacking weights" (or "repacking
// and tuning weights" with a tuner), one step a layer.
// Errors: those of JitMatmul::create other than Unimplemented, naming the
// tensor ("layer 3 of the shard: ffn_up.weight: ...").
absl::Status attach_jit_kernels(ShardWeights& w, kernels::IsaTier tier,
                                kernels::jit::KernelCache& cache,
                                kernels::jit::Tuner* tuner,
                                kernels::jit::JitScratch& scratch,
                                ThreadPool& pool, Progress* progress = nullptr);

}  // namespace strata::worker
