// NVRTC source of the flash-attention kernel of prompt chunks (issue 32):
// n_rows consecutive query rows of one sequence at positions pos0 .. (a
// prompt chunk whose K and V rows are already in the cache), every head,
//
//   out[r][h] = sum_j softmax_j(s_rj) V[j][kv(h)],
//   s_rj = scale * cap(f16(q[r][h]) . K[j][kv(h)]),  j in [begin_r, pos0 + r]
//
// with cap(x) = softcap tanh(x / softcap) (softcap 0: x), kv(h) = h /
// (n_head / n_head_kv), begin_r = pos0 + r + 1 - window when window > 0 and
// that is positive (else 0), and, with sinks, head h's sink logit joining
// the maximum and the softmax's denominator (gpt-oss). The same formula as
// reference::ops::attention and strata_attention_rows (attention.cuh).
//
// On the tensor cores (mma.sync m16n8k16, f16 operands, f32 sums), one pass
// (Dao et al. 2022, "FlashAttention"; the online softmax of Milakov and
// Gimelshein 2018): a block of 4 warps takes 64 query rows of one head, 16
// a warp, and walks the keys in tiles of 64 (32 for HEAD_DIM over 128)
// staged in shared memory (V transposed); each warp keeps its rows' running
// maximum, sum and output in registers, so no score matrix is written and
// K and V are read once for 64 query rows.
//
// Numerics, not the reference's: the reference normalizes the softmax
// before rounding p to f16; here p = exp(s - m_running) is rounded to f16
// unnormalized and O is divided by the sum at the end, and scores are
// summed in the tensor cores' f32 accumulation. Bound against the
// reference on the kernel tests: |out - ref| <= 2e-3 max|V| (the f16
// rounding of p, relative 2^-11, and of the scores' sums).
//
// Launch: grid (n_head x ceil(n_rows / 64)), block (128); arguments (const
// float* q [n_rows][n_head][HEAD_DIM], const unsigned short* k_cache, const
// unsigned short* v_cache ([n_ctx][n_head_kv][HEAD_DIM] f16 bits, the
// sequence's layer), float* out [n_rows][n_head][HEAD_DIM], int pos0, int
// n_rows, int window, int n_head, int n_head_kv, float scale, float
// softcap, const float* sinks [n_head] or null). Options: -DHEAD_DIM (= dk
// = dv, a multiple of 16 up to 256), -DTHREADS=128.
#pragma once

#include <string>

#include "worker/cuda/kernels/mma_source.h"

namespace strata::worker::cuda_kernels {

inline constexpr int kFlashAttentionThreads = 128;
inline constexpr int kFlashAttentionRowsPerBlock = 64;
inline constexpr const char* kFlashAttentionEntry = "strata_flash_attention_rows";

inline constexpr const char* kFlashAttentionSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/flash_attention.cuh.inc"
    ;

// The program NVRTC compiles: the mma.sync helpers, then the kernel.
inline const char* flash_attention_program() {
  static const std::string* text =
      new std::string(std::string(kMmaOpsSource) + kFlashAttentionSource);
  return text->c_str();
}

}  // namespace strata::worker::cuda_kernels
