// Per-block reference code for the legacy 32-element quants (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q8_1) and MXFP4 (internal to kernels/cpu/reference;
// callers use dequantize.h / quantize.h).
//
// dequantize_*: one block -> 32 floats, the formulas of block_layouts.h.
// quantize_*: 32 floats -> one block with ggml's reference rounding
// (quantize_row_*_ref in ggml/src/ggml-quants.c), so that the bytes equal
// ggml's and the gguf Python package's for finite inputs.
#pragma once

#include "kernels/cpu/reference/block_layouts.h"

namespace strata::reference {

void dequantize_q4_0(const BlockQ4_0& block, float* y);
void dequantize_q4_1(const BlockQ4_1& block, float* y);
void dequantize_q5_0(const BlockQ5_0& block, float* y);
void dequantize_q5_1(const BlockQ5_1& block, float* y);
void dequantize_q8_0(const BlockQ8_0& block, float* y);
void dequantize_q8_1(const BlockQ8_1& block, float* y);
void dequantize_mxfp4(const BlockMxfp4& block, float* y);

void quantize_q4_0(const float* x, BlockQ4_0* block);
void quantize_q4_1(const float* x, BlockQ4_1* block);
void quantize_q5_0(const float* x, BlockQ5_0* block);
void quantize_q5_1(const float* x, BlockQ5_1* block);
void quantize_q8_0(const float* x, BlockQ8_0* block);
void quantize_q8_1(const float* x, BlockQ8_1* block);
void quantize_mxfp4(const float* x, BlockMxfp4* block);

}  // namespace strata::reference
