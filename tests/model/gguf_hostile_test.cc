// One hostile file per rejection rule of the GGUF reader (docs/gguf.md):
// each must be refused with InvalidArgument, naming the rule and the byte
// offset of the offending field.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>

#include "model/gguf_reader.h"
#include "tests/model/gguf_builder.h"
#include "tests/model/gguf_test_util.h"

namespace strata::gguf {
namespace {

using testing::expect_rejected;
using testing::GgufBuilder;

constexpr uint64_t kHeaderSize = 24;

// A file with one F32 tensor of `n` elements at data offset 0, alignment 32.
GgufBuilder one_tensor_file(uint64_t n = 8) {
  GgufBuilder b;
  b.header(1, 0).tensor("t", {n}, GgmlType::kF32, 0).pad(32).zeros(n * 4);
  return b;
}

TEST(GgufReader, AcceptsMinimalFiles) {
  GgufBuilder empty;
  empty.header(0, 0);
  auto file = GgufFile::parse(empty.bytes().data(), empty.bytes().size());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 0u);

  GgufBuilder one = one_tensor_file();
  file = GgufFile::parse(one.bytes().data(), one.bytes().size());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().at(0).n_bytes, 32u);
}

TEST(GgufReader, RejectsBadMagic) {
  GgufBuilder b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  expect_rejected(b.bytes(), "bad magic", 0);
}

TEST(GgufReader, RejectsTruncatedHeader) {
  GgufBuilder b;
  b.raw("GGUF").u32(3).u32(0);  // n_tensors cut short
  expect_rejected(b.bytes(), "n_tensors at offset 8: truncated", 8);
  GgufBuilder tiny;
  tiny.raw("GG");
  expect_rejected(tiny.bytes(), "magic at offset 0: truncated", 0);
  expect_rejected({}, "truncated", 0);
}

TEST(GgufReader, RejectsVersion1) {
  GgufBuilder b;
  b.header(0, 0, /*version=*/1);
  expect_rejected(b.bytes(), "version 1 is not supported", 4);
}

TEST(GgufReader, RejectsUnknownVersion) {
  GgufBuilder b;
  b.header(0, 0, /*version=*/4);
  expect_rejected(b.bytes(), "unsupported GGUF version 4", 4);
  GgufBuilder big_endian;
  big_endian.header(0, 0, /*version=*/0x03000000);
  expect_rejected(big_endian.bytes(), "big-endian", 4);
}

TEST(GgufReader, RejectsKeyLengthBeyondRemainingBytes) {
  GgufBuilder b;
  b.header(0, 1);
  const uint64_t at = b.pos();
  b.u64(1000).raw("abc").zeros(20);
  expect_rejected(b.bytes(), "length 1000 exceeds the 23 bytes that remain",
                  at);
}

TEST(GgufReader, RejectsMaximalLengthWithoutOverflow) {
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kString);
  const uint64_t at = b.pos();
  b.u64(std::numeric_limits<uint64_t>::max()).zeros(8);
  expect_rejected(b.bytes(), "bytes that remain", at);
}

TEST(GgufReader, RejectsStringValueLengthBeyondRemainingBytes) {
  GgufBuilder b;
  b.header(0, 1).key("general.name", ValueType::kString);
  const uint64_t at = b.pos();
  b.u64(17).raw("short");
  expect_rejected(b.bytes(), "string length at offset", at);
  expect_rejected(b.bytes(), "length 17 exceeds the 5 bytes that remain", at);
}

TEST(GgufReader, RejectsStringLongerThanLimit) {
  ReaderLimits limits;
  limits.max_string_bytes = 4;
  GgufBuilder b;
  b.header(0, 1);
  const uint64_t at = b.pos();
  b.str("longkey").u32(4).u32(0);
  expect_rejected(b.bytes(), "length 7 exceeds the limit of 4", at, limits);
}

