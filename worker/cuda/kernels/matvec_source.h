// NVRTC source of the quantized matrix x few-columns kernels (decode and
// batched decode, issue 32): for a row-major matrix W [n_rows][n_cols] of
// one GGUF type, its rows in the device layout (worker/cuda/weight_layout.h:
// a regrouped type's blocks split by field so that each is aligned), and
// NCOLS f32 activation rows x [NCOLS][n_cols],
//
//   y[c][r] = sum_i dequant(W[r][i]) * x[c][i]       (y [NCOLS][n_rows], f32)
//
// with dequant the type's GGUF block formula (ggml's; the CPU reference is
// kernels/cpu/reference/dequantize.cc). One warp a row; the lanes take the
// row's 32-value units in turn (a block of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0
// / MXFP4, a 32-value sub-block of Q4_K / Q5_K / Q6_K, 32 values of F16 /
// F32), dequantize a unit to
// registers and multiply it by every column, summing in float; the warp
// then sums its lanes (xor shuffles). So the weights are read once for all
// NCOLS columns. Built with --fmad=false (worker/cuda/step_kernels.cc): the
// dequantizing formulas are the reference's products and sums, not fused
// multiply-adds, so get_rows gives the reference's values exactly. Bound against the reference's double sum: float rounding
// of n_cols products, |gpu - cpu| <= 1e-5 * sum |w x| + 1e-6.
//
// This is the plain form (no int8 dot products): the oracle faster variants
// are checked against on the device. Its input rows are rounded first as
// the cpu backend rounds them (elementwise.cuh strata_round_rows, by the
// device backend): here they are plain floats.
//
// The int8 form (matvec3_i8_entry; the types whose products with Q8 values
// are integer: every block type above) takes the rows
// as the cpu backend quantizes them (elementwise.cuh strata_quantize_rows:
// int8 q, a scale and the sum of q per 32 values) and multiplies each
// weight unit's int8 q by them with dp4a, exactly, then scales in float,
// unit by unit (d_w d_x sumi - m_w d_x sum_x; Q4_1 and Q5_1, on Q8_1 rows,
// d_w d_x sumi + m_w s_x with s_x = f16(d_x sum_x)): the cpu backend's integer dot
// products, with ~4x fewer instructions a weight than dequantizing to
// float (llama.cpp's mmvq has the same shape). The same lanes, splits and
// launches as the plain form.
//
// Split-K: with -DROW_WARPS=R (1, 2 or 4; R divides THREADS / 32) R warps
// share a row, each taking every R-th of its lanes' units, and the row's
// first warp adds the R warp sums in order: more warps in flight for
// matrices of few rows (decode's k and v), another summation order (so a
// matrix keeps one R for every column count: batch invariance).
//
// Launch: block (B: a multiple of 32 ROW_WARPS, at most THREADS: a launch
// choice, the rows a block are B / 32 / ROW_WARPS, times WARP_ROWS for the
// int8 form, and the sums the same whatever B), grid (ceil(n_rows / the
// rows a block)); arguments
// (const unsigned char* w, const float* x, float* y, int n_rows,
//  int n_cols, long long row_bytes). n_cols: whole blocks of the type (32
// values, 256 for Q4_K and Q6_K), as GGUF rows of those types are; any
// length for F32 and F16 (a part unit at the end, an element a lane);
// row_bytes is device_row_bytes(type, n_cols) (weight_layout.h). Options:
// -DTHREADS (a multiple of 32, 128 by default), -DNCOLS (1..16, 1 by
// default), -DROW_WARPS (1 by default), -DWARP_ROWS (the int8 form's rows
// a warp, 1 by default; matvec_i8_warp_rows).
#pragma once

#include <string>
#include <string_view>

#include "model/ggml_type.h"

namespace strata::worker::cuda_kernels {

inline constexpr int kMatvecThreads = 128;
inline constexpr int kMatvecMaxColumns = 16;

// The rows a warp of the int8 form takes together in the builds for
// `ncols` columns (-DWARP_ROWS; 1 when not given): each column's loads of
// x then serve that many rows' weights, which at 16 columns would
// otherwise cost 16 times the weights' own load instructions. A row's sums
// are the same whatever it is, so the builds for different column counts
// still give a row the same bits (batch invariance).
inline constexpr int matvec_i8_warp_rows(int ncols) { return ncols >= 4 ? 4 : 2; }

// The entry point of `type`'s kernel, or "" when there is none (the types
// above only).
inline std::string_view matvec_entry(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "strata_matvec_f32";
    case GgmlType::kF16: return "strata_matvec_f16";
    case GgmlType::kQ4_0: return "strata_matvec_q4_0";
    case GgmlType::kQ4_1: return "strata_matvec_q4_1";
    case GgmlType::kQ5_0: return "strata_matvec_q5_0";
    case GgmlType::kQ5_1: return "strata_matvec_q5_1";
    case GgmlType::kMXFP4: return "strata_matvec_mxfp4";
    case GgmlType::kQ5_K: return "strata_matvec_q5_k";
    case GgmlType::kQ8_0: return "strata_matvec_q8_0";
    case GgmlType::kQ4_K: return "strata_matvec_q4_k";
    case GgmlType::kQ6_K: return "strata_matvec_q6_k";
    default: return "";
  }
}

