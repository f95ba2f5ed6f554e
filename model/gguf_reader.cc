// GGUF parsing. Every length, count and enum is checked against the bytes
// that remain, the limits and its range before it is used; nothing is
// allocated from a length until that check has passed. Rules and their
// messages are listed in docs/gguf.md (keep the two in step).
#include "model/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "model/gguf_keys.h"
#include "model/gguf_text.h"

namespace strata::gguf {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
// The smallest encodings: a KV with an empty key and a one-byte value, and
// a tensor info with an empty name and one dimension.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Largest valid ValueType id.
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::kFloat64);
// Ids of ggml types that existed once and were removed (ggml.h).
constexpr uint32_t kRemovedGgmlTypes[] = {4, 5, 31, 32, 33, 36, 37, 38};

// A name from the file, escaped and cut so that a hostile one cannot flood
// or garble the message.
std::string quoted(std::string_view name) {
  constexpr size_t kMaxShown = 80;
  std::string out = text::cat("'", text::escape(name.substr(0, kMaxShown)));
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY.
uint64_t fixed_size(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

// Fewest bytes one encoded value of `type` can occupy.
uint64_t min_encoded_size(ValueType type) {
  if (type == ValueType::kString) return 8;     // u64 length
  if (type == ValueType::kArray) return 4 + 8;  // element type + count
  return fixed_size(type);
}

// Who a field belongs to, for messages: "n_kv", "key 'general.name' value",
// "tensor #3 name length". Formatted only when an error is reported.
struct Subject {
  std::string_view kind;  // "key", "tensor" or empty for header fields
  std::string_view name;
  uint64_t index = 0;  // position in the file, shown until `named`
  bool named = true;   // false while the name itself is being read

  std::string describe(std::string_view part) const {
    if (kind.empty()) return std::string(part);
    std::string out = named ? text::cat(kind, " ", quoted(name))
                            : text::cat(kind, " #", index);
    if (!part.empty()) out += text::cat(" ", part);
    return out;
  }
};

absl::Status error(const Subject& subject, std::string_view part,
                   uint64_t offset, std::string_view rule) {
  return absl::InvalidArgumentError(
      text::cat(subject.describe(part), " at offset ", offset, ": ", rule));
}

// Sequential little-endian reads from a bounded buffer.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    if (sizeof(T) > remaining()) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // The caller has checked n <= remaining().
  std::string_view take(uint64_t n) {
    std::string_view bytes(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return bytes;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

}  // namespace

// Fills a GgufFile from its bytes. One instance parses one file, front to
// back: header, key-value pairs, tensor infos, then places the tensors.
class GgufParser {
 public:
  GgufParser(GgufFile* file, const ReaderLimits& limits)
      : file_(*file), limits_(limits), cur_(file->base_, file->size_) {}

  absl::Status run() {
    if (absl::Status s = parse_header(); !s.ok()) return s;
    for (uint64_t i = 0; i < n_kv_; ++i) {
      if (absl::Status s = parse_kv(i); !s.ok()) return s;
    }
    if (absl::Status s = check_token_arrays(); !s.ok()) return s;
    if (absl::Status s = check_tensor_count(); !s.ok()) return s;
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      if (absl::Status s = parse_tensor_info(i); !s.ok()) return s;
    }
    return place_tensors();
  }

 private:
  absl::Status truncated(const Subject& subject, std::string_view part,
                         uint64_t needed) const {
    return error(subject, part, cur_.pos(),
                 text::cat("truncated: needs ", needed, " bytes, ",
                           cur_.remaining(), " remain"));
  }

  template <typename T>
  absl::Status read(const Subject& subject, std::string_view part, T* out) {
    if (!cur_.read(out)) return truncated(subject, part, sizeof(T));
    return absl::OkStatus();
  }

  // u64 length + bytes; `part` names the length field ("name length").
  absl::Status read_string(const Subject& subject, std::string_view part,
                           std::string* out) {
    const uint64_t at = cur_.pos();
    uint64_t length = 0;
    if (absl::Status s = read(subject, part, &length); !s.ok()) return s;
    if (length > cur_.remaining()) {
      return error(subject, part, at,
                   text::cat("length ", length, " exceeds the ",
                             cur_.remaining(), " bytes that remain"));
    }
    if (length > limits_.max_string_bytes) {
      return error(subject, part, at,
                   text::cat("length ", length, " exceeds the limit of ",
                             limits_.max_string_bytes));
    }
    out->assign(cur_.take(length));
    return absl::OkStatus();
  }

  // Reads a u32 value type id and checks its range.
  absl::Status read_value_type(const Subject& subject, std::string_view part,
                               ValueType* out) {
    const uint64_t at = cur_.pos();
    uint32_t raw = 0;
    if (absl::Status s = read(subject, part, &raw); !s.ok()) return s;
    if (raw > kMaxValueType) {
      return error(subject, part, at, text::cat("unknown value type ", raw));
    }
    *out = static_cast<ValueType>(raw);
    return absl::OkStatus();
  }

  absl::Status parse_header() {
    const Subject header;
    uint32_t magic = 0;
    if (absl::Status s = read(header, "magic", &magic); !s.ok()) return s;
    if (magic != kMagic) {
      std::string got(reinterpret_cast<const char*>(&magic), sizeof(magic));
      return error(header, "magic", 0,
                   text::cat("bad magic \"", text::escape(got),
                             "\", expected \"GGUF\""));
    }
    const uint64_t version_at = cur_.pos();
    uint32_t version = 0;
    if (absl::Status s = read(header, "version", &version); !s.ok()) return s;
    if (version == 1) {
      return error(header, "version", version_at,
                   "GGUF version 1 is not supported (it used 32-bit lengths; "
                   "convert the file with a newer llama.cpp)");
    }
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      return error(
          header, "version", version_at,
          text::cat("unsupported GGUF version ", version, " (expected 2 or 3)",
                    swapped == 2 || swapped == 3 ? "; this is a big-endian file"
                                                 : ""));
    }
    file_.version_ = version;
    n_tensors_at_ = cur_.pos();
    if (absl::Status s = read(header, "n_tensors", &n_tensors_); !s.ok()) {
      return s;
    }
    const uint64_t n_kv_at = cur_.pos();
    if (absl::Status s = read(header, "n_kv", &n_kv_); !s.ok()) return s;
    if (n_tensors_ > limits_.max_tensors) {
      return error(header, "n_tensors", n_tensors_at_,
                   text::cat(n_tensors_, " tensors exceed the limit of ",
                             limits_.max_tensors));
    }
    if (n_kv_ > limits_.max_kv) {
      return error(header, "n_kv", n_kv_at,
                   text::cat(n_kv_, " key-value pairs exceed the limit of ",
                             limits_.max_kv));
    }
    if (n_kv_ > cur_.remaining() / kMinKvBytes) {
      return error(header, "n_kv", n_kv_at,
                   text::cat(n_kv_, " key-value pairs (at least ", kMinKvBytes,
                             " bytes each) exceed the ", cur_.remaining(),
                             " bytes that remain"));
    }
    file_.kv_.reserve(n_kv_);
    return absl::OkStatus();
  }

  absl::Status parse_kv(uint64_t index) {
    KeyValue kv;
    kv.file_offset = cur_.pos();
    Subject subject{"key", "", index, false};
    if (absl::Status s = read_string(subject, "length", &kv.key); !s.ok()) {
      return s;
    }
    subject.name = kv.key;
    subject.named = true;
    if (auto it = file_.kv_index_.find(kv.key); it != file_.kv_index_.end()) {
      return error(subject, "", kv.file_offset,
                   text::cat("duplicate key (first at offset ",
                             file_.kv_[it->second].file_offset, ")"));
    }
    if (absl::Status s = read_value_type(subject, "value type", &kv.value.type);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = parse_value(subject, kv.value.type, 0, &kv.value);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = check_known_key(kv); !s.ok()) return s;
    file_.kv_index_.emplace(kv.key, file_.kv_.size());
    file_.kv_.push_back(std::move(kv));
    return absl::OkStatus();
  }

  // Reads one value of `type` (already read and checked); `depth` counts the
  // arrays that enclose it.
  absl::Status parse_value(const Subject& subject, ValueType type,
                           uint32_t depth, Value* out) {
    out->type = type;
    switch (type) {
      case ValueType::kUint8:
        return read_scalar<uint8_t>(subject, out);
      case ValueType::kInt8:
        return read_scalar<int8_t>(subject, out);
      case ValueType::kUint16:
        return read_scalar<uint16_t>(subject, out);
      case ValueType::kInt16:
        return read_scalar<int16_t>(subject, out);
      case ValueType::kUint32:
        return read_scalar<uint32_t>(subject, out);
      case ValueType::kInt32:
        return read_scalar<int32_t>(subject, out);
      case ValueType::kFloat32:
        return read_scalar<float>(subject, out);
      case ValueType::kUint64:
        return read_scalar<uint64_t>(subject, out);
      case ValueType::kInt64:
        return read_scalar<int64_t>(subject, out);
      case ValueType::kFloat64:
        return read_scalar<double>(subject, out);
      case ValueType::kBool: {
        const uint64_t at = cur_.pos();
        uint8_t byte = 0;
        if (absl::Status s = read(subject, "value", &byte); !s.ok()) return s;
        if (byte > 1) {
          return error(subject, "value", at,
                       text::cat("BOOL byte ", byte, " is not 0 or 1"));
        }
        out->data = byte == 1;
        return absl::OkStatus();
      }
      case ValueType::kString: {
        std::string text;
        if (absl::Status s = read_string(subject, "string length", &text);
            !s.ok()) {
          return s;
        }
        out->data = std::move(text);
        return absl::OkStatus();
      }
      case ValueType::kArray:
        return parse_array(subject, depth + 1, out);
    }
    return absl::InternalError("unreachable value type");
  }

  template <typename T>
  absl::Status read_scalar(const Subject& subject, Value* out) {
    T value{};
    if (absl::Status s = read(subject, "value", &value); !s.ok()) return s;
    out->data = value;
    return absl::OkStatus();
  }

  absl::Status parse_array(const Subject& subject, uint32_t depth, Value* out) {
    const uint64_t at = cur_.pos();
    if (depth > limits_.max_array_depth) {
      return error(
          subject, "array", at,
          text::cat("arrays nested deeper than ", limits_.max_array_depth));
    }
    Array array;
    if (absl::Status s =
            read_value_type(subject, "array element type", &array.element_type);
        !s.ok()) {
      return s;
    }
    const uint64_t count_at = cur_.pos();
    uint64_t count = 0;
    if (absl::Status s = read(subject, "array count", &count); !s.ok()) {
      return s;
    }
    const uint64_t min_size = min_encoded_size(array.element_type);
    if (count > cur_.remaining() / min_size) {
      return error(subject, "array count", count_at,
                   text::cat("count ", count, " of ",
                             value_type_name(array.element_type), " (at least ",
                             min_size, " bytes each) exceeds the ",
                             cur_.remaining(), " bytes that remain"));
    }
    if (count > limits_.max_array_elements) {
      return error(subject, "array count", count_at,
                   text::cat("count ", count, " exceeds the limit of ",
                             limits_.max_array_elements));
    }
    total_array_elements_ += count;
    if (total_array_elements_ > limits_.max_total_array_elements) {
      return error(subject, "array count", count_at,
                   text::cat("the file's arrays hold more than ",
                             limits_.max_total_array_elements,
                             " elements in all (the limit)"));
    }
    array.items.resize(count);
    switch (array.element_type) {
      // Fixed-size elements: the count check above covers all their bytes.
      case ValueType::kUint8:
        fill_fixed<uint8_t>(&array);
        break;
      case ValueType::kInt8:
        fill_fixed<int8_t>(&array);
        break;
      case ValueType::kUint16:
        fill_fixed<uint16_t>(&array);
        break;
      case ValueType::kInt16:
        fill_fixed<int16_t>(&array);
        break;
      case ValueType::kUint32:
        fill_fixed<uint32_t>(&array);
        break;
      case ValueType::kInt32:
        fill_fixed<int32_t>(&array);
        break;
      case ValueType::kFloat32:
        fill_fixed<float>(&array);
        break;
      case ValueType::kUint64:
        fill_fixed<uint64_t>(&array);
        break;
      case ValueType::kInt64:
        fill_fixed<int64_t>(&array);
        break;
      case ValueType::kFloat64:
        fill_fixed<double>(&array);
        break;
      default:  // BOOL (checked per byte), STRING, ARRAY
        for (Value& item : array.items) {
          if (absl::Status s =
                  parse_value(subject, array.element_type, depth, &item);
              !s.ok()) {
            return s;
          }
        }
    }
    out->data = std::move(array);
    return absl::OkStatus();
  }

  // Reads array->items.size() elements of T; the caller checked that their
  // bytes remain.
  template <typename T>
  void fill_fixed(Array* array) {
    for (Value& item : array->items) {
      T value{};
      cur_.read(&value);
      item.type = array->element_type;
      item.data.emplace<T>(value);
    }
  }

  // The well-known key table (gguf_keys.h) and general.alignment's range.
  absl::Status check_known_key(const KeyValue& kv) {
    const Subject subject{"key", kv.key, 0};
    std::optional<KeyRequirement> requirement = key_requirement(kv.key);
    if (!requirement.has_value()) return absl::OkStatus();
    if (!satisfies(kv.value, *requirement)) {
      return error(subject, "", kv.file_offset,
                   text::cat("must be ", describe(*requirement), ", got ",
                             describe_type(kv.value)));
    }
    if (kv.key == kAlignmentKey) {
      const uint32_t alignment = std::get<uint32_t>(kv.value.data);
      if (!is_valid_alignment(alignment)) {
        return error(subject, "", kv.file_offset,
                     text::cat("alignment ", alignment,
                               " is not a nonzero power of two"));
      }
      if (alignment > limits_.max_alignment) {
        return error(
            subject, "", kv.file_offset,
            text::cat("alignment ", alignment, " exceeds the limit of ",
                      limits_.max_alignment));
      }
      file_.alignment_ = alignment;
    }
    return absl::OkStatus();
  }

  // scores and token_type must have one entry per token.
  absl::Status check_token_arrays() const {
    const Value* tokens = file_.find(kTokensKey);
    if (tokens == nullptr) return absl::OkStatus();
    const size_t n_tokens = std::get<Array>(tokens->data).items.size();
    for (std::string_view key : kPerTokenKeys) {
      auto it = file_.kv_index_.find(key);
      if (it == file_.kv_index_.end()) continue;
      const KeyValue& kv = file_.kv_[it->second];
      const size_t n = std::get<Array>(kv.value.data).items.size();
      if (n != n_tokens) {
        return error(Subject{"key", kv.key, 0}, "", kv.file_offset,
                     text::cat("length ", n, " differs from the ", n_tokens,
                               " entries of ", kTokensKey));
      }
    }
    return absl::OkStatus();
  }

  absl::Status check_tensor_count() {
    if (n_tensors_ > cur_.remaining() / kMinTensorInfoBytes) {
      return error(Subject{}, "n_tensors", n_tensors_at_,
                   text::cat(n_tensors_, " tensor infos (at least ",
                             kMinTensorInfoBytes, " bytes each) exceed the ",
                             cur_.remaining(), " bytes that remain"));
    }
    file_.tensors_.reserve(n_tensors_);
    offset_field_at_.reserve(n_tensors_);
    return absl::OkStatus();
  }

  absl::Status parse_tensor_info(uint64_t index) {
    TensorInfo info;
    info.info_offset = cur_.pos();
    Subject subject{"tensor", "", index, false};
    if (absl::Status s = read_string(subject, "name length", &info.name);
        !s.ok()) {
      return s;
    }
    subject.name = info.name;
    subject.named = true;
    if (auto it = file_.tensor_index_.find(info.name);
        it != file_.tensor_index_.end()) {
      return error(subject, "", info.info_offset,
                   text::cat("duplicate tensor name (first at offset ",
                             file_.tensors_[it->second].info_offset, ")"));
    }
    const uint64_t n_dims_at = cur_.pos();
    uint32_t n_dims = 0;
    if (absl::Status s = read(subject, "n_dims", &n_dims); !s.ok()) return s;
    if (n_dims < 1 || n_dims > 4) {
      return error(subject, "n_dims", n_dims_at,
                   text::cat("n_dims ", n_dims, " outside 1..4"));
    }
    const uint64_t ne0_at = cur_.pos();
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const std::string part = text::cat("ne[", d, "]");
      const uint64_t at = cur_.pos();
      uint64_t raw = 0;
      if (absl::Status s = read(subject, part, &raw); !s.ok()) return s;
      if (raw == 0 || raw > static_cast<uint64_t>(INT64_MAX)) {
        return error(subject, part, at,
                     text::cat("extent ", static_cast<int64_t>(raw),
                               raw == 0 ? "" : text::cat(" (", raw, " as u64)"),
                               " is not positive"));
      }
      const int64_t extent = static_cast<int64_t>(raw);
      if (__builtin_mul_overflow(n_elements, extent, &n_elements)) {
        return error(subject, part, at, "product of extents overflows 64 bits");
      }
      info.shape.push_back(extent);
    }
    const uint64_t type_at = cur_.pos();
    uint32_t type_id = 0;
    if (absl::Status s = read(subject, "type", &type_id); !s.ok()) return s;
    const GgmlTypeInfo* type = ggml_type_info(type_id);
    if (type == nullptr) {
      const bool removed =
          std::find(std::begin(kRemovedGgmlTypes), std::end(kRemovedGgmlTypes),
                    type_id) != std::end(kRemovedGgmlTypes);
      return error(subject, "type", type_at,
                   text::cat("unknown ggml type id ", type_id,
                             removed ? " (a removed type)" : ""));
    }
    info.type = type->type;
    if (info.shape[0] % type->block_size != 0) {
      return error(subject, "ne[0]", ne0_at,
                   text::cat("row length ", info.shape[0],
                             " is not a multiple of the block size ",
                             type->block_size, " of ", type->name));
    }
    const uint64_t blocks =
        static_cast<uint64_t>(n_elements / type->block_size);
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(type->type_size),
                               &info.n_bytes)) {
      return error(subject, "type", type_at,
                   text::cat("byte size of ", n_elements, " elements of ",
                             type->name, " overflows 64 bits"));
    }
    info.n_elements = static_cast<uint64_t>(n_elements);
    const uint64_t offset_at = cur_.pos();
    if (absl::Status s = read(subject, "offset", &info.offset); !s.ok()) {
      return s;
    }
    if (info.offset % file_.alignment_ != 0) {
      return error(
          subject, "offset", offset_at,
          text::cat("data offset ", info.offset,
                    " is not a multiple of the alignment ", file_.alignment_));
    }
    file_.tensor_index_.emplace(info.name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(info));
    offset_field_at_.push_back(offset_at);
    return absl::OkStatus();
  }

  // Data section bounds, each tensor inside it, no two tensors overlapping.
  absl::Status place_tensors() {
    const uint64_t alignment = file_.alignment_;
    const uint64_t end_of_infos = cur_.pos();
    // end_of_infos <= size and alignment <= 2^32: no overflow.
    const uint64_t data_offset =
        (end_of_infos + alignment - 1) / alignment * alignment;
    file_.data_offset_ = data_offset;
    // A file without tensors (a vocabulary-only GGUF) may end before the
    // padding; llama.cpp writes such files.
    if (file_.tensors_.empty()) return absl::OkStatus();
    if (data_offset > file_.size_) {
      return error(Subject{}, "data section", data_offset,
                   text::cat("starts beyond the end of the file (", file_.size_,
                             " bytes)"));
    }
    const uint64_t data_bytes = file_.size_ - data_offset;
    std::vector<TensorInfo>& tensors = file_.tensors_;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = tensors[i];
      if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
        return error(Subject{"tensor", t.name, i}, "offset",
                     offset_field_at_[i],
                     text::cat("data [", t.offset, ", +", t.n_bytes,
                               " bytes) runs past the end of the file "
                               "(the data section holds ",
                               data_bytes, " bytes)"));
      }
    }
    std::vector<size_t> order(tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return tensors[a].offset < tensors[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = tensors[order[k - 1]];
      const TensorInfo& cur = tensors[order[k]];
      // Both lie inside the data section, so the sum cannot overflow.
      if (prev.offset + prev.n_bytes > cur.offset) {
        return error(
            Subject{"tensor", cur.name, order[k]}, "offset",
            offset_field_at_[order[k]],
            text::cat("data [", cur.offset, ", ", cur.offset + cur.n_bytes,
                      ") overlaps tensor ", quoted(prev.name), " [",
                      prev.offset, ", ", prev.offset + prev.n_bytes, ")"));
      }
    }
    for (TensorInfo& t : tensors) t.data = file_.base_ + data_offset + t.offset;
    return absl::OkStatus();
  }

  GgufFile& file_;
  const ReaderLimits& limits_;
  Cursor cur_;
  uint64_t n_tensors_ = 0;
  uint64_t n_tensors_at_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t total_array_elements_ = 0;
  std::vector<uint64_t> offset_field_at_;  // per tensor: its offset field
};

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(
    const uint8_t* bytes, size_t size, const ReaderLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->base_ = bytes;
  file->size_ = size;
  file->alignment_ = kDefaultAlignment;
  GgufParser parser(file.get(), limits);
  if (absl::Status s = parser.run(); !s.ok()) return s;
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(
    const std::string& path, const ReaderLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, text::cat("open ", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, text::cat("stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(text::cat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  file->alignment_ = kDefaultAlignment;
  if (file->size_ > 0) {
    void* mapping = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, text::cat("mmap ", path));
    }
    file->mapping_ = mapping;
    file->base_ = static_cast<const uint8_t*>(mapping);
  }
  ::close(fd);  // the mapping keeps the file open
  GgufParser parser(file.get(), limits);
  if (absl::Status s = parser.run(); !s.ok()) {
    return absl::Status(s.code(),
                        text::cat(path, ": ", std::string(s.message())));
  }
  return file;
}

uint64_t GgufFile::release_pages(const uint8_t* data, uint64_t n_bytes) const {
  if (mapping_ == nullptr || data < base_ || n_bytes > size_ ||
      static_cast<uint64_t>(data - base_) > size_ - n_bytes) {
    return 0;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n_bytes) / page * page;
  if (end <= begin) return 0;
  // The mapping is read-only and private: nothing is lost.
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

}  // namespace strata::gguf