TEST(GgufReader, RejectsHugeArrayBeforeAllocating) {
  // 2^40 UINT8 elements claimed in a file of about 1 KB.
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kArray).u32(0);
  const uint64_t at = b.pos();
  b.u64(uint64_t{1} << 40).zeros(1000);
  const auto start = std::chrono::steady_clock::now();
  expect_rejected(b.bytes(), "count 1099511627776 of UINT8", at);
  expect_rejected(b.bytes(), "exceeds the 1000 bytes that remain", at);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(GgufReader, RejectsArrayOfStringsBeyondRemainingBytes) {
  // Each string needs at least its 8-byte length: 200 cannot fit in 1000.
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kArray).u32(8);
  const uint64_t at = b.pos();
  b.u64(200).zeros(1000);
  expect_rejected(b.bytes(), "(at least 8 bytes each) exceeds the 1000 bytes",
                  at);
}

TEST(GgufReader, RejectsArrayCountBeyondLimit) {
  ReaderLimits limits;
  limits.max_array_elements = 3;
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kArray).u32(0);
  const uint64_t at = b.pos();
  b.u64(4).raw("abcd");
  expect_rejected(b.bytes(), "count 4 exceeds the limit of 3", at, limits);
}

TEST(GgufReader, RejectsTooManyArrayElementsInAll) {
  ReaderLimits limits;
  limits.max_total_array_elements = 5;
  GgufBuilder b;
  b.header(0, 2).kv_array("a", ValueType::kUint8, 3).raw("abc");
  b.key("b", ValueType::kArray).u32(0);
  const uint64_t at = b.pos();
  b.u64(3).raw("abc");
  expect_rejected(b.bytes(), "elements in all", at, limits);
}

TEST(GgufReader, RejectsTensorNameLengthBeyondRemainingBytes) {
  GgufBuilder b;
  b.header(1, 0);
  const uint64_t at = b.pos();
  b.u64(99).raw("blk.0").zeros(30);
  expect_rejected(b.bytes(), "tensor #0 name length", at);
  expect_rejected(b.bytes(), "length 99 exceeds the 35 bytes that remain", at);
}

TEST(GgufReader, RejectsTensorCountBeyondLimit) {
  ReaderLimits limits;
  limits.max_tensors = 2;
  GgufBuilder b;
  b.header(3, 0).zeros(200);
  expect_rejected(b.bytes(), "3 tensors exceed the limit of 2", 8, limits);
  GgufBuilder huge;
  huge.header(uint64_t{1} << 60, 0);
  expect_rejected(huge.bytes(), "exceed the limit of", 8);
}

TEST(GgufReader, RejectsTensorCountBeyondRemainingBytes) {
  GgufBuilder b;
  b.header(1000, 0).zeros(100);
  expect_rejected(b.bytes(),
                  "1000 tensor infos (at least 32 bytes each) "
                  "exceed the 100 bytes that remain",
                  8);
}

TEST(GgufReader, RejectsKvCountBeyondLimit) {
  ReaderLimits limits;
  limits.max_kv = 1;
  GgufBuilder b;
  b.header(0, 2).kv_u32("a", 1).kv_u32("b", 2);
  expect_rejected(b.bytes(), "2 key-value pairs exceed the limit of 1", 16,
                  limits);
}

TEST(GgufReader, RejectsKvCountBeyondRemainingBytes) {
  GgufBuilder b;
  b.header(0, 100).kv_u32("a", 1);
  expect_rejected(b.bytes(),
                  "100 key-value pairs (at least 13 bytes each) "
                  "exceed the 17 bytes that remain",
                  16);
}

TEST(GgufReader, RejectsZeroDims) {
  GgufBuilder b;
  b.header(1, 0).str("t");
  const uint64_t at = b.pos();
  b.u32(0).u32(0).u64(0).zeros(64);
  expect_rejected(b.bytes(), "n_dims 0 outside 1..4", at);
}

TEST(GgufReader, RejectsFiveDims) {
  GgufBuilder b;
  b.header(1, 0);
  const uint64_t at = kHeaderSize + 8 + 1;
  b.tensor("t", {1, 1, 1, 1, 1}, GgmlType::kF32, 0).pad(32).zeros(32);
  expect_rejected(b.bytes(), "tensor 't' n_dims at offset", at);
  expect_rejected(b.bytes(), "n_dims 5 outside 1..4", at);
}

