// Architecture: the hyperparameters of a decoder-only transformer read from
// a GGUF's metadata, and the recipe of its blocks (which optional steps a
// block takes). Selected by `general.architecture`; one entry per family:
//
//   llama   Llama 2/3 (with llama3 `rope_freqs`), Mistral, TinyLlama, SmolLM
//   qwen2   llama + q/k/v biases, NeoX RoPE
//   qwen3   llama + per-head QK RMSNorm, NeoX RoPE, explicit head size
//   gemma2  pre+post norms, GeGLU, sqrt(n_embd) embedding scale, sliding
//           window on even layers, attention and final-logit soft-capping
//   gemma3  gemma2's block + QK-norm, 5 sliding : 1 global layers with
//           their own RoPE bases, no soft-capping
//   phi3    fused qkv and gate|up matrices, NeoX RoPE
//   llama with ARCH.expert_count > 0: Mixtral (mixture-of-experts FFN,
//           softmax routing, top-k weights renormalised)
//   qwen2moe   qwen2's block (q/k/v biases, NeoX RoPE) with an MoE FFN
//           (weights not renormalised) plus a shared expert scaled by
//           sigmoid(ffn_gate_inp_shexp · x)
//   qwen3moe   qwen3's block (per-head QK-norm) with an MoE FFN (weights
//           renormalised)
//   olmoe   NeoX RoPE, RMSNorm of the whole q and k rows (not per head),
//           MoE FFN (weights not renormalised)
//   gpt-oss q/k/v and output biases, attention sinks, sliding window on
//           even layers, NeoX RoPE (YaRN from rope.scaling.*), the FFN norm
//           stored as post_attention_norm, mixture-of-experts feed-forward
//           with gpt-oss's clamped SwiGLU (llama.cpp: LLM_ARCH_OPENAI_MOE)
//
// Keys read, with ARCH = general.architecture (GGUF spec, "LLM" section;
// which ones each family needs and their defaults as llama.cpp's
// src/llama-model.cpp load_hparams has them):
//   required: ARCH.block_count, .embedding_length, .feed_forward_length,
//     .attention.head_count, .attention.layer_norm_rms_epsilon
//   optional: .attention.head_count_kv (= head_count), .context_length
//     (2048), .attention.key_length / .value_length (= n_embd / n_head),
//     .rope.dimension_count (= key_length), .rope.freq_base (10000),
//     .rope.scaling.type ("none" | "linear" | "yarn"), .rope.scaling.factor,
//     .rope.scale_linear (old name), .rope.scaling.original_context_length,
//     .rope.scaling.attn_factor (1; times YaRN's own factor),
//     .attention.sliding_window (gemma2: 4096, gemma3 and gpt-oss:
//     required), .attention.sliding_window_pattern (gpt-oss: a layer
//     period, 2 by default, whose last layer is global; or one bool per
//     layer), .rope.freq_base_swa (gpt-oss: the sliding layers' base),
//     .attn_logit_softcapping (gemma2: 50), .final_logit_softcapping
//     (gemma2: 30), .vocab_size (= length of tokenizer.ggml.tokens)
//   mixture-of-experts (llama optional, the MoE families required):
//     .expert_count, .expert_used_count (1 <= used <= count <= 256),
//     .expert_feed_forward_length (qwen2moe / qwen3moe; default
//     feed_forward_length / expert_used_count; llama and olmoe use
//     feed_forward_length), .expert_shared_feed_forward_length (qwen2moe;
//     default feed_forward_length). For these families llama.cpp
//     hard-codes the gating (softmax) and whether the top-k weights are
//     renormalised, and reads no .expert_weights_scale (so the scale is 1).
// Facts that GGUF does not carry and llama.cpp hard-codes: gemma3's
// sliding-window pattern (5 of every 6 layers) and local RoPE base 10000,
// gemma2's pattern (even layers), the query scale of gemma 27B models.
//
// Errors: InvalidArgument naming the key ("gemma3.attention.head_count:
// missing (required by architecture gemma3)", "llama.block_count: 0 is out
// of range [1, 4096]") or the architecture ("unknown architecture 'foo'
// (general.architecture); supported: llama, ...").
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf_reader.h"

