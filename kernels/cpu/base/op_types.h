// The views and parameters the ops of a forward pass are called with, shared
// by every implementation of them (the scalar oracle in
// kernels/cpu/reference/ops, the generated kernels in kernels/cpu/jit, the
// hand-vectorised ones in kernels/cpu/simd) and by the engine that calls
// them (worker/cpu).
//
// Views do not own the bytes they point at; the shapes and layouts they
// describe are those of the ops' headers (reference/ops/matmul.h,
// reference/ops/attention.h, reference/ops/elementwise.h).
//
// Thread-safety: plain data; any thread may read them.
#pragma once

#include <cstdint>

#include "model/ggml_type.h"

namespace strata::kernels {

// A view of a weight matrix (does not own the bytes; they usually live in
// the GGUF mapping). Rows are contiguous: W [n_out][n_in] as GGUF stores it.
// reference::ops::make_weight_matrix builds one and checks its shape.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;       // ne0: elements per row (input features)
  int64_t n_out = 0;      // ne1: rows (output features)
  int64_t row_bytes = 0;  // bytes per row
};

// A view of one layer's cache for one sequence (does not own it).
struct KvView {
  GgmlType type = GgmlType::kF16;  // kF16 or kF32
  const void* k = nullptr;         // [n_ctx][n_head_kv][head_dim_k]
  const void* v = nullptr;         // [n_ctx][n_head_kv][head_dim_v]
  int64_t n_kv = 0;                // rows 0..n_kv-1 hold keys and values
};

// The shape and score transform of grouped-query attention.
struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;  // divides n_head
  int head_dim_k = 0;
  int head_dim_v = 0;
  float scale = 1.0f;          // multiplies the (capped) scores
  float softcap = 0.0f;        // 0: off
  int32_t sliding_window = 0;  // 0: full causal attention
  // Attention sinks (gpt-oss): one learned logit per query head, [n_head],
  // that joins each softmax's denominator and weighs no value; nullptr:
  // none. Not scaled or capped (llama.cpp's ggml_soft_max_add_sinks).
  const float* sinks = nullptr;
};

// Pairing of the rotated dimensions (Su et al. 2021, RoFormer).
enum class RopeOrder {
  kNormal,  // pairs (x[2i], x[2i+1]): llama (LLAMA_ROPE_TYPE_NORM)
  kNeox,    // pairs (x[i], x[i + n_rot/2]): GPT-NeoX, qwen, gemma, phi3
};

struct RopeParams {
  RopeOrder order = RopeOrder::kNormal;
  int n_rot = 0;            // rotated dimensions (even, <= head_dim)
  float freq_base = 10000;  // theta_i = pos * base^(-2i/n_rot)
  float freq_scale = 1.0f;  // linear position scaling (1 / factor)
  // Per-pair divisors of theta (llama3 `rope_freqs.weight`), [n_rot/2] or
  // nullptr.
  const float* freq_factors = nullptr;
  // YaRN (Peng et al. 2023); ext_factor 0 turns it off.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;  // multiplies cos and sin
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;  // training context for the YaRN ramp
};

}  // namespace strata::kernels
