// Reference (scalar) quantization of one row of f32 values to a ggml type:
// what `strata quantize` writes, and the producer of test weights.
//
// Supported types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4.
//  - F16 / BF16: round to nearest even (fp16.h).
//  - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K, MXFP4: ggml's reference
//    rounding (quantize_row_*_ref, ggml/src/ggml-quants.c); the bytes equal
//    ggml's and, where it implements the type, the gguf Python package's.
//  - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: our own scale search minimising squared
//    error (k_quants_fit.h); valid blocks of the format, not byte-equal to
//    ggml's quantizer (which weighs elements differently).
// Inputs should be finite; NaN or inf give a defined but meaningless block,
// and magnitudes beyond the f16 range of a type's scales saturate to inf.
//
// Thread-safety: pure functions of their arguments; any thread may call them.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace strata::reference {

// True when quantize_row accepts `type`.
bool can_quantize(GgmlType type);

// Quantizes `n` floats from `src` into ggml_row_bytes(type, n) bytes at
// `dst` (any alignment). n == 0 is a no-op.
// Errors (nothing is written): InvalidArgumentError when n is negative or
// not a multiple of the type's block size or a pointer is null with n > 0;
// UnimplementedError for a type without a reference quantizer.
absl::Status quantize_row(GgmlType type, const float* src, int64_t n,
                          void* dst);

}  // namespace strata::reference
