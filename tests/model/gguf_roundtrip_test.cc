// Writer -> reader round trips: every value type, nested arrays, tensors of
// several ggml types and shapes, alignments, v2 and v3, streaming writes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "tests/model/gguf_builder.h"
#include "tests/model/gguf_test_util.h"

namespace strata::gguf {
namespace {

using testing::GgufBuilder;
using testing::TempDir;

std::unique_ptr<GgufFile> parse_ok(const std::vector<uint8_t>& bytes) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(*file) : nullptr;
}

// Deterministic bytes for tensor `index`.
std::vector<uint8_t> pattern(size_t index, size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    bytes[i] = static_cast<uint8_t>(i * 31 + index * 7 + 1);
  }
  return bytes;
}

void expect_same_value(const Value& a, const Value& b) {
  ASSERT_EQ(a.type, b.type);
  ASSERT_EQ(a.data.index(), b.data.index());
  if (const Array* x = std::get_if<Array>(&a.data)) {
    const Array& y = std::get<Array>(b.data);
    ASSERT_EQ(x->element_type, y.element_type);
    ASSERT_EQ(x->items.size(), y.items.size());
    for (size_t i = 0; i < x->items.size(); ++i) {
      expect_same_value(x->items[i], y.items[i]);
    }
  } else {
    EXPECT_TRUE(a.data == b.data);
  }
}

std::vector<Value> every_scalar() {
  return {value_u8(200),
          value_i8(-100),
          value_u16(60000),
          value_i16(-30000),
          value_u32(4000000000u),
          value_i32(-2000000000),
          value_f32(1.5f),
          value_bool(true),
          value_string(std::string("h\xc3\xa9llo\0world", 12)),
          value_u64(std::numeric_limits<uint64_t>::max()),
          value_i64(std::numeric_limits<int64_t>::min()),
          value_f64(-2.25e300)};
}

TEST(GgufRoundTrip, EveryValueType) {
  GgufWriter writer;
  std::vector<Value> values = every_scalar();
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(writer.set_metadata("v." + std::to_string(i), values[i]).ok());
    // And an array of each scalar type.
    ASSERT_TRUE(
        writer
            .set_metadata("a." + std::to_string(i),
                          value_array(values[i].type, {values[i], values[i]}))
            .ok());
  }
  absl::StatusOr<std::vector<uint8_t>> bytes = writer.to_bytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::unique_ptr<GgufFile> file = parse_ok(*bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  ASSERT_EQ(file->metadata().size(), 2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE(i);
    const Value* v = file->find("v." + std::to_string(i));
    ASSERT_NE(v, nullptr);
    expect_same_value(*v, values[i]);
    const Value* a = file->find("a." + std::to_string(i));
    ASSERT_NE(a, nullptr);
    expect_same_value(*a, writer.metadata()[2 * i + 1].value);
  }
  // Metadata keeps file order and records offsets.
  EXPECT_EQ(file->metadata()[0].key, "v.0");
  EXPECT_EQ(file->metadata()[0].file_offset, 24u);
}

TEST(GgufRoundTrip, NestedArrays) {
  Value strings = value_array(
      ValueType::kArray,
      {value_array(ValueType::kString, {value_string("a"), value_string("")}),
       value_array(ValueType::kString, {}),
       value_array(ValueType::kString, {value_string("xyz")})});
  Value deep = value_u8(7);
  for (int depth = 0; depth < 8; ++depth) {
    deep =
        value_array(depth == 0 ? ValueType::kUint8 : ValueType::kArray, {deep});
  }
  Value empty = value_array(ValueType::kArray, {});
  GgufWriter writer;
  ASSERT_TRUE(writer.set_metadata("strings", strings).ok());
  ASSERT_TRUE(writer.set_metadata("deep", deep).ok());
  ASSERT_TRUE(writer.set_metadata("empty", empty).ok());
  auto bytes = writer.to_bytes();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<GgufFile> file = parse_ok(*bytes);
  ASSERT_NE(file, nullptr);
  expect_same_value(*file->find("strings"), strings);
  expect_same_value(*file->find("deep"), deep);
  expect_same_value(*file->find("empty"), empty);

  // Nine levels is one too many for the writer as for the reader.
  EXPECT_EQ(
      writer.set_metadata("deeper", value_array(ValueType::kArray, {deep}))
          .code(),
      absl::StatusCode::kInvalidArgument);
}

