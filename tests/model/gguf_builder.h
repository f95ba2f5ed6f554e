// Test helper: builds GGUF byte images field by field, valid or hostile, and
// records where each field starts so tests can check the offset an error
// names. Little-endian, as GGUF.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata::gguf::testing {

class GgufBuilder {
 public:
  // Offset of the next byte written.
  uint64_t pos() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  template <typename T>
  GgufBuilder& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBuilder& u8(uint8_t v) { return put(v); }
  GgufBuilder& u16(uint16_t v) { return put(v); }
  GgufBuilder& u32(uint32_t v) { return put(v); }
  GgufBuilder& i32(int32_t v) { return put(v); }
  GgufBuilder& u64(uint64_t v) { return put(v); }
  GgufBuilder& f32(float v) { return put(v); }
  GgufBuilder& raw(std::string_view bytes) {
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  // GGUF string: u64 length + bytes.
  GgufBuilder& str(std::string_view s) { return u64(s.size()).raw(s); }
  GgufBuilder& zeros(uint64_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  GgufBuilder& pad(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }

  // "GGUF" | version | n_tensors | n_kv.
  GgufBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }

  // Key + value type; the caller writes the value.
  GgufBuilder& key(std::string_view key, ValueType type) {
    return str(key).u32(static_cast<uint32_t>(type));
  }
  GgufBuilder& kv_u32(std::string_view k, uint32_t v) {
    return key(k, ValueType::kUint32).u32(v);
  }
  GgufBuilder& kv_string(std::string_view k, std::string_view v) {
    return key(k, ValueType::kString).str(v);
  }
  // Key + ARRAY header (element type, count); the caller writes elements.
  GgufBuilder& kv_array(std::string_view k, ValueType element, uint64_t n) {
    return key(k, ValueType::kArray).u32(static_cast<uint32_t>(element)).u64(n);
  }

  // A full tensor info.
  GgufBuilder& tensor(std::string_view name, std::initializer_list<uint64_t> ne,
                      GgmlType type, uint64_t offset) {
    return tensor_raw(name, ne, static_cast<uint32_t>(type), offset);
  }
  GgufBuilder& tensor_raw(std::string_view name,
                          std::initializer_list<uint64_t> ne, uint32_t type,
                          uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t extent : ne) u64(extent);
    return u32(type).u64(offset);
  }

  // Overwrites 4 bytes at `at` (e.g. to patch a version).
  void patch_u32(uint64_t at, uint32_t v) { std::memcpy(&bytes_[at], &v, 4); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace strata::gguf::testing
