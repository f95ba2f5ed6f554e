// libFuzzer target for the GGUF reader: parses the input as a GGUF image and
// touches every result, so that ASan/UBSan see any read of a value or of
// tensor data the parser let through. Run by scripts/fuzz.sh.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "model/gguf_reader.h"

namespace {

using strata::gguf::Array;
using strata::gguf::GgufFile;
using strata::gguf::ReaderLimits;
using strata::gguf::TensorInfo;
using strata::gguf::Value;

// Folds every byte of a value into `sum` (defeats dead-code elimination).
void touch(const Value& value, uint64_t& sum) {
  std::visit(
      [&sum](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Array>) {
          sum += static_cast<uint64_t>(v.element_type);
          for (const Value& item : v.items) touch(item, sum);
        } else if constexpr (std::is_same_v<T, std::string>) {
          for (char c : v) sum += static_cast<uint8_t>(c);
        } else if constexpr (std::is_same_v<T, float>) {
          sum += std::bit_cast<uint32_t>(v);  // NaN cannot convert
        } else if constexpr (std::is_same_v<T, double>) {
          sum += std::bit_cast<uint64_t>(v);
        } else {
          sum += static_cast<uint64_t>(v);
        }
      },
      value.data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Smaller limits than the defaults keep each run fast; the rules are the
  // same.
  ReaderLimits limits;
  limits.max_total_array_elements = 1u << 20;
  auto file = GgufFile::parse(data, size, limits);
  if (!file.ok()) return 0;
  const GgufFile& f = **file;
  uint64_t sum = f.version() + f.alignment() + f.data_offset();
  for (const auto& kv : f.metadata()) {
    sum += kv.key.size() + kv.file_offset;
    touch(kv.value, sum);
    if (f.find(kv.key) != &kv.value) __builtin_trap();
    (void)f.get_u32(kv.key);
    (void)f.get_u64(kv.key);
    (void)f.get_f32(kv.key);
    (void)f.get_string(kv.key);
    (void)f.get_bool(kv.key);
  }
  for (const TensorInfo& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    // Every tensor lies inside the buffer: read its first and last byte.
    if (t.n_bytes == 0 || t.data < data || t.data + t.n_bytes > data + size) {
      __builtin_trap();
    }
    sum += t.data[0] + t.data[t.n_bytes - 1] + t.shape.size() + t.n_elements;
  }
  volatile uint64_t sink = sum;
  (void)sink;
  return 0;
}
