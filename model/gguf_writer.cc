#include "model/gguf_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "model/gguf_keys.h"
#include "model/gguf_text.h"

namespace strata::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

Value make(ValueType type, auto data) {
  Value value;
  value.type = type;
  value.data = std::move(data);
  return value;
}

// The variant index that holds a value of `type` (see Value::data).
constexpr size_t variant_index(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return 0;
    case ValueType::kInt8:
      return 1;
    case ValueType::kUint16:
      return 2;
    case ValueType::kInt16:
      return 3;
    case ValueType::kUint32:
      return 4;
    case ValueType::kInt32:
      return 5;
    case ValueType::kFloat32:
      return 6;
    case ValueType::kBool:
      return 7;
    case ValueType::kString:
      return 8;
    case ValueType::kUint64:
      return 9;
    case ValueType::kInt64:
      return 10;
    case ValueType::kFloat64:
      return 11;
    case ValueType::kArray:
      return 12;
  }
  return std::variant_npos;
}

// Checks that `value` is well formed and within the reader's default limits.
absl::Status check_value(std::string_view key, const Value& value,
                         uint32_t depth) {
  const ReaderLimits limits;
  if (variant_index(value.type) != value.data.index()) {
    return absl::InvalidArgumentError(
        text::cat("metadata key '", key, "': value of type ",
                  value_type_name(value.type), " holds another alternative"));
  }
  if (const std::string* text = std::get_if<std::string>(&value.data)) {
    if (text->size() > limits.max_string_bytes) {
      return absl::InvalidArgumentError(text::cat(
          "metadata key '", key, "': string of ", text->size(),
          " bytes exceeds the reader's limit of ", limits.max_string_bytes));
    }
  }
  const Array* array = std::get_if<Array>(&value.data);
  if (array == nullptr) return absl::OkStatus();
  if (depth + 1 > limits.max_array_depth) {
    return absl::InvalidArgumentError(text::cat("metadata key '", key,
                                                "': arrays nested deeper than ",
                                                limits.max_array_depth));
  }
  if (variant_index(array->element_type) == std::variant_npos) {
    return absl::InvalidArgumentError(
        text::cat("metadata key '", key, "': unknown array element type ",
                  static_cast<uint32_t>(array->element_type)));
  }
  if (array->items.size() > limits.max_array_elements) {
    return absl::InvalidArgumentError(text::cat(
        "metadata key '", key, "': array of ", array->items.size(),
        " elements exceeds the reader's limit of ", limits.max_array_elements));
  }
  for (const Value& item : array->items) {
    if (item.type != array->element_type) {
      return absl::InvalidArgumentError(
          text::cat("metadata key '", key, "': ARRAY of ",
                    value_type_name(array->element_type),
                    " holds an item of type ", value_type_name(item.type)));
    }
    if (absl::Status s = check_value(key, item, depth + 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

Value value_u8(uint8_t v) { return make(ValueType::kUint8, v); }
Value value_i8(int8_t v) { return make(ValueType::kInt8, v); }
Value value_u16(uint16_t v) { return make(ValueType::kUint16, v); }
Value value_i16(int16_t v) { return make(ValueType::kInt16, v); }
Value value_u32(uint32_t v) { return make(ValueType::kUint32, v); }
Value value_i32(int32_t v) { return make(ValueType::kInt32, v); }
Value value_f32(float v) { return make(ValueType::kFloat32, v); }
Value value_bool(bool v) { return make(ValueType::kBool, v); }
Value value_string(std::string v) {
  return make(ValueType::kString, std::move(v));
}
Value value_u64(uint64_t v) { return make(ValueType::kUint64, v); }
Value value_i64(int64_t v) { return make(ValueType::kInt64, v); }
Value value_f64(double v) { return make(ValueType::kFloat64, v); }
Value value_array(ValueType element_type, std::vector<Value> items) {
  return make(ValueType::kArray, Array{element_type, std::move(items)});
}

namespace {

// Serializes the head of the file (header, metadata, tensor infos).
class HeadBuffer {
 public:
  template <typename T>
  void put(T value) {
    // resize + memcpy rather than insert(): GCC 12 at -O3 reports a false
    // stringop-overflow for the inlined vector::insert of a few bytes.
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(value));
    std::memcpy(bytes_.data() + at, &value, sizeof(value));
  }
  void put_string(std::string_view text) {
    put<uint64_t>(text.size());
    bytes_.insert(bytes_.end(), text.begin(), text.end());
  }
  void put_value(const Value& value) {
    std::visit(
        [this](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            put_string(v);
          } else if constexpr (std::is_same_v<T, Array>) {
            put(static_cast<uint32_t>(v.element_type));
            put<uint64_t>(v.items.size());
            for (const Value& item : v.items) put_value(item);
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(v ? 1 : 0);
          } else {
            put(v);
          }
        },
        value.data);
  }
  void pad_to(uint64_t alignment) {
    bytes_.resize(align_up(bytes_.size(), alignment), 0);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr uint8_t kZeros[256] = {};

// Emits zeros from `written` up to the next multiple of `alignment`.
absl::Status emit_padding(
    const std::function<absl::Status(const uint8_t*, size_t)>& emit,
    uint64_t written, uint64_t alignment) {
  uint64_t n = align_up(written, alignment) - written;
  while (n > 0) {
    const size_t chunk = n < sizeof(kZeros) ? n : sizeof(kZeros);
    if (absl::Status s = emit(kZeros, chunk); !s.ok()) return s;
    n -= chunk;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GgufWriter::set_metadata(std::string key, Value value) {
  if (key.size() > ReaderLimits{}.max_string_bytes) {
    return absl::InvalidArgumentError("metadata key too long");
  }
  if (absl::Status s = check_value(key, value, 0); !s.ok()) return s;
  if (std::optional<KeyRequirement> requirement = key_requirement(key)) {
    if (!satisfies(value, *requirement)) {
      return absl::InvalidArgumentError(
          text::cat("metadata key '", key, "' must be ", describe(*requirement),
                    ", got ", describe_type(value)));
    }
  }
  if (key == kAlignmentKey) {
    const uint32_t alignment = std::get<uint32_t>(value.data);
    if (!is_valid_alignment(alignment) ||
        alignment > ReaderLimits{}.max_alignment) {
      return absl::InvalidArgumentError(
          text::cat("general.alignment ", alignment,
                    " is not a nonzero power of two up to ",
                    ReaderLimits{}.max_alignment));
    }
    alignment_ = alignment;
    assign_offsets();
  }
  for (KeyValue& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return absl::OkStatus();
    }
  }
  kv_.push_back(KeyValue{std::move(key), std::move(value), 0});
  return absl::OkStatus();
}

absl::Status GgufWriter::remove_metadata(std::string_view key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it) {
    if (it->key == key) {
      kv_.erase(it);
      if (key == kAlignmentKey) {
        alignment_ = kDefaultAlignment;
        assign_offsets();
      }
      return absl::OkStatus();
    }
  }
  return absl::NotFoundError(text::cat("metadata key '", key, "' absent"));
}

absl::Status GgufWriter::add_tensor(std::string name, GgmlType type,
                                    std::vector<int64_t> shape) {
  return add_tensor_impl(std::move(name), type, std::move(shape), {}, false);
}

absl::Status GgufWriter::add_tensor(std::string name, GgmlType type,
                                    std::vector<int64_t> shape,
                                    std::span<const uint8_t> data) {
  return add_tensor_impl(std::move(name), type, std::move(shape),
                         std::vector<uint8_t>(data.begin(), data.end()), true);
}

absl::Status GgufWriter::add_tensor_impl(std::string name, GgmlType type,
                                         std::vector<int64_t> shape,
                                         std::vector<uint8_t> data,
                                         bool has_data) {
  auto bad = [&name](std::string_view rule) {
    return absl::InvalidArgumentError(text::cat("tensor '", name, "': ", rule));
  };
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return bad("duplicate tensor name");
  }
  if (name.size() > ReaderLimits{}.max_string_bytes)
    return bad("name too long");
  if (shape.empty() || shape.size() > 4) {
    return bad(text::cat("n_dims ", shape.size(), " outside 1..4"));
  }
  int64_t n_elements = 1;
  for (int64_t extent : shape) {
    if (extent <= 0) {
      return bad(text::cat("extent ", extent, " is not positive"));
    }
    if (__builtin_mul_overflow(n_elements, extent, &n_elements)) {
      return bad("product of extents overflows 64 bits");
    }
  }
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (shape[0] % info.block_size != 0) {
    return bad(text::cat("row length ", shape[0],
                         " is not a multiple of the block size ",
                         info.block_size, " of ", info.name));
  }
  uint64_t n_bytes = 0;
  if (__builtin_mul_overflow(
          static_cast<uint64_t>(n_elements / info.block_size),
          static_cast<uint64_t>(info.type_size), &n_bytes)) {
    return bad("byte size overflows 64 bits");
  }
  if (has_data && data.size() != n_bytes) {
    return bad(
        text::cat("data holds ", data.size(), " bytes, the tensor ", n_bytes));
  }
  TensorInfo tensor;
  tensor.name = std::move(name);
  tensor.type = type;
  tensor.shape = std::move(shape);
  tensor.n_bytes = n_bytes;
  tensor.n_elements = static_cast<uint64_t>(n_elements);
  tensors_.push_back(std::move(tensor));
  owned_data_.push_back(std::move(data));
  has_data_.push_back(has_data);
  assign_offsets();
  return absl::OkStatus();
}

void GgufWriter::assign_offsets() {
  uint64_t offset = 0;
  for (TensorInfo& t : tensors_) {
    t.offset = offset;
    offset = align_up(offset + t.n_bytes, alignment_);
  }
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::head_bytes() const {
  // Per-token arrays must match the vocabulary (the reader refuses others).
  const KeyValue* tokens = nullptr;
  for (const KeyValue& kv : kv_) {
    if (kv.key == kTokensKey) tokens = &kv;
  }
  for (const KeyValue& kv : kv_) {
    for (std::string_view key : kPerTokenKeys) {
      if (tokens == nullptr || kv.key != key) continue;
      const size_t n = std::get<Array>(kv.value.data).items.size();
      const size_t n_tokens = std::get<Array>(tokens->value.data).items.size();
      if (n != n_tokens) {
        return absl::InvalidArgumentError(text::cat(
            "metadata key '", key, "': length ", n, " differs from the ",
            n_tokens, " entries of ", kTokensKey));
      }
    }
  }

  HeadBuffer head;
  head.put<uint32_t>(0x46554747);  // "GGUF"
  head.put<uint32_t>(kVersion);
  head.put<uint64_t>(tensors_.size());
  head.put<uint64_t>(kv_.size());
  for (const KeyValue& kv : kv_) {
    head.put_string(kv.key);
    head.put(static_cast<uint32_t>(kv.value.type));
    head.put_value(kv.value);
  }
  for (const TensorInfo& t : tensors_) {
    head.put_string(t.name);
    head.put(static_cast<uint32_t>(t.shape.size()));
    for (int64_t extent : t.shape) head.put(static_cast<uint64_t>(extent));
    head.put(static_cast<uint32_t>(t.type));
    head.put<uint64_t>(t.offset);
  }
  head.pad_to(alignment_);
  return head.bytes();
}

absl::Status GgufWriter::write_to(const Emit& emit, const FillFn& fill) const {
  if (!fill) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!has_data_[i]) {
        return absl::FailedPreconditionError(
            text::cat("tensor '", tensors_[i].name,
                      "' has no data and no fill callback"));
      }
    }
  }
  absl::StatusOr<std::vector<uint8_t>> head = head_bytes();
  if (!head.ok()) return head.status();
  const uint64_t data_start = head->size();
  if (absl::Status s = emit(head->data(), head->size()); !s.ok()) return s;

  uint64_t written = data_start;
  std::vector<uint8_t> buffer;  // reused: holds one tensor at a time
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i];
    if (written != data_start + t.offset) {
      return absl::InternalError("tensor offsets out of step with the data");
    }
    const uint8_t* bytes = owned_data_[i].data();
    if (!has_data_[i]) {
      // One tensor in memory: a shape too big for it (strata synth with a
      // wide shape and a large --tokenizer-from vocabulary) is an error,
      // not an uncaught std::bad_alloc.
      try {
        buffer.resize(t.n_bytes);
      } catch (const std::exception&) {
        return absl::ResourceExhaustedError(
            text::cat("tensor '", t.name, "': its ", t.n_bytes,
                      " bytes do not fit in memory (the writer holds one "
                      "tensor at a time)"));
      }
      if (absl::Status s = fill(i, t, std::span<uint8_t>(buffer)); !s.ok()) {
        return s;
      }
      bytes = buffer.data();
    }
    if (absl::Status s = emit(bytes, t.n_bytes); !s.ok()) return s;
    written += t.n_bytes;
    if (absl::Status s = emit_padding(emit, written, alignment_); !s.ok()) {
      return s;
    }
    written = align_up(written, alignment_);
  }
  return absl::OkStatus();
}