namespace strata::arch {

enum class Family {
  kLlama, kQwen2, kQwen3, kGemma2, kGemma3, kPhi3, kQwen2Moe, kQwen3Moe, kOlmoe, kGptOss
};

// The names general.architecture uses, in Family order.
std::vector<std::string_view> supported_architectures();

enum class RopeStyle {
  kNormal,  // rotate pairs (2i, 2i+1)
  kNeox,    // rotate pairs (i, i + n_rot/2)
};

enum class FfnActivation {
  kSilu,      // SwiGLU: silu(gate) * up
  kGeluTanh,  // GeGLU: gelu_tanh(gate) * up
  // gpt-oss: min(gate, 7) sigmoid(1.702 min(gate, 7)) (clamp(up, -7, 7) + 1)
  // (kernels/cpu/reference/ops/swiglu_oai.h)
  kSwigluOai,
};

// The steps a block takes besides the common ones (norm, attention,
// residual, norm, gated FFN, residual). The forward pass reads these.
struct BlockRecipe {
  bool fused_qkv = false;        // one attn_qkv matrix -> [q | k | v] (phi3)
  bool qkv_bias = false;         // attn_{q,k,v}.bias (qwen2)
  bool qk_norm = false;          // RMSNorm per head on q and k (qwen3, gemma3)
  bool qk_norm_full = false;     // RMSNorm of each whole q and k row
                                 // (olmoe: weights [n_head dk], [n_head_kv dk])
  bool post_attn_norm = false;   // RMSNorm of the attention output (gemma)
  bool post_ffn_norm = false;    // RMSNorm of the FFN output (gemma)
  bool fused_gate_up = false;    // one ffn_up matrix -> [gate | up] (phi3)
  bool attn_out_bias = false;    // attn_output.bias (gpt-oss)
  bool attn_sinks = false;       // attn_sinks.weight [n_head] (gpt-oss)
  bool expert_bias = false;      // ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias
                                 // (gpt-oss)
  // The tensor of the norm before the feed-forward ("blk.N." + this).
  std::string_view ffn_norm = "ffn_norm.weight";  // gpt-oss: post_attention_norm
  FfnActivation activation = FfnActivation::kSilu;
  RopeStyle rope = RopeStyle::kNormal;
  // true: q is multiplied by attention_scale before attention (gemma, phi3);
  // false: the scores are (llama, qwen). Same maths, different rounding.
  bool scale_query = false;
  float embedding_scale = 1.0f;  // token embeddings times this (gemma)
};

// RoPE settings of one layer.
struct LayerRope {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
};

// How the router's logits become the experts' probabilities
// (llama.cpp's llama_expert_gating_func_type).
enum class ExpertGating {
  kSoftmax,        // softmax over all experts, then top-k
  kSigmoid,        // sigmoid of each logit, then top-k
  kSoftmaxWeight,  // top-k of the logits, then softmax over the k (gpt-oss)
};

// The mixture-of-experts feed-forward (Shazeer et al. 2017; Mixtral, Jiang
// et al. 2024): a router picks n_expert_used of n_expert SwiGLU FFNs per
// token and sums their outputs weighted by the gating probabilities.
// n_expert 0: a dense FFN.
struct MoeParams {
  int n_expert = 0;           // ARCH.expert_count
  int n_expert_used = 0;      // ARCH.expert_used_count (top-k)
  int n_ff_expert = 0;        // FFN width of one expert
  int n_ff_shared = 0;        // shared expert's width (qwen2moe), 0: none
  ExpertGating gating = ExpertGating::kSoftmax;
  bool norm_weights = false;  // renormalise the top-k weights to sum 1
  float weights_scale = 1.0f; // the weights times this
};

struct Hyperparameters {
  std::string architecture;  // general.architecture
  Family family = Family::kLlama;
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  int n_rot = 0;             // rotated dimensions per head
  int n_ctx_train = 0;       // context length the model was trained for
  int n_vocab = 0;           // 0 when the file does not say
  float rms_eps = 0.0f;
  float attention_scale = 0.0f;    // usually 1/sqrt(head_dim_k)
  float attn_softcap = 0.0f;       // 0: off
  float final_softcap = 0.0f;      // 0: off
  int sliding_window = 0;          // 0: no sliding-window layers
  // YaRN (rope.scaling.type = yarn); ext_factor 0 otherwise.
  float yarn_ext_factor = 0.0f;
  float yarn_attn_factor = 1.0f;  // scales rotated q and k: YaRN's factor x
                                   // rope.scaling.attn_factor
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  int n_ctx_orig = 0;
  // Per layer: whether it uses the sliding window, and its RoPE.
  std::vector<bool> sliding;       // [n_layer]
  std::vector<LayerRope> rope;     // [n_layer]
  BlockRecipe recipe;
  MoeParams moe;
};

// Reads and checks the hyperparameters of `file`'s architecture.
absl::StatusOr<Hyperparameters> read_hyperparameters(
    const gguf::GgufFile& file);

// "blk.3.attn_q.weight" for (3, "attn_q.weight").
std::string layer_tensor(int layer, std::string_view suffix);

// The inverse: 12 for "blk.12.attn_q.weight"; -1 when the name is not a
// block tensor ("blk." then decimal digits then ".").
int64_t block_index(std::string_view tensor_name);

// OK when every block tensor ("blk.N.*") of `tensors` has N < n_layer.
// Otherwise metadata and tensors disagree (llama.cpp refuses such a file
// too): InvalidArgument naming the first tensor past the count,
// "blk.7.attn_q.weight: block 7 but the metadata says 7 blocks".
absl::Status check_block_tensors(const std::vector<gguf::TensorInfo>& tensors, int n_layer);

}  // namespace strata::arch
