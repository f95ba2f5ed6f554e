#include "kernels/cpu/reference/dequantize.h"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/k_quants.h"
#include "kernels/cpu/reference/legacy_quants.h"
#include "kernels/cpu/reference/row_check.h"

namespace strata::reference {
namespace {

// Dequantizes `blocks` consecutive blocks of `kBlockSize` elements each.
using RowFn = void (*)(const uint8_t* src, int64_t blocks, float* dst);

// Copies each block out of the row (the row needs no alignment) and expands
// it with the per-block function.
template <typename Block, int kBlockSize,
          void (*kDequantize)(const Block&, float*)>
void dequantize_blocks(const uint8_t* src, int64_t blocks, float* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    Block block;
    std::memcpy(&block, src + b * static_cast<int64_t>(sizeof(Block)),
                sizeof(Block));
    kDequantize(block, dst + b * kBlockSize);
  }
}

void dequantize_f32(const uint8_t* src, int64_t n, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

template <float (*kWiden)(uint16_t)>
void dequantize_16bit(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, sizeof(bits));
    dst[i] = kWiden(bits);
  }
}

RowFn lookup(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return dequantize_f32;
    case GgmlType::kF16:
      return dequantize_16bit<f16_to_f32>;
    case GgmlType::kBF16:
      return dequantize_16bit<bf16_to_f32>;
    case GgmlType::kQ4_0:
      return dequantize_blocks<BlockQ4_0, kQK4_0, dequantize_q4_0>;
    case GgmlType::kQ4_1:
      return dequantize_blocks<BlockQ4_1, kQK4_1, dequantize_q4_1>;
    case GgmlType::kQ5_0:
      return dequantize_blocks<BlockQ5_0, kQK5_0, dequantize_q5_0>;
    case GgmlType::kQ5_1:
      return dequantize_blocks<BlockQ5_1, kQK5_1, dequantize_q5_1>;
    case GgmlType::kQ8_0:
      return dequantize_blocks<BlockQ8_0, kQK8_0, dequantize_q8_0>;
    case GgmlType::kQ8_1:
      return dequantize_blocks<BlockQ8_1, kQK8_1, dequantize_q8_1>;
    case GgmlType::kMXFP4:
      return dequantize_blocks<BlockMxfp4, kQKMxfp4, dequantize_mxfp4>;
    case GgmlType::kQ2_K:
      return dequantize_blocks<BlockQ2_K, kSuperBlock, dequantize_q2_K>;
    case GgmlType::kQ3_K:
      return dequantize_blocks<BlockQ3_K, kSuperBlock, dequantize_q3_K>;
    case GgmlType::kQ4_K:
      return dequantize_blocks<BlockQ4_K, kSuperBlock, dequantize_q4_K>;
    case GgmlType::kQ5_K:
      return dequantize_blocks<BlockQ5_K, kSuperBlock, dequantize_q5_K>;
    case GgmlType::kQ6_K:
      return dequantize_blocks<BlockQ6_K, kSuperBlock, dequantize_q6_K>;
    case GgmlType::kQ8_K:
      return dequantize_blocks<BlockQ8_K, kSuperBlock, dequantize_q8_K>;
    default:
      return nullptr;
  }
}

}  // namespace

bool can_dequantize(GgmlType type) { return lookup(type) != nullptr; }

absl::Status dequantize_row(GgmlType type, const void* src, int64_t n,
                            float* dst) {
  const RowFn fn = lookup(type);
  if (fn == nullptr) return unsupported("dequantize_row", type);
  if (absl::Status status = check_row("dequantize_row", type, n, src, dst);
      !status.ok()) {
    return status;
  }
  if (n == 0) return absl::OkStatus();
  fn(static_cast<const uint8_t*>(src), n / ggml_type_info(type).block_size,
     dst);
  return absl::OkStatus();
}

}  // namespace strata::reference