namespace {

// Closes `file` (written as `tmp`) and, when all went well (`s` OK), renames
// it to `path`; on any failure removes `tmp`. Returns the first error.
absl::Status close_and_rename(std::FILE* file, absl::Status s,
                              const std::string& tmp, const std::string& path) {
  if (std::fclose(file) != 0 && s.ok()) {
    s = absl::ErrnoToStatus(errno, text::cat("close ", tmp));
  }
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::ErrnoToStatus(errno, text::cat("rename ", tmp, " to ", path));
  }
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

}  // namespace

absl::Status GgufWriter::write(const std::string& path,
                               const FillFn& fill) const {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, text::cat("create ", tmp));
  }
  std::vector<char> io_buffer(1 << 20);
  std::setvbuf(file, io_buffer.data(), _IOFBF, io_buffer.size());
  absl::Status s = write_to(
      [&](const uint8_t* bytes, size_t n) -> absl::Status {
        if (n > 0 && std::fwrite(bytes, 1, n, file) != n) {
          return absl::ErrnoToStatus(errno, text::cat("write ", tmp));
        }
        return absl::OkStatus();
      },
      fill);
  if (std::fflush(file) != 0 && s.ok()) {
    s = absl::ErrnoToStatus(errno, text::cat("write ", tmp));
  }
  return close_and_rename(file, std::move(s), tmp, path);
}