TEST(GgufReader, RejectsZeroExtent) {
  GgufBuilder b;
  b.header(1, 0).tensor("t", {4, 0}, GgmlType::kF32, 0).pad(32).zeros(32);
  const uint64_t ne1_at = kHeaderSize + 8 + 1 + 4 + 8;
  expect_rejected(b.bytes(), "tensor 't' ne[1]", ne1_at);
  expect_rejected(b.bytes(), "extent 0 is not positive", ne1_at);
}

TEST(GgufReader, RejectsNegativeExtent) {
  GgufBuilder b;
  b.header(1, 0)
      .tensor("t", {uint64_t(-4)}, GgmlType::kF32, 0)
      .pad(32)
      .zeros(32);
  const uint64_t ne0_at = kHeaderSize + 8 + 1 + 4;
  expect_rejected(b.bytes(),
                  "extent -4 (18446744073709551612 as u64) is "
                  "not positive",
                  ne0_at);
}

TEST(GgufReader, RejectsExtentAboveInt64Max) {
  GgufBuilder b;
  b.header(1, 0)
      .tensor("t", {uint64_t{1} << 63}, GgmlType::kF32, 0)
      .pad(32)
      .zeros(32);
  expect_rejected(b.bytes(), "is not positive", kHeaderSize + 8 + 1 + 4);
}

TEST(GgufReader, RejectsOverflowingExtents) {
  GgufBuilder b;
  b.header(1, 0)
      .tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, GgmlType::kF32, 0)
      .pad(32)
      .zeros(32);
  const uint64_t ne1_at = kHeaderSize + 8 + 1 + 4 + 8;
  expect_rejected(b.bytes(), "product of extents overflows 64 bits", ne1_at);
}

TEST(GgufReader, RejectsOverflowingByteSize) {
  // 2^62 F64 elements: 2^65 bytes.
  GgufBuilder b;
  b.header(1, 0)
      .tensor("t", {uint64_t{1} << 62}, GgmlType::kF64, 0)
      .pad(32)
      .zeros(32);
  const uint64_t type_at = kHeaderSize + 8 + 1 + 4 + 8;
  expect_rejected(b.bytes(), "tensor 't' type", type_at);
  expect_rejected(b.bytes(), "overflows 64 bits", type_at);
}

TEST(GgufReader, RejectsUnknownValueType) {
  GgufBuilder b;
  b.header(0, 1).str("k");
  const uint64_t at = b.pos();
  b.u32(13).u32(0);
  expect_rejected(b.bytes(), "key 'k' value type at offset", at);
  expect_rejected(b.bytes(), "unknown value type 13", at);
}

TEST(GgufReader, RejectsUnknownArrayElementType) {
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kArray);
  const uint64_t at = b.pos();
  b.u32(0xFFFFFFFF).u64(0);
  expect_rejected(b.bytes(), "array element type", at);
  expect_rejected(b.bytes(), "unknown value type 4294967295", at);
}

TEST(GgufReader, RejectsUnknownGgmlType) {
  GgufBuilder b;
  b.header(1, 0).tensor_raw("t", {32}, 99, 0).pad(32).zeros(128);
  const uint64_t type_at = kHeaderSize + 8 + 1 + 4 + 8;
  expect_rejected(b.bytes(), "unknown ggml type id 99", type_at);
}

TEST(GgufReader, RejectsRemovedGgmlType) {
  GgufBuilder b;
  b.header(1, 0).tensor_raw("t", {32}, 4, 0).pad(32).zeros(128);
  const uint64_t type_at = kHeaderSize + 8 + 1 + 4 + 8;
  expect_rejected(b.bytes(), "unknown ggml type id 4 (a removed type)",
                  type_at);
}

TEST(GgufReader, RejectsRowLengthNotMultipleOfBlockSize) {
  GgufBuilder b;
  b.header(1, 0).tensor("t", {33, 2}, GgmlType::kQ4_0, 0).pad(32).zeros(128);
  const uint64_t ne0_at = kHeaderSize + 8 + 1 + 4;
  expect_rejected(b.bytes(),
                  "row length 33 is not a multiple of the block "
                  "size 32 of Q4_0",
                  ne0_at);
}

