// NVRTC source of the tensor-core matrix kernel on sm_90's warpgroup
// instructions (prompt chunks, issue 32): mma_source.h's product
//
//   y[c][r] = sum_i f16(dequant(W[r][i])) * f16(x[c][i])   (f32 sums)
//
// for a matrix of a GGUF block type (its rows in the device layout,
// worker/cuda/weight_layout.h) and n_tok f32 activation rows, by
// wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 (wgmma_ops.cuh) with
// both operands in shared memory. A block of 2 warpgroups (256 threads)
// takes 128 weight rows x 128 tokens (mma.sync's kernel: 64 x 64, 4 warps),
// 32 columns a step: each thread dequantizes half of a weight row's unit
// (Format::unpack_words: value = scale q - min, the format's value) and
// rounds 16 of a token's values to f16 into one of two shared buffers, and
// each warpgroup multiplies its 64 rows by the 128 tokens with two
// m64n128k16, asynchronously: the next step's tiles are unpacked while the
// tensor cores run this one.
//
// Numerics: the f16 kernel's (mma_source.h): f16 weights and activations,
// f32 sums in the tensor cores' accumulation, 16 columns at a time in
// column order; the bound against the double sum of the f16-rounded
// products, |y - ref| <= 1e-4 sum |w x| + 1e-6. A token's results depend
// only on its own row of x (batch invariance), not on n_tok or its place
// in a tile. Not the int8 kernel's (mma3_i8_entry): a slice takes this one
// where DeviceBackendOptions::mma_int8 is off (or for comparisons).
//
// sm_90 only: wgmma is an sm_90a instruction, so the program is compiled
// for -arch=compute_90a (nvrtc_compiler.h does for compute capability 9.0)
// and refuses to compile for any other; the backend loads it only on a
// device of compute capability 9.0 (DeviceApi::compute_capability).
//
// Launch: grid (ceil(n_rows / 128) x ceil(n_tok / 128)), block (256);
// arguments and outputs those of strata_mma3_<type> (mma_source.h).
// n_cols: whole 32-value units.
#pragma once

#include <string>
#include <string_view>

#include "model/ggml_type.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"

namespace strata::worker::cuda_kernels {

inline constexpr int kWgmmaThreads = 256;
inline constexpr int kWgmmaRowsPerBlock = 128;    // weight rows
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
// does not take: the types of mma3_entry.
inline std::string wgmma3_entry(GgmlType type) {
  const std::string mma = mma3_entry(type);
  if (mma.empty()) return "";
  return "strata_wgmma3_" + mma.substr(std::string_view("strata_mma3_").size());
}

}  // namespace strata::worker::cuda_kernels
