// Per-block reference code for the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
// and Q8_K (internal to kernels/cpu/reference; callers use dequantize.h /
// quantize.h). Every block covers 256 elements.
//
// dequantize_*: the formulas of block_layouts.h, in the operation order of
// dequantize_row_* in ggml/src/ggml-quants.c (so results are bit-identical).
// quantize_*: Q2_K..Q6_K use the scale search of k_quants_fit.h (our own
// method; its bytes differ from ggml's quantizer, its error is comparable or
// lower). Q8_K follows quantize_row_q8_K_ref exactly.
#pragma once

#include "kernels/cpu/reference/block_layouts.h"

namespace strata::reference {

void dequantize_q2_K(const BlockQ2_K& block, float* y);
void dequantize_q3_K(const BlockQ3_K& block, float* y);
void dequantize_q4_K(const BlockQ4_K& block, float* y);
void dequantize_q5_K(const BlockQ5_K& block, float* y);
void dequantize_q6_K(const BlockQ6_K& block, float* y);
void dequantize_q8_K(const BlockQ8_K& block, float* y);

void quantize_q2_K(const float* x, BlockQ2_K* block);
void quantize_q3_K(const float* x, BlockQ3_K* block);
void quantize_q4_K(const float* x, BlockQ4_K* block);
void quantize_q5_K(const float* x, BlockQ5_K* block);
void quantize_q6_K(const float* x, BlockQ6_K* block);
void quantize_q8_K(const float* x, BlockQ8_K* block);

}  // namespace strata::reference
