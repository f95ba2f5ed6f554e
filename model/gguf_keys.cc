#include "model/gguf_keys.h"

#include <array>
#include <variant>

namespace strata::gguf {
namespace {

using Kind = KeyRequirement::Kind;

struct KeyEntry {
  std::string_view key;
  KeyRequirement requirement;
};

// Exact keys. Types as the spec states and as llama.cpp requires when it
// loads them (its loader refuses any other type for these keys).
constexpr std::array<KeyEntry, 15> kExactKeys = {{
    {"general.architecture", {Kind::kScalar, ValueType::kString}},
    {"general.name", {Kind::kScalar, ValueType::kString}},
    {"general.alignment", {Kind::kScalar, ValueType::kUint32}},
    {"general.quantization_version", {Kind::kScalar, ValueType::kUint32}},
    {"general.file_type", {Kind::kScalar, ValueType::kUint32}},
    {"tokenizer.ggml.model", {Kind::kScalar, ValueType::kString}},
    {"tokenizer.ggml.pre", {Kind::kScalar, ValueType::kString}},
    {"tokenizer.ggml.tokens", {Kind::kArrayOf, ValueType::kString}},
    {"tokenizer.ggml.scores", {Kind::kArrayOf, ValueType::kFloat32}},
    {"tokenizer.ggml.token_type", {Kind::kArrayOf, ValueType::kInt32}},
    {"tokenizer.ggml.merges", {Kind::kArrayOf, ValueType::kString}},
    {"tokenizer.chat_template", {Kind::kScalar, ValueType::kString}},
    // gguf-split (llama.cpp tools/gguf-split).
    {"split.no", {Kind::kScalar, ValueType::kUint16}},
    {"split.count", {Kind::kScalar, ValueType::kUint16}},
    {"split.tensors.count", {Kind::kScalar, ValueType::kInt32}},
}};

// "ARCH.<suffix>" for any architecture name without dots.
constexpr std::array<std::string_view, 3> kArchIntegerSuffixes = {
    ".context_length", ".block_count", ".embedding_length"};

constexpr std::string_view kTokenizerPrefix = "tokenizer.ggml.";
constexpr std::string_view kTokenIdSuffix = "_token_id";
constexpr std::string_view kTokenizerFlagPrefix = "tokenizer.ggml.add_";

bool is_integer(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<KeyRequirement> key_requirement(std::string_view key) {
  for (const KeyEntry& entry : kExactKeys) {
    if (entry.key == key) return entry.requirement;
  }
  // tokenizer.ggml.bos_token_id, eos_, unknown_, padding_, seperator_, ...
  if (key.starts_with(kTokenizerPrefix) && key.ends_with(kTokenIdSuffix)) {
    return KeyRequirement{Kind::kScalar, ValueType::kUint32};
  }
  // tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix, ...
  if (key.starts_with(kTokenizerFlagPrefix)) {
    return KeyRequirement{Kind::kScalar, ValueType::kBool};
  }
  for (std::string_view suffix : kArchIntegerSuffixes) {
    if (key.size() > suffix.size() && key.ends_with(suffix)) {
      std::string_view arch = key.substr(0, key.size() - suffix.size());
      if (arch.find('.') == std::string_view::npos) {
        return KeyRequirement{Kind::kInteger, ValueType::kUint32};
      }
    }
  }
  return std::nullopt;
}

std::string describe(const KeyRequirement& requirement) {
  switch (requirement.kind) {
    case Kind::kScalar:
      return std::string(value_type_name(requirement.type));
    case Kind::kArrayOf:
      return "ARRAY of " + std::string(value_type_name(requirement.type));
    case Kind::kInteger:
      return "an integer type";
  }
  return "?";
}

std::string describe_type(const Value& value) {
  std::string text(value_type_name(value.type));
  if (const Array* array = std::get_if<Array>(&value.data)) {
    text += " of ";
    text += value_type_name(array->element_type);
  }
  return text;
}

bool satisfies(const Value& value, const KeyRequirement& requirement) {
  switch (requirement.kind) {
    case Kind::kScalar:
      return value.type == requirement.type;
    case Kind::kArrayOf: {
      const Array* array = std::get_if<Array>(&value.data);
      return value.type == ValueType::kArray && array != nullptr &&
             array->element_type == requirement.type;
    }
    case Kind::kInteger:
      return is_integer(value.type);
  }
  return false;
}

}  // namespace strata::gguf
