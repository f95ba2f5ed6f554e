// Test helper: header-only ("sparse") GGUF files with the real tensor
// names, shapes and types of the big models people split across machines,
// for placement and `strata plan` tests at no disk cost: the header
// (metadata and tensor infos) is written, then the file is extended with
// ftruncate to the size its tensors' data would take, so the reader's size
// checks pass while the data, never read, takes no disk blocks.
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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata::testing {

struct SparseTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // ne0 first
};

struct SparseModel {
  std::vector<gguf::KeyValue> metadata;  // file_offset unused
  std::vector<SparseTensor> tensors;
};

// Writes `model` as one GGUF (alignment 32) at `path`, its data a hole.
absl::Status write_sparse_gguf(const std::string& path,
                               const SparseModel& model);

// Writes `model` as gguf-split parts PREFIX-0000i-of-0000N.gguf (N = parts):
// the tensors cut into N runs of about equal count, the first part with
// every key, each part with split.no / split.count / split.tensors.count.
// Returns the first part's path.
absl::StatusOr<std::string> write_sparse_split(const std::string& prefix,
                                               const SparseModel& model,
                                               int parts);

// llama.cpp's "use more bits" layers of Q4_K_M / Q5_K_M.
bool use_more_bits(int layer, int n_layer);

SparseModel llama33_70b_q4_k_m();    // llama, 80 blocks
SparseModel qwen25_72b_q4_k_m();     // qwen2, 80 blocks
SparseModel mixtral_8x22b_q4_k_m();  // llama with 8 experts, top 2, 56 blocks
SparseModel gpt_oss_120b_mxfp4();    // gpt-oss, 128 experts, top 4, 36 blocks

}  // namespace strata::testing
