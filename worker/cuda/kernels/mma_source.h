// NVRTC source of the tensor-core matrix kernel (prompt chunks, issue 32):
// for a row-major matrix W [n_rows][n_cols] of a GGUF block type (its rows
// in the device layout, worker/cuda/weight_layout.h) and n_tok
// f32 activation rows x [n_tok][n_cols],
//
//   y[c][r] = sum_i f16(dequant(W[r][i])) * f16(x[c][i])   (f32 sums)
//
// on the tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// (sm_80 and later). A block of 4 warps takes a tile of 64 weight rows x 64
// tokens; per 64 columns each thread dequantizes one 32-value unit of a
// weight row (the formats of matvec.cuh) and rounds 32 values of a token to
// f16 into shared memory, then each warp runs 2 x 4 mma tiles over 4 k16
// steps. f16(v): round to nearest even, saturating at +-65504 (NaN stays
// NaN). The sums run over the columns in order, 16 at a time, in the
// tensor core's f32 accumulation; a token's results depend only on its own
// row of x, never on n_tok or its place in a tile (batch invariance).
//
// Numerics: the weights and activations rounded to f16 (relative 2^-11
// each) — not the matvec kernel's f32 activations — so the device backend
// runs a slice through this kernel or the matvec kernel by the slice's own
// row count (DeviceBackendOptions::mma_min_rows), never by what else is in
// the step. Bound against the double sum of the f16-rounded products:
// |y - ref| <= 1e-4 sum |w x| + 1e-6 (f32 sums of 16-term products; the
// tensor cores' accumulation is not IEEE's sequence of roundings).
//
// This is the plain first form: no cp.async double buffering, no ldmatrix.
// sm_90 devices take the same product on the warpgroup instructions
// (wgmma_source.h). The types whose products with Q8 rows are integer also
// have an int8 form (mma3_i8_entry, below).
//
// Launch: grid (ceil(n_rows / 64) x ceil(n_tok / 64)), block (128);
// arguments (const unsigned char* w, const float* x, float* y0, float* y1,
// float* y2, int n0, int n1, int n_rows, int n_cols, long long row_bytes,
// int n_tok): matvec3_entry's outputs (rows [0, n0) to y0 [n_tok][n0],
// [n0, n0 + n1) to y1, the rest to y2). n_cols: whole 32-value units (the
// block types' rows are).
#pragma once

#include <string>
#include <string_view>

#include "model/ggml_type.h"
#include "worker/cuda/kernels/matvec_source.h"

namespace strata::worker::cuda_kernels {

inline constexpr int kMmaThreads = 128;
inline constexpr int kMmaRowsPerBlock = 64;    // weight rows
inline constexpr int kMmaTokensPerBlock = 64;  // activation rows

// mma_ops.cuh (the mma.sync helpers) and mma.cuh alone; the program is
// matvec.cuh, mma_ops.cuh, mma.cuh (mma_program()).
inline constexpr const char* kMmaOpsSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/mma_ops.cuh.inc"
    ;
inline constexpr const char* kMmaSource =
#include "worker/cuda/kernels/mma.cuh.inc"
    ;

// The program NVRTC compiles: matvec.cuh's formats (built with
// -DSTRATA_MATVEC_NO_ENTRIES), the mma.sync helpers, then mma.cuh.
inline const char* mma_program() {
  static const std::string* text =
      new std::string(std::string(kMatvecSource) + kMmaOpsSource + kMmaSource);
  return text->c_str();
}

// The entry of `type`'s kernel ("strata_mma3_q4_k"), or "" for a type it
// does not take (F32, F16 and types without a matvec kernel: their slices
// stay on the matvec kernel).
inline std::string mma3_entry(GgmlType type) {
  if (type == GgmlType::kF32 || type == GgmlType::kF16) return "";
  const std::string_view m = matvec_entry(type);
  if (m.empty()) return "";
  return "strata_mma3_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
}

// The int8 tensor-core entry of `type` ("strata_mma3_i8_q4_k"), or "" for a
// type it does not take: Q4_0, Q5_0, Q8_0, MXFP4 (Q8_0 rows), Q4_1, Q5_1
// (Q8_1 rows: the min times each unit's s), Q4_K, Q5_K, Q6_K (Q8_K rows),
// whose products with their Q8 rows are integer per 32-value unit (value =
// scale q - min; Q6_K a scale each 16 values). Its launch: strata_mma3_<type>'s grid and
// block; arguments (const unsigned char* w, const signed char* xq, const
// float* xd, const float* xsum, float* y0, float* y1, float* y2, int n0,
// int n1, int n_rows, int n_cols, long long row_bytes, int n_tok), the
// rows from strata_quantize_rows (elementwise.cuh). Numerics: the cpu
// backend's (the weights' q times the rows' q exactly, then its scales in
// float, unit by unit), so a slice on it gives the matvec kernel's logits
// up to float summation order, not the f16 kernel's ~1e-3.
inline std::string mma3_i8_entry(GgmlType type) {
  if (matvec3_i8_entry(type).empty()) return "";  // the types with unit_words
  const std::string_view m = matvec_entry(type);
  return "strata_mma3_i8_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
}

}  // namespace strata::worker::cuda_kernels
