// The well-known GGUF metadata keys whose value type the reader (and the
// writer) enforce, so that code reading them downstream can trust the type.
//
// Source: the GGUF spec (ggml/docs/gguf.md in llama.cpp) and the keys that
// llama.cpp's convert scripts and gguf-split write. The table is small on
// purpose; docs/gguf.md lists it. Keys not in it may hold any type.
//
// Thread-safety: immutable data; any thread may call these.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/gguf_reader.h"

namespace strata::gguf {

// What a well-known key must hold.
struct KeyRequirement {
  enum class Kind {
    kScalar,   // exactly `type`
    kArrayOf,  // an ARRAY whose element type is `type`
    kInteger,  // any integer type (UINT8..INT64), not BOOL
  };
  Kind kind = Kind::kScalar;
  ValueType type = ValueType::kUint8;
};

// The requirement for `key`, or nullopt for a key outside the table. Keys
// "ARCH.context_length", "ARCH.block_count" and "ARCH.embedding_length"
// (ARCH without dots) match for every architecture.
std::optional<KeyRequirement> key_requirement(std::string_view key);

// "UINT32", "ARRAY of STRING", "an integer type".
std::string describe(const KeyRequirement& requirement);
// "UINT32", "ARRAY of FLOAT32" (the actual type of a value).
std::string describe_type(const Value& value);

// True when `value` satisfies `requirement`.
bool satisfies(const Value& value, const KeyRequirement& requirement);

// Keys whose arrays must be exactly as long as tokenizer.ggml.tokens.
inline constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
inline constexpr std::string_view kPerTokenKeys[] = {
    "tokenizer.ggml.scores", "tokenizer.ggml.token_type"};

inline constexpr std::string_view kAlignmentKey = "general.alignment";
inline constexpr std::string_view kSplitNoKey = "split.no";
inline constexpr std::string_view kSplitCountKey = "split.count";
inline constexpr std::string_view kSplitTensorsCountKey = "split.tensors.count";

// True for a nonzero power of two.
inline bool is_valid_alignment(uint64_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0;
}

}  // namespace strata::gguf
