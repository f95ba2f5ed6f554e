// Reference (scalar) dequantization of one row of a ggml tensor to f32: the
// test oracle for every generated kernel.
//
// Supported types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, MXFP4. Block layouts and formulas:
// kernels/cpu/reference/block_layouts.h and docs/weight-types.md. Results
// are bit-identical to dequantize_row_* of ggml/src/ggml-quants.c
// (llama.cpp), which the gguf Python package reproduces.
//
// Usage:
//   std::vector<float> row(n);
//   absl::Status status =
//       dequantize_row(GgmlType::kQ4_K, bytes, n, row.data());
//   if (!status.ok()) return status;
//
// Thread-safety: pure functions of their arguments; any thread may call them.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace strata::reference {

// True when dequantize_row accepts `type`.
bool can_dequantize(GgmlType type);

// Dequantizes `n` elements. `src` holds n / block_size blocks of the type
// (ggml_row_bytes(type, n) bytes, any alignment, little-endian); `dst`
// receives n floats. n == 0 is a no-op.
// Errors (nothing is written): InvalidArgumentError when n is negative or
// not a multiple of the type's block size (the message names both) or a
// pointer is null with n > 0; UnimplementedError for a type without a
// reference dequantizer (the message names it).
absl::Status dequantize_row(GgmlType type, const void* src, int64_t n,
                            float* dst);

}  // namespace strata::reference