struct TensorSpec {
  const char* name;
  GgmlType type;
  std::vector<int64_t> shape;
};

const std::vector<TensorSpec>& tensor_specs() {
  static const std::vector<TensorSpec> specs = {
      {"f32", GgmlType::kF32, {3}},
      {"f16", GgmlType::kF16, {5, 3}},
      {"q4_0", GgmlType::kQ4_0, {64, 3, 2}},
      {"q8_0", GgmlType::kQ8_0, {32, 1, 1, 2}},
      {"q4_k", GgmlType::kQ4_K, {256, 2}},
      {"mxfp4", GgmlType::kMXFP4, {32, 5}},
      {"i8", GgmlType::kI8, {7}},
  };
  return specs;
}

// Writes tensor_specs() (data from pattern()) with `alignment` (0: default).
std::vector<uint8_t> write_tensors(uint32_t alignment) {
  GgufWriter writer;
  if (alignment != 0) {
    EXPECT_TRUE(
        writer.set_metadata("general.alignment", value_u32(alignment)).ok());
  }
  EXPECT_TRUE(
      writer.set_metadata("general.architecture", value_string("test")).ok());
  for (const TensorSpec& spec : tensor_specs()) {
    EXPECT_TRUE(writer.add_tensor(spec.name, spec.type, spec.shape).ok());
  }
  auto bytes = writer.to_bytes(
      [](size_t index, const TensorInfo& info, std::span<uint8_t> out) {
        EXPECT_EQ(out.size(), info.n_bytes);
        std::vector<uint8_t> p = pattern(index, out.size());
        std::copy(p.begin(), p.end(), out.begin());
        return absl::OkStatus();
      });
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

void check_tensors(const GgufFile& file, uint64_t alignment) {
  EXPECT_EQ(file.alignment(), alignment);
  EXPECT_EQ(file.data_offset() % alignment, 0u);
  EXPECT_EQ(file.file_size() % alignment, 0u);  // each tensor padded
  ASSERT_EQ(file.tensors().size(), tensor_specs().size());
  for (size_t i = 0; i < tensor_specs().size(); ++i) {
    const TensorSpec& spec = tensor_specs()[i];
    const TensorInfo& t = file.tensors()[i];
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(t.name, spec.name);
    EXPECT_EQ(t.type, spec.type);
    EXPECT_EQ(t.shape, spec.shape);
    EXPECT_EQ(t.offset % alignment, 0u);
    int64_t n = 1;
    for (int64_t e : spec.shape) n *= e;
    EXPECT_EQ(t.n_elements, static_cast<uint64_t>(n));
    const GgmlTypeInfo& info = ggml_type_info(spec.type);
    EXPECT_EQ(t.n_bytes,
              static_cast<uint64_t>(n / info.block_size * info.type_size));
    std::vector<uint8_t> expected = pattern(i, t.n_bytes);
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), t.data));
    EXPECT_EQ(file.find_tensor(spec.name), &t);
  }
  EXPECT_EQ(file.find_tensor("absent"), nullptr);
}

TEST(GgufRoundTrip, TensorsWithDefaultAlignment) {
  std::vector<uint8_t> bytes = write_tensors(0);
  std::unique_ptr<GgufFile> file = parse_ok(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->find("general.alignment"), nullptr);  // not written
  check_tensors(*file, 32);
}