TEST(GgufReader, RejectsMisalignedTensorOffset) {
  GgufBuilder b;
  b.header(1, 0).tensor("t", {8}, GgmlType::kF32, 7).pad(32).zeros(64);
  const uint64_t offset_at = kHeaderSize + 8 + 1 + 4 + 8 + 4;
  expect_rejected(b.bytes(), "tensor 't' offset", offset_at);
  expect_rejected(b.bytes(),
                  "data offset 7 is not a multiple of the "
                  "alignment 32",
                  offset_at);
}

TEST(GgufReader, RejectsMisalignedOffsetUnderCustomAlignment) {
  GgufBuilder b;
  b.header(1, 1).kv_u32("general.alignment", 64);
  const uint64_t offset_at = b.pos() + 8 + 1 + 4 + 8 + 4;
  b.tensor("t", {8}, GgmlType::kF32, 32).pad(64).zeros(128);
  expect_rejected(b.bytes(), "not a multiple of the alignment 64", offset_at);
}

TEST(GgufReader, RejectsTensorPastEndOfFile) {
  GgufBuilder b;
  b.header(1, 0).tensor("t", {16}, GgmlType::kF32, 0).pad(32).zeros(60);
  const uint64_t offset_at = kHeaderSize + 8 + 1 + 4 + 8 + 4;
  expect_rejected(b.bytes(),
                  "runs past the end of the file (the data "
                  "section holds 60 bytes)",
                  offset_at);
}

TEST(GgufReader, RejectsTensorOffsetNearUint64Max) {
  GgufBuilder b;
  b.header(1, 0)
      .tensor("t", {8}, GgmlType::kF32,
              std::numeric_limits<uint64_t>::max() - 31)
      .pad(32)
      .zeros(32);
  const uint64_t offset_at = kHeaderSize + 8 + 1 + 4 + 8 + 4;
  expect_rejected(b.bytes(), "runs past the end of the file", offset_at);
}

TEST(GgufReader, RejectsOverlappingTensors) {
  GgufBuilder b;
  b.header(3, 0)
      .tensor("a", {16}, GgmlType::kF32, 0)    // [0, 64)
      .tensor("c", {8}, GgmlType::kF32, 128);  // [128, 160)
  const uint64_t b_offset_at = b.pos() + 8 + 1 + 4 + 8 + 4;
  b.tensor("b", {8}, GgmlType::kF32, 32)  // [32, 64) overlaps a
      .pad(32)
      .zeros(160);
  expect_rejected(b.bytes(), "tensor 'b' offset", b_offset_at);
  expect_rejected(b.bytes(), "data [32, 64) overlaps tensor 'a' [0, 64)",
                  b_offset_at);
}

TEST(GgufReader, RejectsDuplicateTensorNames) {
  GgufBuilder b;
  b.header(2, 0).tensor("t", {8}, GgmlType::kF32, 0);
  const uint64_t second_at = b.pos();
  b.tensor("t", {8}, GgmlType::kF32, 32).pad(32).zeros(64);
  expect_rejected(b.bytes(), "duplicate tensor name (first at offset 24)",
                  second_at);
}

TEST(GgufReader, RejectsDuplicateKeys) {
  GgufBuilder b;
  b.header(0, 2).kv_u32("x", 1);
  const uint64_t second_at = b.pos();
  b.kv_u32("x", 2);
  expect_rejected(b.bytes(), "key 'x' at offset", second_at);
  expect_rejected(b.bytes(), "duplicate key (first at offset 24)", second_at);
}

TEST(GgufReader, RejectsAlignmentNotPowerOfTwo) {
  GgufBuilder b;
  b.header(0, 1).kv_u32("general.alignment", 48);
  expect_rejected(b.bytes(), "alignment 48 is not a nonzero power of two",
                  kHeaderSize);
}

TEST(GgufReader, RejectsZeroAlignment) {
  GgufBuilder b;
  b.header(0, 1).kv_u32("general.alignment", 0);
  expect_rejected(b.bytes(), "alignment 0 is not a nonzero power of two",
                  kHeaderSize);
}

