// GGUF writer: writes GGUF version 3 files (layout in model/gguf_reader.h,
// source: ggml/docs/gguf.md in llama.cpp) from metadata Values and tensors.
//
// Tensor data streams: the writer is given each tensor's name, type and
// shape first, then write() asks a callback for the bytes of one tensor at a
// time, in the order the tensors were added, into a buffer the writer owns
// and reuses. At most one tensor's bytes are held in memory, so a model
// larger than RAM can be written (e.g. `strata quantize`, which copies the
// metadata of an input GgufFile and requantizes its tensors one by one).
//
// Layout written: header, metadata in the order set, tensor infos in the
// order added, zero padding to the alignment, then each tensor's data at an
// aligned offset followed by zero padding to the alignment (as llama.cpp's
// gguf writer does). The alignment is 32 unless `general.alignment` (UINT32,
// a nonzero power of two) is set; the key is written only when set.
//
// What the writer writes the reader accepts: shapes, types and well-known
// keys (model/gguf_keys.h) are checked with the reader's rules when added.
//
// Usage (every call returns a Status to check):
//   GgufWriter writer;
//   writer.set_metadata("general.architecture", value_string("llama"));
//   writer.add_tensor("output.weight", GgmlType::kQ8_0, {576, 49152});
//   absl::Status s = writer.write(path, [&](size_t index,
//                                           const TensorInfo& info,
//                                           std::span<uint8_t> out) {
//     // fill out (info.n_bytes bytes) with tensor `index`
//     return absl::OkStatus();
//   });
//
// Thread-safety: a GgufWriter is not synchronized; use it from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata::gguf {

// Value constructors (the alternative always matches the type).
Value value_u8(uint8_t v);
Value value_i8(int8_t v);
Value value_u16(uint16_t v);
Value value_i16(int16_t v);
Value value_u32(uint32_t v);
Value value_i32(int32_t v);
Value value_f32(float v);
Value value_bool(bool v);
Value value_string(std::string v);
Value value_u64(uint64_t v);
Value value_i64(int64_t v);
Value value_f64(double v);
// An ARRAY of `element_type`; every item must be of that type (checked when
// the value is set on a writer).
Value value_array(ValueType element_type, std::vector<Value> items);

class GgufWriter {
 public:
  // Fills `out` (exactly info.n_bytes bytes; its contents on entry are
  // unspecified) with the data of tensor `index` (0-based, in add order). A
  // non-OK status aborts the write and is returned by write()/to_bytes().
  // info.data is nullptr; info.offset is the tensor's offset in the data
  // section.
  using FillFn = std::function<absl::Status(
      size_t index, const TensorInfo& info, std::span<uint8_t> out)>;

  GgufWriter() = default;

  // Sets metadata `key` to `value`: replaces an existing key in place or
  // appends a new one. InvalidArgument when the value is malformed (an
  // alternative that differs from its type, array items of another type,
  // arrays nested deeper than ReaderLimits' default), when a well-known
  // key gets the wrong type, or when general.alignment is not a nonzero
  // power of two.
  absl::Status set_metadata(std::string key, Value value);

  // Removes `key`; NotFound when absent.
  absl::Status remove_metadata(std::string_view key);

  // Metadata in write order.
  const std::vector<KeyValue>& metadata() const { return kv_; }

  // Adds a tensor whose bytes the FillFn supplies. `shape` is ne0 first
  // (1..4 positive extents, ne0 a multiple of the type's block size).
  // InvalidArgument on a bad shape, an overflowing size or a duplicate name.
  absl::Status add_tensor(std::string name, GgmlType type,
                          std::vector<int64_t> shape);

  // Adds a tensor with its bytes copied into the writer (small tensors,
  // tests). InvalidArgument as above or when data.size() differs from the
  // tensor's byte size.
  absl::Status add_tensor(std::string name, GgmlType type,
                          std::vector<int64_t> shape,
                          std::span<const uint8_t> data);

  // Tensors in write order, with n_bytes, n_elements and offset (relative to
  // the data section, for the current alignment) filled in; data is null.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // The alignment that will be used (32 or general.alignment).
  uint64_t alignment() const { return alignment_; }

  // Writes the file to `path` (through "PATH.tmp", renamed on success, so a
  // failed write leaves no partial file at `path`). `fill` is called once
  // per tensor added without data, in order; it may be empty when every
  // tensor carries its data (FailedPrecondition otherwise). I/O failures
  // come back with their errno code; InvalidArgument when
  // tokenizer.ggml.scores / token_type differ in length from
  // tokenizer.ggml.tokens.
  absl::Status write(const std::string& path, const FillFn& fill = {}) const;

  // Writes the header, metadata and tensor infos as write() does, then
  // extends the file to the size its tensors' data would take without
  // writing the data: a sparse ("header-only") file whose data section is a
  // hole of zeros taking no disk blocks. Readers accept it (sizes and
  // offsets agree); for planning and placement on models whose weights are
  // not needed (`strata synth --sparse`). Errors as write().
  absl::Status write_sparse(const std::string& path) const;
  // The same bytes in memory (tests, fuzz seeds).
  absl::StatusOr<std::vector<uint8_t>> to_bytes(const FillFn& fill = {}) const;

 private:
  // Receives the file's bytes in order.
  using Emit = std::function<absl::Status(const uint8_t* bytes, size_t n)>;
  absl::Status write_to(const Emit& emit, const FillFn& fill) const;
  // Header, metadata, tensor infos and the padding to the data section.
  absl::StatusOr<std::vector<uint8_t>> head_bytes() const;
  absl::Status add_tensor_impl(std::string name, GgmlType type,
                               std::vector<int64_t> shape,
                               std::vector<uint8_t> data, bool has_data);
  void assign_offsets();

  std::vector<KeyValue> kv_;  // file_offset unused (0)
  std::vector<TensorInfo> tensors_;
  std::vector<std::vector<uint8_t>> owned_data_;  // per tensor; may be empty
  std::vector<bool> has_data_;                    // per tensor
  uint64_t alignment_ = 32;
};

}  // namespace strata::gguf
