// The device's layout of a quantized weight row: what the matrix kernels
// (worker/cuda/kernels/matvec.cuh's formats, and mma.cuh through them) read,
// made from a GGUF row once, when the device backend uploads a matrix.
//
// A GGUF row of a block type is n_blocks blocks, each block its fields in
// order (kernels/cpu/reference/block_layouts.h): a Q8_0 block is 34 bytes,
// so its 32 quants sit at an address that is only 2-byte aligned and a lane
// loads them 2 bytes at a time. On the device the same bytes are regrouped
// by field: section s of a row holds field group s of every block, block
// b's at b x (the group's bytes), the sections one after another:
//
//   Q4_0   [qs 16] [d 2]             Q4_1   [qs 16] [d m 4]
//   Q5_0   [qs 16] [qh 4] [d 2]      Q5_1   [qs 16] [qh 4] [d m 4]
//   Q8_0   [qs 32] [d 2]             MXFP4  [qs 16] [e 1]
//   Q6_K   [ql qh scales 208] [d 2]
//
// (each group a byte range of the GGUF block, its bytes as they are). The
// quants' section starts the row and later sections start at multiples of
// the sections before them, so every group starts aligned to its size (to
// 16 bytes for the quants): the kernels load a unit's quants in one or two
// 16-byte loads and each scale in one load. The row is then padded with
// zeros to a multiple of 16 bytes, so that every row starts 16-byte aligned.
// Q4_K (144-byte blocks) and Q5_K (176), whose blocks are already 16-byte
// multiples, and F32 and F16 keep the GGUF row as it is.
//
// Sizes: n_cols values a row, whole blocks of the type (a GGUF row);
// bytes in bytes. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/ggml_type.h"

namespace strata::worker::cuda_kernels {

// Whether `type`'s device rows differ from its GGUF rows (the regrouped
// types above).
bool regrouped(GgmlType type);

// The bytes of one device row of `type` with n_cols values: the GGUF row's
// bytes, rounded up to a multiple of 16 for the regrouped types. Errors:
// InvalidArgument when n_cols is not whole blocks of the type or the type
// has no byte size.
absl::StatusOr<int64_t> device_row_bytes(GgmlType type, int64_t n_cols);

// n_rows GGUF rows of `type` (src: n_rows x ggml_row_bytes(type, n_cols)
// bytes) as device rows (n_rows x device_row_bytes(type, n_cols) bytes).
// Errors: device_row_bytes's.
absl::StatusOr<std::vector<uint8_t>> device_rows(GgmlType type, int64_t n_cols, int64_t n_rows,
                                                 const uint8_t* src);

}  // namespace strata::worker::cuda_kernels
