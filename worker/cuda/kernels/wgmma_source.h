// NVRTC source of the tensor-core matrix kernel on sm_90's warpgroup
// instructions (prompt chunks, issue 32): for a matrix W [n_rows][n_cols]
// of a GGUF block type (its rows in the device layout,
// worker/cuda/weight_layout.h) and n_tok activation rows given as the
// int8 rows the int8 kernels take (strata_quantize_rows: q [n_tok][n_cols],
// d [n_tok][n_cols / 32], the values d q the cpu backend multiplies),
//
//   y[c][r] = sum_i f16(dequant(W[r][i])) * f16(d_x[c][i / 32] q_x[c][i])
//
// (f32 sums) by wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16
// (wgmma_ops.cuh) with both operands in shared memory. A block of 2
// warpgroups (256 threads) takes 256 weight rows x 128 tokens (mma.sync's
// kernels: 64 x 64), so each weight is unpacked once for 128 tokens and
// each token's 32 bytes a step serve 256 rows. Per 32 columns thread i
// unpacks weight row i's unit (Format::unpack_words: value = scale q - min,
// the format's dequantized value) and 16 of a token's values to f16 into
// one of two shared buffers, and each warpgroup multiplies its 128 rows
// (two m64 tiles) by the 128 tokens with four m64n128k16, asynchronously:
// the next step's tiles are unpacked while the tensor cores run this one.
//
// Numerics: the f16 kernel's kind (mma_source.h) on the int8 rows' values:
// f16 weights and activations, f32 sums in the tensor cores' accumulation,
// 16 columns at a time in column order; against the double sum of the
// f16-rounded products |y - ref| <= 1e-4 sum |w x| + 1e-6. The rows'
// values d q are what round_rows gives the f16 mma.sync kernel, so on the
// emulation the two give the same bits. A token's results depend only on
// its own row (batch invariance), not on n_tok or its place in a tile.
// The int8 kernel (mma3_i8_entry) multiplies the same rows exactly; this
// one is taken where DeviceBackendOptions::mma_int8 is off.
//
// sm_90 only: wgmma is an sm_90a instruction, so the program is compiled
// for -arch=compute_90a (nvrtc_compiler.h does for compute capability 9.0)
// and refuses to compile for any other; the backend loads it only on a
// device of compute capability 9.0 (DeviceApi::compute_capability).
// ptxas (sm_90a): 166-174 registers for the 32-value types, 210-243 for
// the K-quants (one block a multiprocessor), 48 KiB of shared memory.
//
// Launch: grid (ceil(n_rows / 256) x ceil(n_tok / 128)), block (256);
// arguments (const unsigned char* w, const signed char* xq, const float* xd,
// float* y0, float* y1, float* y2, int n0, int n1, int n_rows, int n_cols,
// long long row_bytes, int n_tok): strata_mma3_<type>'s outputs (rows
// [0, n0) to y0 [n_tok][n0], [n0, n0 + n1) to y1, the rest to y2).
// n_cols: whole 32-value units.
#pragma once

#include <string>
#include <string_view>

#include "model/ggml_type.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"

namespace strata::worker::cuda_kernels {

inline constexpr int kWgmmaThreads = 256;
inline constexpr int kWgmmaRowsPerBlock = 256;    // weight rows
inline constexpr int kWgmmaTokensPerBlock = 128;  // activation rows
// The compute capability (major x 10 + minor) the kernel runs on.
inline constexpr int kWgmmaComputeCapability = 90;

inline constexpr const char* kWgmmaOpsSource =
#include "worker/cuda/kernels/wgmma_ops.cuh.inc"
    ;
inline constexpr const char* kWgmmaSource =
#include "worker/cuda/kernels/wgmma.cuh.inc"
    ;

// The program NVRTC compiles: matvec.cuh's formats (built with
// -DSTRATA_MATVEC_NO_ENTRIES), the mma.sync helpers (the f16 rounding), the
// wgmma helpers, then wgmma.cuh.
inline const char* wgmma_program() {
  static const std::string* text = new std::string(std::string(kMatvecSource) + kMmaOpsSource +
                                                   kWgmmaOpsSource + kWgmmaSource);
  return text->c_str();
}

// The entry of `type`'s kernel ("strata_wgmma3_q4_k"), or "" for a type it
// does not take: the types of mma3_entry (each has int8 rows:
// mma3_i8_entry's).
inline std::string wgmma3_entry(GgmlType type) {
  const std::string mma = mma3_entry(type);
  if (mma.empty()) return "";
  return "strata_wgmma3_" + mma.substr(std::string_view("strata_mma3_").size());
}

}  // namespace strata::worker::cuda_kernels