TEST(GgufRoundTrip, TensorsWithOtherAlignments) {
  for (uint32_t alignment : {1u, 8u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    std::vector<uint8_t> bytes = write_tensors(alignment);
    std::unique_ptr<GgufFile> file = parse_ok(bytes);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(*file->get_u32("general.alignment"), alignment);
    check_tensors(*file, alignment);
  }
}

TEST(GgufRoundTrip, ReadsVersion2) {
  // v2 has v3's layout; only the version differs. Patch a written file...
  std::vector<uint8_t> bytes = write_tensors(0);
  bytes[4] = 2;
  std::unique_ptr<GgufFile> file = parse_ok(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 2u);
  check_tensors(*file, 32);

  // ...and build one by hand.
  GgufBuilder b;
  b.header(1, 2, /*version=*/2)
      .kv_string("general.architecture", "llama")
      .kv_array("tokenizer.ggml.tokens", ValueType::kString, 2)
      .str("<s>")
      .str("a")
      .tensor("w", {4, 2}, GgmlType::kF32, 0)
      .pad(32);
  for (int i = 0; i < 8; ++i) b.f32(static_cast<float>(i));
  auto v2 = GgufFile::parse(b.bytes().data(), b.bytes().size());
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ((*v2)->version(), 2u);
  EXPECT_EQ(*(*v2)->get_string("general.architecture"), "llama");
  const TensorInfo* w = (*v2)->find_tensor("w");
  ASSERT_NE(w, nullptr);
  float last = 0;
  std::memcpy(&last, w->data + 28, 4);
  EXPECT_EQ(last, 7.0f);
}

TEST(GgufRoundTrip, StreamsToFileOneTensorAtATime) {
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  GgufWriter writer;
  ASSERT_TRUE(
      writer.set_metadata("general.architecture", value_string("x")).ok());
  for (const TensorSpec& spec : tensor_specs()) {
    ASSERT_TRUE(writer.add_tensor(spec.name, spec.type, spec.shape).ok());
  }
  std::vector<size_t> calls;
  absl::Status s = writer.write(
      path, [&](size_t index, const TensorInfo& info, std::span<uint8_t> out) {
        calls.push_back(index);
        EXPECT_EQ(info.name, tensor_specs()[index].name);
        EXPECT_EQ(info.data, nullptr);
        std::vector<uint8_t> p = pattern(index, out.size());
        std::copy(p.begin(), p.end(), out.begin());
        return absl::OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  check_tensors(**file, 32);
}

TEST(GgufRoundTrip, FailedFillLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  GgufWriter writer;
  ASSERT_TRUE(writer.add_tensor("a", GgmlType::kF32, {4}).ok());
  ASSERT_TRUE(writer.add_tensor("b", GgmlType::kF32, {4}).ok());
  absl::Status s = writer.write(
      path, [](size_t index, const TensorInfo&, std::span<uint8_t>) {
        return index == 1 ? absl::DataLossError("source went away")
                          : absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// A tensor too big to hold in memory fails the write with an error naming
// it (not an uncaught std::bad_alloc), and leaves no file.
TEST(GgufRoundTrip, TensorTooBigForMemoryIsAnError) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan aborts on an allocation this size instead of throwing";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "ASan aborts on an allocation this size instead of throwing";
#endif
#endif
  TempDir dir;
  const std::string path = dir.file("model.gguf");
  GgufWriter writer;
  ASSERT_TRUE(writer
                  .add_tensor("huge", GgmlType::kF32,
                              {int64_t{1} << 40, int64_t{1} << 20})
                  .ok());
  absl::Status s =
      writer.write(path, [](size_t, const TensorInfo&, std::span<uint8_t>) {
        return absl::OkStatus();
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("'huge'"), std::string::npos) << s;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(GgufRoundTrip, TensorsWithOwnedData) {
  GgufWriter writer;
  std::vector<uint8_t> data = pattern(0, 16);
  ASSERT_TRUE(writer.add_tensor("a", GgmlType::kF32, {4}, data).ok());
  EXPECT_EQ(writer.add_tensor("b", GgmlType::kF32, {4}, pattern(0, 15)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer.add_tensor("c", GgmlType::kF32, {2}).ok());
  // "c" has no data: without a callback the write is refused.
  EXPECT_EQ(writer.to_bytes().status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto bytes = writer.to_bytes(
      [](size_t index, const TensorInfo&, std::span<uint8_t> out) {
        EXPECT_EQ(index, 1u);  // only the tensor without data
        std::fill(out.begin(), out.end(), 0xAB);
        return absl::OkStatus();
      });
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::unique_ptr<GgufFile> file = parse_ok(*bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), file->tensors()[0].data));
  EXPECT_EQ(file->tensors()[1].data[7], 0xAB);
}

TEST(GgufWriter, ReplacesAndRemovesMetadata) {
  GgufWriter writer;
  ASSERT_TRUE(writer.set_metadata("a", value_u32(1)).ok());
  ASSERT_TRUE(writer.set_metadata("b", value_u32(2)).ok());
  ASSERT_TRUE(writer.set_metadata("a", value_string("one")).ok());
  ASSERT_EQ(writer.metadata().size(), 2u);
  EXPECT_EQ(writer.metadata()[0].key, "a");  // replaced in place
  EXPECT_EQ(std::get<std::string>(writer.metadata()[0].value.data), "one");
  EXPECT_TRUE(writer.remove_metadata("b").ok());
  EXPECT_EQ(writer.remove_metadata("b").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(writer.set_metadata("general.alignment", value_u32(64)).ok());
  EXPECT_EQ(writer.alignment(), 64u);
  ASSERT_TRUE(writer.remove_metadata("general.alignment").ok());
  EXPECT_EQ(writer.alignment(), 32u);
}

TEST(GgufWriter, RejectsWhatTheReaderWouldRefuse) {
  GgufWriter writer;
  auto invalid = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid(writer.set_metadata("general.alignment", value_u32(48))));
  EXPECT_TRUE(invalid(writer.set_metadata("general.alignment", value_u32(0))));
  EXPECT_TRUE(invalid(writer.set_metadata("general.alignment", value_u64(32))));
  EXPECT_TRUE(
      invalid(writer.set_metadata("general.architecture", value_u32(1))));
  EXPECT_TRUE(invalid(
      writer.set_metadata("tokenizer.ggml.tokens",
                          value_array(ValueType::kInt32, {value_i32(1)}))));
  // An item whose type differs from the array's element type.
  EXPECT_TRUE(invalid(writer.set_metadata(
      "x", value_array(ValueType::kUint8, {value_u16(1)}))));
  // A value whose alternative differs from its type.
  Value lying = value_u8(1);
  lying.type = ValueType::kUint32;
  EXPECT_TRUE(invalid(writer.set_metadata("x", lying)));

  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kQ4_0, {33})));
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32, {})));
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32, {1, 1, 1, 1, 1})));
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32, {4, 0})));
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32, {-4})));
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32,
                                        {int64_t{1} << 32, int64_t{1} << 32})));
  EXPECT_TRUE(
      invalid(writer.add_tensor("t", GgmlType::kF64, {int64_t{1} << 62})));
  ASSERT_TRUE(writer.add_tensor("t", GgmlType::kF32, {4}).ok());
  EXPECT_TRUE(invalid(writer.add_tensor("t", GgmlType::kF32, {4})));

  // Per-token arrays of another length are refused when writing.
  GgufWriter vocab;
  ASSERT_TRUE(
      vocab
          .set_metadata("tokenizer.ggml.tokens",
                        value_array(ValueType::kString,
                                    {value_string("a"), value_string("b")}))
          .ok());
  ASSERT_TRUE(
      vocab
          .set_metadata("tokenizer.ggml.scores",
                        value_array(ValueType::kFloat32, {value_f32(0)}))
          .ok());
  EXPECT_TRUE(invalid(vocab.to_bytes().status()));
}