TEST(GgufReader, RejectsAlignmentAboveLimit) {
  GgufBuilder b;
  b.header(0, 1).kv_u32("general.alignment", 1u << 20);
  expect_rejected(b.bytes(), "exceeds the limit of 65536", kHeaderSize);
}

TEST(GgufReader, RejectsAlignmentOfWrongType) {
  GgufBuilder b;
  b.header(0, 1).key("general.alignment", ValueType::kUint64).u64(32);
  expect_rejected(b.bytes(),
                  "key 'general.alignment' at offset 24: must be "
                  "UINT32, got UINT64",
                  kHeaderSize);
}

TEST(GgufReader, RejectsTokensOfWrongElementType) {
  GgufBuilder b;
  b.header(0, 1).kv_array("tokenizer.ggml.tokens", ValueType::kInt32, 1).i32(5);
  expect_rejected(b.bytes(), "must be ARRAY of STRING, got ARRAY of INT32",
                  kHeaderSize);
}

TEST(GgufReader, RejectsTokensThatAreNotAnArray) {
  GgufBuilder b;
  b.header(0, 1).kv_string("tokenizer.ggml.tokens", "a");
  expect_rejected(b.bytes(), "must be ARRAY of STRING, got STRING",
                  kHeaderSize);
}

TEST(GgufReader, RejectsScoresOfWrongElementType) {
  GgufBuilder b;
  b.header(0, 1).kv_array("tokenizer.ggml.scores", ValueType::kFloat64, 1);
  b.u64(0);
  expect_rejected(b.bytes(), "must be ARRAY of FLOAT32, got ARRAY of FLOAT64",
                  kHeaderSize);
}

TEST(GgufReader, RejectsScoresShorterThanTokens) {
  GgufBuilder b;
  b.header(0, 2).kv_array("tokenizer.ggml.tokens", ValueType::kString, 2);
  b.str("a").str("b");
  const uint64_t at = b.pos();
  b.kv_array("tokenizer.ggml.scores", ValueType::kFloat32, 1).f32(0.5f);
  expect_rejected(b.bytes(), "key 'tokenizer.ggml.scores'", at);
  expect_rejected(b.bytes(),
                  "length 1 differs from the 2 entries of "
                  "tokenizer.ggml.tokens",
                  at);
}

TEST(GgufReader, RejectsTokenTypeOfOtherLength) {
  GgufBuilder b;
  b.header(0, 2);
  const uint64_t at = b.pos();
  b.kv_array("tokenizer.ggml.token_type", ValueType::kInt32, 3).i32(1).i32(1);
  b.i32(1);
  b.kv_array("tokenizer.ggml.tokens", ValueType::kString, 2).str("a").str("b");
  expect_rejected(b.bytes(), "length 3 differs from the 2 entries", at);
}

TEST(GgufReader, RejectsTokenTypeOfWrongElementType) {
  GgufBuilder b;
  b.header(0, 1).kv_array("tokenizer.ggml.token_type", ValueType::kUint32, 1);
  b.u32(1);
  expect_rejected(b.bytes(), "must be ARRAY of INT32, got ARRAY of UINT32",
                  kHeaderSize);
}

TEST(GgufReader, RejectsMergesOfWrongElementType) {
  GgufBuilder b;
  b.header(0, 1).kv_array("tokenizer.ggml.merges", ValueType::kUint8, 1).u8(1);
  expect_rejected(b.bytes(), "must be ARRAY of STRING, got ARRAY of UINT8",
                  kHeaderSize);
}