absl::Status GgufWriter::write_sparse(const std::string& path) const {
  absl::StatusOr<std::vector<uint8_t>> head = head_bytes();
  if (!head.ok()) return head.status();
  uint64_t size = head->size();
  if (!tensors_.empty()) {
    const TensorInfo& last = tensors_.back();
    size += align_up(last.offset + last.n_bytes, alignment_);
  }
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, text::cat("create ", tmp));
  }
  absl::Status s;
  if (!head->empty() &&
      std::fwrite(head->data(), 1, head->size(), file) != head->size()) {
    s = absl::ErrnoToStatus(errno, text::cat("write ", tmp));
  }
  if (s.ok() && std::fflush(file) != 0) {
    s = absl::ErrnoToStatus(errno, text::cat("write ", tmp));
  }
  if (s.ok() && ::ftruncate(::fileno(file), static_cast<off_t>(size)) != 0) {
    s = absl::ErrnoToStatus(errno,
                            text::cat("extend ", tmp, " to ", size, " bytes"));
  }
  return close_and_rename(file, std::move(s), tmp, path);
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::to_bytes(
    const FillFn& fill) const {
  std::vector<uint8_t> out;
  absl::Status s = write_to(
      [&out](const uint8_t* bytes, size_t n) {
        out.insert(out.end(), bytes, bytes + n);
        return absl::OkStatus();
      },
      fill);
  if (!s.ok()) return s;
  return out;
}

}  // namespace strata::gguf
