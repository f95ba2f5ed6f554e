// GGUF reader: parses a GGUF file (versions 2 and 3), validates every field
// before use and maps the tensor data read-only.
//
// Format (GGUF spec, ggml/docs/gguf.md in llama.cpp; all little-endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv   x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type
//                 | u64 offset (relative to the data section) }
//   padding to general.alignment (default 32) | tensor data
//   string = u64 length + bytes (no terminator)
//   array  = u32 element_type + u64 count + elements (arrays may nest)
// Version 1 (u32 lengths and counts) is refused.
//
// Split models (gguf-split: NAME-00001-of-0000N.gguf) carry split.no,
// split.count and split.tensors.count; GgufModel::open() opens every part
// and presents one tensor list whose entries point into their own part;
// GgufModel::open_shard() opens only the parts one shard needs, and works
// when the others are absent from the disk.
//
// Every rejection is an absl::InvalidArgumentError (or NotFound / an I/O error
// for a file that cannot be opened) whose message names the field, its byte
// offset in the file and the rule, "[PATH: ]FIELD at offset N: RULE", e.g.
//   "tensor 'blk.3.attn_q.weight' offset at offset 1234: data offset 77 is
//    not a multiple of the alignment 32"
// Well-known keys (model/gguf_keys.h) must hold their documented types.
// Lengths are checked against the bytes that remain before anything is
// allocated, so a hostile file costs milliseconds and bounded memory.
// docs/gguf.md lists what is accepted and every rejection rule.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<GgufModel>> model = GgufModel::open(path);
//   if (!model.ok()) return model.status();
//   absl::StatusOr<std::string> arch =
//       (*model)->first().get_string("general.architecture");
//   const TensorInfo* emb = (*model)->find_tensor("token_embd.weight");
//
// Ownership: a GgufFile owns its mapping; TensorInfo::data points into it and
// lives as long as the GgufFile. A GgufFile is immutable after open: any
// thread may read it concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "model/ggml_type.h"

namespace strata::gguf {

// GGUF metadata value types (gguf.md, enum gguf_type).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "UINT8", "STRING", "ARRAY", ... as in the spec; "?" for an invalid value.
std::string_view value_type_name(ValueType type);

struct Value;

// A metadata array. Elements are stored as Values of `element_type`; nested
// arrays are Values holding an Array.
struct Array {
  ValueType element_type = ValueType::kUint8;
  std::vector<Value> items;

  // Element-wise; NaN floats compare unequal, as in C++.
  bool operator==(const Array& other) const = default;
};

// One metadata value. The alternative held always matches `type`.
struct Value {
  ValueType type = ValueType::kUint8;
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
               bool, std::string, uint64_t, int64_t, double, Array>
      data;

  bool operator==(const Value& other) const = default;
};

struct KeyValue {
  std::string key;
  Value value;
  uint64_t file_offset = 0;  // byte offset of the key's length field
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // ne0 first (ne0 = elements per row), 1..4 dims
  uint64_t offset = 0;         // bytes, relative to the data section
  uint64_t n_bytes = 0;        // bytes of the data
  uint64_t n_elements = 0;
  const uint8_t* data = nullptr;  // into the mapping; n_bytes long
  uint32_t split_index = 0;       // which part of a split model holds it
                                  // (0-based, as split.no)
  uint64_t info_offset = 0;       // byte offset of its info (name length)
};

// Limits that bound a parse. Defaults admit any real model (the largest
// published GGUFs have ~2k tensors per part, vocabularies ~260k tokens).
struct ReaderLimits {
  uint64_t max_tensors = 1u << 20;
  uint64_t max_kv = 1u << 16;
  uint64_t max_string_bytes = 1u << 26;    // one string or key
  uint64_t max_array_elements = 1u << 26;  // one array
  uint32_t max_array_depth = 8;            // arrays of arrays of ...
  uint64_t max_alignment = 1u << 16;       // general.alignment
  // All array elements of the file together (nested ones included): bounds
  // the memory of decoded metadata (about 48 bytes per element).
  uint64_t max_total_array_elements = 1u << 23;
};

class GgufFile {
 public:
  // Opens and validates one GGUF file and maps it read-only (the whole file;
  // metadata is decoded from the mapping, tensor data stays in it). Errors:
  // NotFound / other errno codes when the file cannot be opened or mapped,
  // InvalidArgument "PATH: FIELD at offset N: RULE" for a malformed file.
  static absl::StatusOr<std::unique_ptr<GgufFile>> open(
      const std::string& path, const ReaderLimits& limits = {});

  // Parses a GGUF image held in memory (the fuzzer and tests use this). The
  // bytes must outlive the returned object; nothing is copied.
  static absl::StatusOr<std::unique_ptr<GgufFile>> parse(
      const uint8_t* bytes, size_t size, const ReaderLimits& limits = {});

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of the data section, bytes from the start of the file. A file
  // without tensors may end before it (vocabulary-only GGUFs do).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order, and lookup by key (nullptr when absent).
  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // The whole entry (with its offset), nullptr when absent.
  const KeyValue* find_entry(std::string_view key) const;