TEST(GgufReader, RejectsWellKnownScalarsOfWrongType) {
  struct Case {
    const char* key;
    ValueType type;
    const char* rule;
  };
  const Case cases[] = {
      {"general.architecture", ValueType::kUint32,
       "must be STRING, got UINT32"},
      {"tokenizer.ggml.bos_token_id", ValueType::kInt32,
       "must be UINT32, got INT32"},
      {"tokenizer.ggml.eos_token_id", ValueType::kUint64,
       "must be UINT32, got UINT64"},
      {"split.no", ValueType::kUint32, "must be UINT16, got UINT32"},
      {"split.count", ValueType::kInt32, "must be UINT16, got INT32"},
      {"split.tensors.count", ValueType::kUint32, "must be INT32, got UINT32"},
      {"llama.block_count", ValueType::kFloat32,
       "must be an integer type, got FLOAT32"},
      {"gemma3.context_length", ValueType::kBool,
       "must be an integer type, got BOOL"},
      {"llama.embedding_length", ValueType::kString,
       "must be an integer type, got STRING"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    GgufBuilder b;
    b.header(0, 1).key(c.key, c.type);
    if (c.type == ValueType::kString) {
      b.str("x");
    } else if (c.type == ValueType::kUint64) {
      b.u64(1);
    } else if (c.type == ValueType::kBool) {
      b.u8(1);
    } else {
      b.u32(1);
    }
    expect_rejected(b.bytes(), c.rule, kHeaderSize);
  }
}

TEST(GgufReader, AcceptsIntegerHyperparametersOfAnyWidth) {
  GgufBuilder b;
  b.header(0, 2).key("llama.block_count", ValueType::kUint64).u64(30);
  b.key("llama.context_length", ValueType::kInt32).i32(8192);
  auto file = GgufFile::parse(b.bytes().data(), b.bytes().size());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*(*file)->get_u32("llama.block_count"), 30u);
  EXPECT_EQ(*(*file)->get_u32("llama.context_length"), 8192u);
}

TEST(GgufReader, RejectsDataSectionBeyondEndOfFile) {
  // The tensor infos end at 57; the data section would start at 64, but the
  // file ends at 60.
  GgufBuilder b;
  b.header(1, 0).tensor("t", {1}, GgmlType::kF32, 0).zeros(3);
  ASSERT_EQ(b.pos(), 60u);
  expect_rejected(b.bytes(),
                  "data section at offset 64: starts beyond the "
                  "end of the file (60 bytes)",
                  64);
}

TEST(GgufReader, AcceptsFileWithoutTensorsEndingBeforePadding) {
  // Vocabulary-only GGUFs (llama.cpp's ggml-vocab-*.gguf) end right after
  // their metadata.
  GgufBuilder b;
  b.header(0, 1).kv_string("general.architecture", "llama");
  auto file = GgufFile::parse(b.bytes().data(), b.bytes().size());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->data_offset(), 96u);  // 69 bytes, aligned to 32
}

TEST(GgufReader, RejectsArraysNestedTooDeep) {
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kArray);
  uint64_t at = 0;
  for (int depth = 1; depth <= 9; ++depth) {
    at = b.pos();
    b.u32(static_cast<uint32_t>(ValueType::kArray)).u64(1);
  }
  b.zeros(64);
  expect_rejected(b.bytes(), "arrays nested deeper than 8", at);
}

TEST(GgufReader, RejectsBoolOtherThanZeroOrOne) {
  GgufBuilder b;
  b.header(0, 1).key("tokenizer.ggml.add_bos_token", ValueType::kBool);
  const uint64_t at = b.pos();
  b.u8(2);
  expect_rejected(b.bytes(), "BOOL byte 2 is not 0 or 1", at);
}

TEST(GgufReader, RejectsTruncatedValue) {
  GgufBuilder b;
  b.header(0, 1).key("k", ValueType::kUint64);
  const uint64_t at = b.pos();
  b.u32(7);
  expect_rejected(b.bytes(), "key 'k' value at offset", at);
  expect_rejected(b.bytes(), "truncated: needs 8 bytes, 4 remain", at);
}

TEST(GgufReader, EscapesHostileNamesInMessages) {
  GgufBuilder b;
  b.header(0, 2).kv_u32(std::string_view("a\n\x01", 3), 1);
  b.kv_u32(std::string_view("a\n\x01", 3), 1);
  auto file = GgufFile::parse(b.bytes().data(), b.bytes().size());
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("key 'a\\x0a\\x01'"),
            absl::string_view::npos)
      << file.status();
}

}  // namespace
}  // namespace strata::gguf
