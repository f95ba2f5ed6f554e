// Synthetic models: random-weight GGUFs of a named shape (the tensor names,
// shapes and keys of a real llama-family model), written straight to disk a
// tensor at a time, for tests and benchmarks that need the bytes of a big
// model without downloading one (`strata synth`, docs/synth.md).
//
// Quantized tensors are random blocks written directly in the type's layout
// (ggml/src/ggml-common.h of llama.cpp): random quants with finite f16 scales
// sized so that a matmul row keeps the activations' magnitude (weights of
// standard deviation about 1/sqrt(n_in)), so the engine's finite checks pass
// and a forward pass stays finite. Norm weights are F32 near 1. The same
// options and seed give the same bytes.
//
// Usage:
//   SynthOptions o;
//   o.shape = "llama-3-70b"; o.type = GgmlType::kQ4_0; o.blocks = 4;
//   absl::Status s = write_synthetic_model(o, "/tmp/l70b-4.gguf");
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/ggml_type.h"

namespace strata::synth {

// The hyperparameters of a named shape (llama architecture; the figures of
// the models' config.json / GGUF metadata).
struct Shape {
  std::string_view name;
  int n_layer = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_vocab = 0;  // of the built-in vocabulary (padded to it)
  int n_ctx = 0;    // llama.context_length
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: the head is token_embd
  // A mixture of experts (llama.cpp's llama architecture with experts, as
  // Mixtral): n_expert experts of n_ff each, n_expert_used a token; 0: dense.
  int n_expert = 0;
  int n_expert_used = 0;
};

// The shapes known: "tiny-llama" and "tiny-mixtral" (2 blocks, 256 wide:
// tests), "smollm2-135m", "llama-3-8b", "llama-3-70b", "mixtral-8x7b".
const std::vector<Shape>& shapes();
// nullptr when `name` is not one of shapes().
const Shape* find_shape(std::string_view name);

// The matrix types write_synthetic_model() writes: F32, F16, Q4_0, Q4_1,
// Q5_0, Q8_0, Q4_K, Q5_K, Q6_K.
bool can_synthesize(GgmlType type);

struct SynthOptions {
  std::string shape;                // a name of shapes()
  GgmlType type = GgmlType::kQ4_0;  // of the matrices (vectors are F32)
  // kQ4_K_M: llama.cpp's Q4_K_M choice per tensor instead of `type` for all
  // (llama_tensor_get_type, model/published_models.h): Q4_K, with
  // output.weight Q6_K and attn_v / ffn_down Q6_K on the "more bits" layers
  // (use_more_bits); with 8 experts (mixtral-8x7b) attn_k and attn_v Q8_0,
  // attn_output Q5_K and ffn_down_exps Q6_K on those layers. `type` must
  // then be Q4_K. Not for llama-3-70b (a 70B-class model's other attn_v are
  // Q5_K: not written).
  enum class Mix { kUniform, kQ4_K_M };
  Mix mix = Mix::kUniform;
  int blocks = 0;  // 0: the shape's n_layer; else the first
                   // `blocks` (block_count says so)
  uint64_t seed = 1;
  // A GGUF whose tokenizer.* keys are copied (n_vocab is then its token
  // count); "" for the built-in byte-level vocabulary (SentencePiece-style:
  // <unk> <s> </s>, the 256 byte tokens <0xNN>, padded to the shape's
  // n_vocab with unused <unused_N>), which any text tokenizes into.
  std::string tokenizer_from;
};

// One tensor of a synthetic model.
struct TensorSpec {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // ne0 first
};

// The tensors write_synthetic_model() writes for `options` with a
// vocabulary of `n_vocab` tokens, in file order: token_embd, the blocks'
// (attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down; a mixture's
// ffn_gate_inp (the router, F32) and ffn_gate/up/down_exps, 3-D [n_embd,
// n_ff, n_expert] and [n_ff, n_embd, n_expert] as llama.cpp's), output_norm,
// output (unless the shape ties it). InvalidArgument as
// write_synthetic_model() for bad options.
absl::StatusOr<std::vector<TensorSpec>> tensor_plan(const SynthOptions& options,
                                                    int n_vocab);

// The matrix type `options` asks for tensor `name` (e.g.
// "blk.6.ffn_down.weight") of a model of n_layer blocks, before the
// row-length fallback below.
GgmlType intended_type(const SynthOptions& options, std::string_view name,
                       int n_layer);

// What was written: tensors and bytes (of tensor data).
struct SynthReport {
  int n_layer = 0;
  int n_vocab = 0;
  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  // Matrices whose rows are not a multiple of `type`'s block size (e.g. 576
  // wide for Q4_K's 256) are written Q8_0, as llama-quantize falls back.
  size_t fallback_tensors = 0;
};

// Writes the model to `path` (through PATH.tmp, renamed on success). Holds
// one tensor's bytes in memory at a time. Errors: InvalidArgument naming the
// option (unknown shape, type not synthesizable, blocks out of range), the
// tokenizer GGUF's errors, I/O errors with their errno code.
absl::StatusOr<SynthReport> write_synthetic_model(const SynthOptions& options,
                                                  const std::string& path);

}  // namespace strata::synth
