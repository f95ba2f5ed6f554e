#include "model/ggml_type.h"

#include <array>

#include "absl/strings/match.h"

namespace strata {
namespace {

// Sizes from ggml.c's type_traits (llama.cpp b10587).
constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::kQ4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::kQ5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::kQ5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::kQ8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::kQ8_1, "Q8_1", 32, 2 + 2 + 32},
    {GgmlType::kQ2_K, "Q2_K", kQK_K, 16 + 64 + 2 + 2},
    {GgmlType::kQ3_K, "Q3_K", kQK_K, 32 + 64 + 12 + 2},
    {GgmlType::kQ4_K, "Q4_K", kQK_K, 2 + 2 + 12 + 128},
    {GgmlType::kQ5_K, "Q5_K", kQK_K, 2 + 2 + 12 + 32 + 128},
    {GgmlType::kQ6_K, "Q6_K", kQK_K, 128 + 64 + 16 + 2},
    {GgmlType::kQ8_K, "Q8_K", kQK_K, 4 + 256 + 2 * 16},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", kQK_K, 2 + 64},
    {GgmlType::kIQ2_XS, "IQ2_XS", kQK_K, 2 + 64 + 8},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", kQK_K, 2 + 96},
    {GgmlType::kIQ1_S, "IQ1_S", kQK_K, 2 + 32 + 16},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 2 + 16},
    {GgmlType::kIQ3_S, "IQ3_S", kQK_K, 2 + 64 + 8 + 32 + 4},
    {GgmlType::kIQ2_S, "IQ2_S", kQK_K, 2 + 64 + 8 + 8},
    {GgmlType::kIQ4_XS, "IQ4_XS", kQK_K, 2 + 2 + 4 + 128},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", kQK_K, 32 + 16 + 8},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", kQK_K, 48 + 4 + 2},
    {GgmlType::kTQ2_0, "TQ2_0", kQK_K, 64 + 2},
    {GgmlType::kMXFP4, "MXFP4", 32, 1 + 16},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},
    {GgmlType::kQ1_0, "Q1_0", 128, 18},
}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  return *ggml_type_info(static_cast<uint32_t>(type));
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const GgmlTypeInfo& info : kTypes) {
    // absl's string_view is its own type in Debian's abseil, not std's.
    if (absl::EqualsIgnoreCase(absl::string_view(info.name.data(), info.name.size()),
                               absl::string_view(name.data(), name.size()))) {
      return info.type;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> ggml_row_bytes(GgmlType type, int64_t n_elements) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (n_elements < 0 || n_elements % info.block_size != 0) return std::nullopt;
  return n_elements / info.block_size * info.type_size;
}

}  // namespace strata