TEST(GgufFileGetters, ConvertIntegersAndReportTypes) {
  GgufWriter writer;
  ASSERT_TRUE(writer.set_metadata("u8", value_u8(7)).ok());
  ASSERT_TRUE(writer.set_metadata("neg", value_i32(-1)).ok());
  ASSERT_TRUE(writer.set_metadata("big", value_u64(uint64_t{1} << 40)).ok());
  ASSERT_TRUE(writer.set_metadata("f64", value_f64(0.25)).ok());
  ASSERT_TRUE(writer.set_metadata("s", value_string("text")).ok());
  ASSERT_TRUE(writer.set_metadata("b", value_bool(true)).ok());
  ASSERT_TRUE(
      writer.set_metadata("arr", value_array(ValueType::kInt32, {value_i32(1)}))
          .ok());
  auto bytes = writer.to_bytes();
  ASSERT_TRUE(bytes.ok());
  std::unique_ptr<GgufFile> file = parse_ok(*bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(*file->get_u32("u8"), 7u);
  EXPECT_EQ(*file->get_u64("big"), uint64_t{1} << 40);
  EXPECT_EQ(file->get_u32("big").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->get_u32("neg").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->get_u32("s").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->get_u32("absent").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*file->get_f32("f64"), 0.25f);
  EXPECT_EQ(*file->get_string("s"), "text");
  EXPECT_NE(file->get_string("u8").status().message().find("'u8'"),
            absl::string_view::npos);
  EXPECT_TRUE(*file->get_bool("b"));
  absl::StatusOr<const Array*> arr = file->get_array("arr", ValueType::kInt32);
  ASSERT_TRUE(arr.ok());
  EXPECT_EQ((*arr)->items.size(), 1u);
  EXPECT_FALSE(file->get_array("arr", ValueType::kUint32).ok());
  EXPECT_NE(file->find_entry("s"), nullptr);
}

}  // namespace
}  // namespace strata::gguf