// The three-output form of `type`'s kernel ("strata_matvec3_q4_k"; "" as
// matvec_entry): arguments (const unsigned char* w, const float* x, float*
// y0, float* y1, float* y2, int n0, int n1, int n_rows, int n_cols, long
// long row_bytes); rows [0, n0) of W go to y0 [NCOLS][n0], [n0, n0 + n1) to
// y1 [NCOLS][n1], the rest to y2 (one launch for a block's q, k and v
// matrices held as one, or gate and up with n1 = n_rows - n0). Each row's
// sums are matvec_entry's.
inline std::string matvec3_entry(GgmlType type) {
  const std::string_view m = matvec_entry(type);
  if (m.empty()) return "";
  return "strata_matvec3_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
}

// The int8 form of matvec3_entry for the types above ("strata_matvec3_i8_
// q4_k"; "" for the others): arguments (const unsigned char* w, const
// signed char* xq, const float* xd, const float* xs, float* y0, float* y1,
// float* y2, int n0, int n1, int n_rows, int n_cols, long long row_bytes),
// xq [NCOLS][n_cols] (16-byte aligned), xd and xs [NCOLS][n_cols / 32].
// In the same builds as matvec3_entry.
inline std::string matvec3_i8_entry(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: {
      const std::string_view m = matvec_entry(type);
      return "strata_matvec3_i8_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
    }
    default: return "";
  }
}

// The entry point of `type`'s embedding kernel (get_rows: out [n_ids]
// [n_cols] = the table's rows ids[i], dequantized; arguments (const
// unsigned char* table, const int* ids, float* out, int n_ids, int n_cols,
// long long row_bytes); any grid, at most THREADS threads a block), or ""
// for a type matvec_entry has none for.
// The int8 form on the tensor cores (matvec_mma.cuh), for the types of
// matvec3_i8_entry ("strata_matvec3_mma_q4_k"; "" otherwise): the same
// arguments, launch block and outputs as strata_matvec3_i8_<type>, and the
// same bits (it reproduces that kernel's per-lane sums, shuffle tree and
// split, ROW_WARPS), with a warp a 16-row tile of every column: grid
// ceil(n_rows / (block / 32 x 16)). mma.sync m16n8k32 gives each unit's
// integer dot products for 16 rows x 8 columns, where dp4a takes a lane 8
// instructions a row and column: the backend runs its chunks of
// kMatvecMmaMinColumns columns or more on it (batched decode).
inline std::string matvec3_mma_entry(GgmlType type) {
  const std::string i8 = matvec3_i8_entry(type);
  if (i8.empty()) return "";
  return "strata_matvec3_mma_" + i8.substr(std::string_view("strata_matvec3_i8_").size());
}
inline constexpr int kMatvecMmaMinColumns = 8;

// A mixture's expert slots in one launch ("strata_matvec_ids_q4_k"; "" for a
// type matvec_entry has none for), in the NCOLS = 1 builds only: arguments
// (const unsigned char* w, long long expert_bytes, const int* ids, const
// float* x, int x_div, float* y, int n_rows, int n_cols, long long
// row_bytes, int row_blocks); grid slots x row_blocks, row_blocks and the
// block as a one-matrix launch's: slot s gives y [s][n_rows] = expert
// ids[s]'s rows (w + ids[s] expert_bytes) times row s / x_div of x, each
// row's sums matvec3_entry's for that row and column.
inline std::string matvec_ids_entry(GgmlType type) {
  const std::string_view m = matvec_entry(type);
  if (m.empty()) return "";
  return "strata_matvec_ids_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
}
// Its int8 form for the types of matvec3_i8_entry ("" otherwise): (w,
// expert_bytes, ids, const signed char* xq, const float* xd, const float*
// xs, x_div, y, n_rows, n_cols, row_bytes, row_blocks), matvec3_i8_entry's
// sums.
inline std::string matvec_ids_i8_entry(GgmlType type) {
  const std::string i8 = matvec3_i8_entry(type);
  if (i8.empty()) return "";
  return "strata_matvec_ids_i8_" + i8.substr(std::string_view("strata_matvec3_i8_").size());
}

inline std::string get_rows_entry(GgmlType type) {
  const std::string_view m = matvec_entry(type);
  if (m.empty()) return "";
  return "strata_get_rows_" + std::string(m.substr(std::string_view("strata_matvec_").size()));
}

// The kernels' source: worker/cuda/kernels/matvec.cuh, embedded at build
// time as a raw string (cmake/embed_source.cmake), so that the same file is
// also compiled for the CPU by tests/cuda/matvec_emulation_test.cc.
inline constexpr const char* kMatvecSource =
#include "worker/cuda/kernels/grid.cuh.inc"
#include "worker/cuda/kernels/matvec.cuh.inc"
    ;
// The int8 form on the tensor cores (matvec3_mma_entry): mma_ops.cuh's
// mma.sync, then matvec_mma.cuh.
inline constexpr const char* kMatvecMmaSource =
#include "worker/cuda/kernels/mma_ops.cuh.inc"
#include "worker/cuda/kernels/matvec_mma.cuh.inc"
    ;

// The program the backend's matrix x columns builds compile (step_kernels.h):
// matvec.cuh, then the tensor-core form.
inline const char* matvec_program() {
  static const std::string* text = new std::string(std::string(kMatvecSource) + kMatvecMmaSource);
  return text->c_str();
}

}  // namespace strata::worker::cuda_kernels
