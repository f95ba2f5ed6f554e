// Matrix multiplication of a GGUF weight matrix of any supported ggml type by
// f32 activations: y = x · Wᵀ, the `mul_mat` of every linear layer.
//
// Layouts (all row-major, rows contiguous):
//   W  [n_out][n_in]  as GGUF stores it: ne0 = n_in elements per row, ne1 =
//                     n_out rows, each row ggml_row_bytes(type, n_in) bytes.
//   x  [n_rows][n_in]  f32 activations, one row per token.
//   y  [n_rows][n_out] f32 results; must not overlap x.
//
// Numerics follow llama.cpp's CPU backend (ggml-cpu, type_traits_cpu
// vec_dot_type): before the dot products the activations are converted to
// the type ggml pairs with the weight type, which changes logits slightly
// and is what makes greedy tokens agree with llama.cpp:
//   F32 -> F32, F16 -> F16, BF16 -> BF16,
//   Q4_0, Q5_0, Q8_0, MXFP4 -> Q8_0,   Q4_1, Q5_1 -> Q8_1,
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K -> Q8_K.
// Q8_0/Q8_1 activations are rounded as ggml's AVX2 quantize_row_q8_0/_1 do
// (scale 127/amax, round half to even, Q8_1 keeps f16(d * sum q)); Q8_K as
// quantize_row_q8_K_ref. Legacy-quant weights are multiplied block by block
// in integers (ggml_vec_dot_q4_0_q8_0 etc.); other types dequantize one
// weight row to f32 (reference/dequantize.h) and take f32 dot products with
// the activations as the paired type represents them.
//
// Threads: the output rows are split over the pool; one MatmulScratch per
// pool, used by one matmul at a time. No allocation.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "model/ggml_type.h"

namespace strata::reference::ops {

// Checks that `type` can be multiplied, that n_in is a multiple of its
// block size and that `n_bytes` equals n_out rows. Errors name `name`:
// "blk.0.attn_q.weight: Q4_K rows of 100 elements are not whole blocks".
absl::StatusOr<kernels::WeightMatrix> make_weight_matrix(
    const char* name, GgmlType type, const void* data, int64_t n_in,
    int64_t n_out, uint64_t n_bytes);

// The activation type ggml's CPU backend pairs with `weight` (see above).
GgmlType activation_type(GgmlType weight);

// x [n] (whole blocks of 32) as the cpu backend quantizes it for Q4_1 and
// Q5_1 weights (ggml-cpu's x86 quantize_row_q8_1): per block b, q[32 b ..
// + 32) = round-half-even(x 127 / amax), d[b] = f16(amax / 127) and s[b] =
// f16(amax / 127 * sum q) (the f16 values as floats).
void quantize_q8_1_row(const float* x, int64_t n, int8_t* q, float* d, float* s);

// True when matmul supports `weight`.
bool can_matmul(GgmlType weight);

// Buffers for matmul of up to max_rows activation rows of up to max_in
// features, with `n_threads` threads. Owns its memory.
class MatmulScratch {
 public:
  MatmulScratch(int64_t max_rows, int64_t max_in, int n_threads);
  int64_t max_rows() const { return max_rows_; }
  int64_t max_in() const { return max_in_; }

 private:
  friend void matmul(const kernels::WeightMatrix&, const float*, int64_t,
                     float*, MatmulScratch&, ThreadPool&);
  int64_t max_rows_;
  int64_t max_in_;
  std::vector<int8_t> quantized_;    // [max_rows][max_in] Q8 values
  std::vector<float> act_scales_;    // [max_rows][2][max_in/32 + 1] d, s
  std::vector<float> converted_;     // [max_rows][max_in] activations as the
                                     // paired type represents them
  std::vector<float> weight_rows_;   // [n_threads][max_in] dequantized rows
  std::vector<int8_t> weight_q_;     // [n_threads][max_in] unpacked quants
  std::vector<float> weight_scales_; // [n_threads][2][max_in/32 + 1] d, m
};

// y = x · Wᵀ (see the layouts above). Requires n_rows <= scratch.max_rows(),
// w.n_in <= scratch.max_in(), a pool no larger than the scratch was made
// for, and a type for which can_matmul() holds (asserted).
void matmul(const kernels::WeightMatrix& w, const float* x, int64_t n_rows,
            float* y, MatmulScratch& scratch, ThreadPool& pool);

// Converts one row of n floats to the values `type` (an activation type:
// F32, F16, BF16, Q8_0, Q8_1, Q8_K) represents, as matmul does. For tests.
void round_activations(GgmlType type, const float* x, int64_t n, float* out);

}  // namespace strata::reference::ops
