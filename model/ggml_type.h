// ggml tensor element types as GGUF stores them: the numeric id, the block
// size (elements per block) and the type size (bytes per block).
//
// Source of the ids and sizes: ggml/include/ggml.h (enum ggml_type) and the
// type_traits table in ggml/src/ggml.c of llama.cpp (b10587); NVFP4 and
// Q1_0 as the gguf Python package 0.19 sizes them (GGML_QUANT_SIZES). Q8_1 is
// 36 bytes as in ggml (two f16); gguf-py 0.19 still lists an older 40. Ids 4, 5 and
// 31..33, 36..38 were used by removed types; GGUF files must not carry them.
// The byte layout of each block is documented in
// kernels/cpu/reference/block_layouts.h.
//
// Thread-safety: everything here is immutable data; any thread may call it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

// Elements per super-block of the K-quants (QK_K in ggml).
inline constexpr int64_t kQK_K = 256;

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // ggml's name, e.g. "Q4_K", "MXFP4", "F16"
  int64_t block_size;     // elements per block (1 for plain scalar types)
  int64_t type_size;      // bytes per block
};

// Looks up a raw id read from a file. Returns nullptr for an id that is not a
// ggml type (including the ids of removed types): callers report the id.
const GgmlTypeInfo* ggml_type_info(uint32_t id);

// Info for a known enumerator (never null).
const GgmlTypeInfo& ggml_type_info(GgmlType type);

// "Q4_K" (or "q4_k", as llama-quantize also takes it) -> kQ4_K: ggml's
// spelling, any case. nullopt when unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of a row of `n_elements` elements; nullopt when n_elements is not a
// multiple of the block size or is negative.
std::optional<int64_t> ggml_row_bytes(GgmlType type, int64_t n_elements);

}  // namespace strata
