// GgufFile's lookups and typed getters, and value type names.
#include <limits>
#include <optional>
#include <type_traits>
#include <variant>

#include "absl/status/status.h"
#include "model/gguf_keys.h"
#include "model/gguf_reader.h"
#include "model/gguf_text.h"

namespace strata::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return "UINT8";
    case ValueType::kInt8:
      return "INT8";
    case ValueType::kUint16:
      return "UINT16";
    case ValueType::kInt16:
      return "INT16";
    case ValueType::kUint32:
      return "UINT32";
    case ValueType::kInt32:
      return "INT32";
    case ValueType::kFloat32:
      return "FLOAT32";
    case ValueType::kBool:
      return "BOOL";
    case ValueType::kString:
      return "STRING";
    case ValueType::kArray:
      return "ARRAY";
    case ValueType::kUint64:
      return "UINT64";
    case ValueType::kInt64:
      return "INT64";
    case ValueType::kFloat64:
      return "FLOAT64";
  }
  return "?";
}

const Value* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const KeyValue* GgufFile::find_entry(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second];
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status not_found(std::string_view key) {
  return absl::NotFoundError(text::cat("metadata key '", key, "' absent"));
}

absl::Status wrong_type(std::string_view key, const Value& value,
                        std::string_view wanted) {
  return absl::InvalidArgumentError(text::cat("metadata key '", key,
                                              "': expected ", wanted, ", got ",
                                              describe_type(value)));
}

// The value of an integer type as (negative?, magnitude), or nullopt.
struct Integer {
  bool negative = false;
  uint64_t magnitude = 0;
};

std::optional<Integer> as_integer(const Value& value) {
  return std::visit(
      [](const auto& v) -> std::optional<Integer> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (v < 0) {
              return Integer{true, static_cast<uint64_t>(-(v + 1)) + 1};
            }
          }
          return Integer{false, static_cast<uint64_t>(v)};
        } else {
          return std::nullopt;
        }
      },
      value.data);
}

}  // namespace

absl::StatusOr<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return not_found(key);
  const std::string* text = std::get_if<std::string>(&value->data);
  if (text == nullptr) return wrong_type(key, *value, "STRING");
  return *text;
}

absl::StatusOr<uint32_t> GgufFile::get_u32(std::string_view key) const {
  absl::StatusOr<uint64_t> value = get_u64(key);
  if (!value.ok()) return value.status();
  if (*value > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(text::cat(
        "metadata key '", key, "': value ", *value, " does not fit UINT32"));
  }
  return static_cast<uint32_t>(*value);
}

absl::StatusOr<uint64_t> GgufFile::get_u64(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return not_found(key);
  std::optional<Integer> integer = as_integer(*value);
  if (!integer.has_value()) return wrong_type(key, *value, "an integer");
  if (integer->negative) {
    return absl::InvalidArgumentError(
        text::cat("metadata key '", key, "': value -", integer->magnitude,
                  " is negative"));
  }
  return integer->magnitude;
}

absl::StatusOr<float> GgufFile::get_f32(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return not_found(key);
  if (const float* f = std::get_if<float>(&value->data)) return *f;
  if (const double* d = std::get_if<double>(&value->data)) {
    return static_cast<float>(*d);
  }
  return wrong_type(key, *value, "FLOAT32");
}

absl::StatusOr<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return not_found(key);
  if (const bool* b = std::get_if<bool>(&value->data)) return *b;
  return wrong_type(key, *value, "BOOL");
}

absl::StatusOr<const Array*> GgufFile::get_array(std::string_view key,
                                                 ValueType element_type) const {
  const Value* value = find(key);
  if (value == nullptr) return not_found(key);
  const Array* array = std::get_if<Array>(&value->data);
  if (array == nullptr || array->element_type != element_type) {
    return wrong_type(key, *value,
                      text::cat("ARRAY of ", value_type_name(element_type)));
  }
  return array;
}

}  // namespace strata::gguf
