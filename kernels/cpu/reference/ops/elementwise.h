// Row-wise and element-wise ops of a transformer forward pass, in f32:
// embedding lookup, RMSNorm, RoPE, the gated feed-forward activations
// (SwiGLU, GeGLU), softmax and soft-capping.
//
// Layouts: activations are row-major, one row per token: x[n_rows][dim].
// Functions that take `y` allow y == x (in place) unless said otherwise.
//
// Numerics follow llama.cpp's CPU backend where it matters for agreement
// (ggml-cpu ops.cpp / vec.h): RMSNorm sums squares in double; RoPE builds
// its angles by repeated multiplication as ggml_rope_cache_init does;
// GeGLU looks GELU up at the f16 value of its input as ggml does by default
// (GGML_GELU_FP16). Sources of each formula are in the comments.
//
// Threads: the pool splits rows; any number of pools may be used from
// different threads on different data.
#pragma once

#include <cstdint>

#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"

namespace strata::reference::ops {

// out[i][:] = row ids[i] of `table` dequantized to f32 (the `get_rows` op).
// table: [n_vocab][dim] of any type matmul supports. ids must lie in
// [0, table.n_out) (checked by the caller). out: [n][table.n_in].
void embedding_lookup(const kernels::WeightMatrix& table, const int32_t* ids,
                      int64_t n, float* out, ThreadPool& pool);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row of `dim`
// elements (Zhang & Sennrich 2019). weight: [dim] or nullptr (no scale).
// x, y: [n_rows][dim]. Used per head for QK-norm with dim = head_dim.
void rms_norm(const float* x, const float* weight, int64_t n_rows,
              int64_t dim, float eps, float* y, ThreadPool& pool);

// Rotates the first n_rot dimensions of every head in place.
// x: [n_tokens][n_heads][head_dim]; positions: [n_tokens] absolute.
// The same as rope_angles then rope_rotate (allocates the angles).
void rope(float* x, const int32_t* positions, int64_t n_tokens, int n_heads,
          int head_dim, const kernels::RopeParams& params, ThreadPool& pool);

// The rotation of each token's pairs: cs [n_tokens][n_rot/2][2] gets
// (cos, sin) of pair i's angle pos * base^(-2i/n_rot) (built by repeated
// multiplication, as ggml_rope_cache_init), divided by freq_factors[i],
// scaled and YaRN-ramped as rope_yarn in ggml-cpu ops.cpp, both times
// attn_factor. Depends only on positions and params, so q and k (and every
// layer with the same params) share one table.
void rope_angles(const int32_t* positions, int64_t n_tokens,
                 const kernels::RopeParams& params, float* cs,
                 ThreadPool& pool);

// Rotates the first n_rot dimensions of every head of x
// [n_tokens][n_heads][head_dim] in place by the angles of rope_angles:
// (x_a, x_b) -> (x_a c - x_b s, x_a s + x_b c) for each pair (a, b) of
// `order`.
void rope_rotate(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 kernels::RopeOrder order, int n_rot, const float* cs,
                 ThreadPool& pool);

// out = silu(gate) * up, silu(x) = x / (1 + e^-x) (Shazeer 2020, SwiGLU),
// e^-x by exp_ggml.
// gate, up, out: [n]; out may alias either input.
void swiglu(const float* gate, const float* up, int64_t n, float* out,
            ThreadPool& pool);

// out = gelu_tanh(gate) * up (GeGLU with the tanh approximation of GELU,
// Hendrycks & Gimpel 2016), GELU taken at f16(gate) and rounded to f16 as
// ggml's table does; exact 0 below -10 and identity above 10.
void geglu(const float* gate, const float* up, int64_t n, float* out,
           ThreadPool& pool);

// The tanh-approximated GELU of one value, in f32 (no table).
float gelu_tanh(float x);

// x = cap * tanh(x / cap) in place (Gemma 2 soft-capping). x: [n].
void soft_cap(float* x, int64_t n, float cap);

// e^x as ggml's vectorised expf computes it (ggml_v_expf: a degree-5
// polynomial after range reduction by ln 2, with fused multiply-adds), bit
// for bit; within 2 ulp of expf. 0 for -inf. SiLU and softmax use it so
// that their results round like llama.cpp's.
float exp_ggml(float x);

// Softmax of one row in place; -inf entries get 0; a row of only -inf
// becomes all 0. Sums as ggml_vec_soft_max_f32: lanes of 8 from x[0]
// added pairwise in f32, the lane sums in double.
void softmax(float* x, int64_t n);

// y = a + b element-wise. a, b, y: [n]; y may alias a or b.
void add(const float* a, const float* b, int64_t n, float* y);

// x *= s element-wise.
void scale(float* x, int64_t n, float s);

// x[r] += bias for every row. x: [n_rows][dim]; bias: [dim].
void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim);

}  // namespace strata::reference::ops