namespace strata::gguf {
namespace {

TEST(GgufFileOpen, ReportsMissingEmptyAndNonRegularFiles) {
  testing::TempDir dir;
  auto missing = GgufFile::open(dir.file("absent.gguf"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound)
      << missing.status();

  const std::string empty = dir.file("empty.gguf");
  std::fclose(std::fopen(empty.c_str(), "wb"));
  auto file = GgufFile::open(empty);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(file.status().message()),
            empty + ": magic at offset 0: truncated: needs 4 bytes, 0 remain");

  auto folder = GgufFile::open(dir.path().string());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument)
      << folder.status();
}

// write_sparse writes what write() writes with zero-filled tensors, without
// writing the data: the same bytes, the data section a hole.
TEST(GgufWriterSparse, SameBytesAsZeroFilledDataAndNoDataBlocks) {
  GgufWriter writer;
  ASSERT_TRUE(
      writer.set_metadata("general.architecture", value_string("llama")).ok());
  ASSERT_TRUE(writer.add_tensor("a", GgmlType::kQ4_K, {512, 300}).ok());
  ASSERT_TRUE(writer.add_tensor("b", GgmlType::kF32, {7}).ok());
  ASSERT_TRUE(writer.add_tensor("c", GgmlType::kQ8_0, {4096, 1024}).ok());
  const std::filesystem::path dir = ::testing::TempDir();
  const std::string full = (dir / "full.gguf").string();
  const std::string sparse = (dir / "sparse.gguf").string();
  ASSERT_TRUE(writer
                  .write(full,
                         [](size_t, const TensorInfo&, std::span<uint8_t> out) {
                           std::fill(out.begin(), out.end(), uint8_t{0});
                           return absl::OkStatus();
                         })
                  .ok());
  ASSERT_TRUE(writer.write_sparse(sparse).ok());
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  const std::vector<char> a = read(full), b = read(sparse);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b);
  struct stat st {};
  ASSERT_EQ(::stat(sparse.c_str(), &st), 0);
  // 4.3 MB of data; the header is a few hundred bytes: at most a few
  // blocks on disk (a filesystem without holes would hold them all).
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{1} << 20)
      << "the data section was written, not left a hole";
  std::unique_ptr<GgufFile> file =
      parse_ok(std::vector<uint8_t>(b.begin(), b.end()));
  ASSERT_NE(file, nullptr);
  ASSERT_NE(file->find_tensor("c"), nullptr);
  EXPECT_FALSE(std::filesystem::exists(sparse + ".tmp"));
}

}  // namespace
}  // namespace strata::gguf