  // Tensors in file order, and lookup by name (nullptr when absent).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Drops this process's page-table entries for the whole pages inside
  // [data, data + n_bytes) when that range lies in this file's mapping
  // (madvise MADV_DONTNEED on a read-only private file mapping: the bytes
  // are unchanged, a later read faults them in again from the page cache).
  // For a caller that has copied tensor data elsewhere (packed weights) and
  // will not read it again, so the process's resident set holds it once.
  // Returns the bytes released: 0 for a range outside the mapping or a
  // file from parse(). Partial pages at either end are kept (a neighbouring
  // tensor may share them).
  uint64_t release_pages(const uint8_t* data, uint64_t n_bytes) const;

  // Typed getters: NotFound when absent, InvalidArgument naming the key when
  // the stored type differs (or the value is out of the result's range).
  absl::StatusOr<std::string> get_string(std::string_view key) const;
  // UINT32, or any other integer type whose value fits.
  absl::StatusOr<uint32_t> get_u32(std::string_view key) const;
  // UINT64, or any other integer type whose value is not negative.
  absl::StatusOr<uint64_t> get_u64(std::string_view key) const;
  // FLOAT32, or FLOAT64 rounded to float.
  absl::StatusOr<float> get_f32(std::string_view key) const;
  absl::StatusOr<bool> get_bool(std::string_view key) const;
  // An ARRAY whose elements are `element_type`; points into this object.
  absl::StatusOr<const Array*> get_array(std::string_view key,
                                         ValueType element_type) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t size_ = 0;
  const uint8_t* base_ = nullptr;  // size_ bytes: the mapping or the buffer
  void* mapping_ = nullptr;        // owned mmap of size_ bytes, or nullptr
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// True when the file name of `path` is llama.cpp's name of a part of a
// split model, NAME-0000i-of-0000N.gguf with N > 1 (gguf-split's naming):
// GgufModel::open then expects the split.* keys and the other N - 1 parts.
bool is_split_part_name(std::string_view path);

// Which tensors a caller will read (GgufModel::open_shard): true for a name
// whose data it needs.
using TensorFilter = std::function<bool(std::string_view name)>;

// A model that may be split across files. For a single file it is that file.
// Owns its parts; the TensorInfo::data pointers of tensors() point into them
// and live as long as the GgufModel. Immutable after open: any thread may
// read it concurrently.
class GgufModel {
 public:
  // Opens `path`; when it names a part "NAME-0000i-of-0000N.gguf" (or carries
  // split.count > 1) every part is opened from the same directory and
  // checked: split.no equals the part's index (0-based: part 00001 has
  // split.no 0, as gguf-split writes it), split.count agrees with the file
  // name in every part, split.tensors.count (required in the first part)
  // equals the sum of the parts' tensors, no tensor name repeats across
  // parts. Any part may be named; parts_[0] is always the first. Errors:
  // NotFound naming a missing part, InvalidArgument for a disagreement.
  static absl::StatusOr<std::unique_ptr<GgufModel>> open(
      const std::string& path, const ReaderLimits& limits = {});

  // Opens what one shard of the model needs (a worker's LoadShard): the
  // first part (the model's metadata; NotFound when absent) and every other
  // part present in the directory, checked as open() checks them. A part
  // absent from the disk is allowed (an operator copies only the parts a
  // machine needs) and listed in absent_parts(); its tensors are not in
  // tensors(), and split.tensors.count is then not checked. A part present
  // that holds no tensor `wanted` accepts is unmapped after its header is
  // read: its tensors stay in tensors() (names, shapes, sizes) with
  // data == nullptr and parts()[i] == nullptr. The first part stays mapped.
  // A tensor the caller needs that is in no part present: missing_tensor().
  // For a model of one file it is open().
  static absl::StatusOr<std::unique_ptr<GgufModel>> open_shard(
      const std::string& path, const TensorFilter& wanted,
      const ReaderLimits& limits = {});

  // Metadata of the first part (the one that carries the model's keys).
  const GgufFile& first() const { return *parts_.front(); }
  // One entry per part, parts()[0] the first; an entry is nullptr only in a
  // model from open_shard(), for a part absent or not mapped.
  const std::vector<std::unique_ptr<GgufFile>>& parts() const { return parts_; }
  // Paths of the parts open_shard() found absent (1-based part i of
  // parts().size() is "NAME-0000i-of-0000N.gguf"); empty after open().
  const std::vector<std::string>& absent_parts() const { return absent_; }
  // All tensors of all parts in order; TensorInfo::split_index says which.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // The error for a tensor `name` the caller needs and find_tensor() does
  // not have: NotFound naming the tensor and the absent parts when parts are
  // absent ("blk.3.attn_q.weight: in none of the parts on this disk; absent:
  // PATH (part 2 of 3)"), else InvalidArgument "NAME: missing".
  absl::Status missing_tensor(std::string_view name) const;

  // GgufFile::release_pages on the part whose mapping holds the range.
  uint64_t release_pages(const uint8_t* data, uint64_t n_bytes) const;

 private:
  static absl::StatusOr<std::unique_ptr<GgufModel>> open_parts(
      const std::string& path, const ReaderLimits& limits,
      const TensorFilter* wanted);
  // Unmaps the parts after the first that hold no tensor `wanted` accepts.
  void unmap_unwanted(const TensorFilter& wanted);

  std::vector<std::unique_ptr<GgufFile>> parts_;
  std::vector<std::string> absent_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace strata::gguf
