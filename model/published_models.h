// Published models' GGUF layouts: the tensor names, shapes and per-tensor
// ggml types, and the metadata keys placement and the architecture reader
// use, of the big models people split across machines. Written as
// header-only ("sparse") GGUF files (gguf::GgufWriter::write_sparse: the
// data section a hole), they let `strata plan`, placement and the deployment
// checks (deploy/k8s, tests/deploy) work on a 70B-120B model's real sizes at
// no disk cost (`strata synth --sparse --shape llama-3.3-70b-q4_k_m`).
//
// Where the facts come from (no code is copied):
//   - hyperparameters: each model's published config.json (Hugging Face:
//     meta-llama/Llama-3.3-70B-Instruct, Qwen/Qwen2.5-72B-Instruct,
//     mistralai/Mixtral-8x22B-Instruct-v0.1, openai/gpt-oss-120b);
//   - tensor names and shapes: llama.cpp's tensor table (src/llama-arch.cpp,
//     LLM_TENSOR_* names) and each architecture's load_tensors
//     (src/models/llama.cpp, qwen2.cpp, openai-moe.cpp): experts as 3-D
//     blk.N.ffn_{gate,up,down}_exps.weight, ne = [n_embd, n_ff_exp,
//     n_expert] for gate/up, [n_ff_exp, n_embd, n_expert] for down;
//   - per-tensor types of Q4_K_M: llama.cpp's llama_tensor_get_type
//     (src/llama-quant.cpp, llama-cpp-python 0.3.36's vendored copy):
//     Q4_K by default; output.weight Q6_K; attn_v.weight and
//     ffn_down.weight Q6_K on the "more bits" layers (i < n/8, i >= 7n/8,
//     or (i - n/8) % 3 == 2); attn_v otherwise Q5_K on a 70B-class model
//     (LLM_TYPE_70B: 80 layers); with 8 experts attn_k / attn_v Q8_0 and
//     attn_output Q5_K; a row length not a multiple of 256 falls back
//     (Q4_K -> Q5_0, Q6_K -> Q8_0: Qwen2.5-72B's ffn_down, n_ff 29568);
//     1-D tensors and ffn_gate_inp stay F32;
//   - gpt-oss-120b: the MXFP4_MOE rule of the same function (3-D expert
//     tensors MXFP4, the other matrices and output Q8_0, 1-D and the router
//     F32), which gives the 63.37 GB of the published ggml-org GGUF.
// The totals agree with the published files' sizes: 42.5 GB (Llama),
// 47.4 GB (Qwen), 85.6 GB (Mixtral), 63.4 GB (gpt-oss).
//
// Thread-safety: plain functions and data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gguf_reader.h"
#include "model/synthetic_model.h"

namespace strata::synth {

struct PublishedModel {
  std::string name;                      // "llama-3.3-70b-q4_k_m"
  std::vector<gguf::KeyValue> metadata;  // file_offset unused
  std::vector<TensorSpec> tensors;       // in file order
};

// llama.cpp's "use more bits" layers of Q4_K_M / Q5_K_M.
bool use_more_bits(int layer, int n_layer);

PublishedModel llama33_70b_q4_k_m();    // llama, 80 blocks, 42.5 GB
PublishedModel qwen25_72b_q4_k_m();     // qwen2, 80 blocks, 47.4 GB
PublishedModel mixtral_8x22b_q4_k_m();  // llama, 8 experts, top 2, 56 blocks
PublishedModel gpt_oss_120b_mxfp4();  // gpt-oss, 128 experts, top 4, 36 blocks

// The names above ("llama-3.3-70b-q4_k_m", "qwen2.5-72b-q4_k_m",
// "mixtral-8x22b-q4_k_m", "gpt-oss-120b-mxfp4"), and the one by name
// (NotFound listing the names when unknown).
std::vector<std::string> published_model_names();
absl::StatusOr<PublishedModel> published_model(std::string_view name);

// Writes `model` as one header-only GGUF (alignment 32) at `path` (through
// PATH.tmp); returns the bytes its tensors' data would take (the hole).
// Errors: the writer's (a malformed well-known key) and I/O errors with
// their errno code.
absl::StatusOr<uint64_t> write_header_only(const PublishedModel& model,
                                           const std::string& path);

}  // namespace strata::synth
