// Scalar conversions between f32 and the small float formats ggml stores:
// IEEE binary16 (F16, ggml_half), bfloat16 (BF16) and the E8M0 power-of-two
// scale of MXFP4.
//
// Values travel as raw bit patterns (uint16_t / uint8_t) so that NaN payloads,
// -0 and subnormals survive untouched; the conversions are exact where the
// target can represent the value and round to nearest, ties to even, where it
// cannot. No function depends on the FPU rounding mode; only the row
// conversion uses F16C, when the CPU has it, with results identical to the
// scalar one.
//
// Sources: ggml/src/ggml-impl.h of llama.cpp (ggml_compute_fp16_to_fp32,
// ggml_compute_fp32_to_bf16, ggml_e8m0_to_fp32, ggml_e8m0_to_fp32_half);
// IEEE 754-2008 for binary16; the OCP Microscaling Formats spec v1.0 for E8M0.
//
// Thread-safety: pure functions; any thread may call them.
#pragma once

#include <cstdint>

namespace strata::reference {

// binary16 -> f32. Exact for every input: subnormals become normal f32
// values, inf stays inf, a NaN keeps its sign and payload (shifted into the
// top of the f32 mantissa).
float f16_to_f32(uint16_t h);

// f32 -> binary16, round to nearest, ties to even. Values whose magnitude
// rounds past 65504 become inf; tiny values become f16 subnormals or (signed)
// zero. A NaN stays a NaN with its sign, is made quiet (bit 9 set) and keeps
// the top 9 bits of its payload, as x86 F16C does. ggml's portable fallback
// writes sign|0x7E00 for every NaN and numpy keeps a signalling NaN
// signalling; all three agree on quiet NaNs without payload.
uint16_t f32_to_f16(float f);

// dst[i] = f32_to_f16(src[i]) for i in [0, n): vcvtps2ph 8 at a time when
// the CPU has F16C (bit for bit the same: f32_to_f16 follows F16C, NaNs
// included), the scalar function otherwise. Used where rows are stored as
// f16 on the hot path (the KV cache).
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);

// bfloat16 -> f32: the 16 bits become the high half of the f32. Exact.
float bf16_to_f32(uint16_t h);

// f32 -> bfloat16, round to nearest, ties to even (subnormals kept, not
// flushed). A NaN keeps its sign and top payload bits and is made quiet
// (bit 6 set), exactly as ggml_compute_fp32_to_bf16.
uint16_t f32_to_bf16(float f);

// E8M0 (a bare biased exponent) -> f32 as ggml_e8m0_to_fp32 defines it:
// 2^(e - 127); e == 0 gives 2^-127 (an f32 subnormal). ggml does not special-
// case e == 0xFF (OCP's NaN): it yields +inf here.
float e8m0_to_f32(uint8_t e);

// The "half" variant ggml uses for MXFP4 (ggml_e8m0_to_fp32_half):
// 0.5 * 2^(e - 127) = 2^(e - 128); e == 0 and e == 1 give the subnormals
// 2^-128 and 2^-127; e == 0xFF gives 2^127 (finite). MXFP4 stores its E2M1
// values doubled (kvalues_mxfp4 = 2 * E2M1), which this half cancels.
float e8m0_to_f32_half(uint8_t e);

}  // namespace strata::reference
