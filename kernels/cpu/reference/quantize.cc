#include "kernels/cpu/reference/quantize.h"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/k_quants.h"
#include "kernels/cpu/reference/legacy_quants.h"
#include "kernels/cpu/reference/row_check.h"

namespace strata::reference {
namespace {

// Quantizes `blocks` consecutive blocks (plain types: elements).
using RowFn = void (*)(const float* src, int64_t blocks, uint8_t* dst);

// Builds each block in an aligned local and copies it into the row (the row
// needs no alignment).
template <typename Block, int kBlockSize,
          void (*kQuantize)(const float*, Block*)>
void quantize_blocks(const float* src, int64_t blocks, uint8_t* dst) {
  for (int64_t b = 0; b < blocks; ++b) {
    Block block;
    kQuantize(src + b * kBlockSize, &block);
    std::memcpy(dst + b * static_cast<int64_t>(sizeof(Block)), &block,
                sizeof(Block));
  }
}

void quantize_f32(const float* src, int64_t n, uint8_t* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

template <uint16_t (*kNarrow)(float)>
void quantize_16bit(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = kNarrow(src[i]);
    std::memcpy(dst + 2 * i, &bits, sizeof(bits));
  }
}

RowFn lookup(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return quantize_f32;
    case GgmlType::kF16:
      return quantize_16bit<f32_to_f16>;
    case GgmlType::kBF16:
      return quantize_16bit<f32_to_bf16>;
    case GgmlType::kQ4_0:
      return quantize_blocks<BlockQ4_0, kQK4_0, quantize_q4_0>;
    case GgmlType::kQ4_1:
      return quantize_blocks<BlockQ4_1, kQK4_1, quantize_q4_1>;
    case GgmlType::kQ5_0:
      return quantize_blocks<BlockQ5_0, kQK5_0, quantize_q5_0>;
    case GgmlType::kQ5_1:
      return quantize_blocks<BlockQ5_1, kQK5_1, quantize_q5_1>;
    case GgmlType::kQ8_0:
      return quantize_blocks<BlockQ8_0, kQK8_0, quantize_q8_0>;
    case GgmlType::kQ8_1:
      return quantize_blocks<BlockQ8_1, kQK8_1, quantize_q8_1>;
    case GgmlType::kMXFP4:
      return quantize_blocks<BlockMxfp4, kQKMxfp4, quantize_mxfp4>;
    case GgmlType::kQ2_K:
      return quantize_blocks<BlockQ2_K, kSuperBlock, quantize_q2_K>;
    case GgmlType::kQ3_K:
      return quantize_blocks<BlockQ3_K, kSuperBlock, quantize_q3_K>;
    case GgmlType::kQ4_K:
      return quantize_blocks<BlockQ4_K, kSuperBlock, quantize_q4_K>;
    case GgmlType::kQ5_K:
      return quantize_blocks<BlockQ5_K, kSuperBlock, quantize_q5_K>;
    case GgmlType::kQ6_K:
      return quantize_blocks<BlockQ6_K, kSuperBlock, quantize_q6_K>;
    case GgmlType::kQ8_K:
      return quantize_blocks<BlockQ8_K, kSuperBlock, quantize_q8_K>;
    default:
      return nullptr;
  }
}

}  // namespace

bool can_quantize(GgmlType type) { return lookup(type) != nullptr; }

absl::Status quantize_row(GgmlType type, const float* src, int64_t n,
                          void* dst) {
  const RowFn fn = lookup(type);
  if (fn == nullptr) return unsupported("quantize_row", type);
  if (absl::Status status = check_row("quantize_row", type, n, src, dst);
      !status.ok()) {
    return status;
  }
  if (n == 0) return absl::OkStatus();
  fn(src, n / ggml_type_info(type).block_size, static_cast<uint8_t*>(dst));
  return absl::OkStatus();
}

}  // namespace strata::reference
