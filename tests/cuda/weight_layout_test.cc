// The device's weight row layout (worker/cuda/weight_layout.h): each
// regrouped type's fields where the header's table puts them, the rows a
// permutation of the GGUF row's bytes padded with zeros to 16, the other
// types' rows unchanged. The kernels reading it are kernels_matrix_test.cc's.
#include "worker/cuda/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata::worker::cuda_kernels {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

// Where a field of GGUF block b lands in a device row of n_blocks blocks,
// written out from weight_layout.h's table, not from its code.
struct FieldAt {
  GgmlType type;
  int gguf_offset;  // in the block
  int bytes;
  long long (*device)(long long b, long long n_blocks);
};
const FieldAt kFields[] = {
    {GgmlType::kQ4_0, 2, 16, [](long long b, long long) { return 16 * b; }},
    {GgmlType::kQ4_0, 0, 2, [](long long b, long long n) { return 16 * n + 2 * b; }},
    {GgmlType::kQ4_1, 4, 16, [](long long b, long long) { return 16 * b; }},
    {GgmlType::kQ4_1, 0, 4, [](long long b, long long n) { return 16 * n + 4 * b; }},
    {GgmlType::kQ5_0, 6, 16, [](long long b, long long) { return 16 * b; }},
    {GgmlType::kQ5_0, 2, 4, [](long long b, long long n) { return 16 * n + 4 * b; }},
    {GgmlType::kQ5_0, 0, 2, [](long long b, long long n) { return 20 * n + 2 * b; }},
    {GgmlType::kQ5_1, 8, 16, [](long long b, long long) { return 16 * b; }},
    {GgmlType::kQ5_1, 4, 4, [](long long b, long long n) { return 16 * n + 4 * b; }},
    {GgmlType::kQ5_1, 0, 4, [](long long b, long long n) { return 20 * n + 4 * b; }},
    {GgmlType::kQ8_0, 2, 32, [](long long b, long long) { return 32 * b; }},
    {GgmlType::kQ8_0, 0, 2, [](long long b, long long n) { return 32 * n + 2 * b; }},
    {GgmlType::kMXFP4, 1, 16, [](long long b, long long) { return 16 * b; }},
    {GgmlType::kMXFP4, 0, 1, [](long long b, long long n) { return 16 * n + b; }},
    {GgmlType::kQ6_K, 0, 208, [](long long b, long long) { return 208 * b; }},
    {GgmlType::kQ6_K, 208, 2, [](long long b, long long n) { return 208 * n + 2 * b; }},
};

TEST(WeightLayout, EachFieldIsWhereTheTablePutsItAndTheRestIsZeros) {
  for (const GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                              GgmlType::kQ8_0, GgmlType::kMXFP4, GgmlType::kQ6_K}) {
    const int64_t per_block = ggml_type_info(type).block_size;
    for (const int64_t n_blocks : {1, 3, 8, 18}) {
      SCOPED_TRACE(std::string(ggml_type_info(type).name) + ", " + std::to_string(n_blocks) +
                   " blocks");
      ASSERT_TRUE(regrouped(type));
      const int64_t n_cols = n_blocks * per_block, n_rows = 3;
      const int64_t in_row = *ggml_row_bytes(type, n_cols);
      const int64_t out_row = *device_row_bytes(type, n_cols);
      EXPECT_EQ(out_row % 16, 0);
      EXPECT_GE(out_row, in_row);
      EXPECT_LT(out_row, in_row + 16);
      const std::vector<uint8_t> gguf = random_bytes(static_cast<size_t>(in_row * n_rows), 7);
      const absl::StatusOr<std::vector<uint8_t>> dev = device_rows(type, n_cols, n_rows, gguf.data());
      ASSERT_TRUE(dev.ok()) << dev.status();
      ASSERT_EQ(dev->size(), static_cast<size_t>(out_row * n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        std::vector<bool> placed(static_cast<size_t>(out_row), false);
        int64_t covered = 0;
        for (const FieldAt& f : kFields) {
          if (f.type != type) continue;
          for (int64_t b = 0; b < n_blocks; ++b) {
            const long long at = f.device(b, n_blocks);
            ASSERT_LE(at + f.bytes, out_row);
            // Each field starts aligned to its size (16 at most).
            EXPECT_EQ(at % std::min(f.bytes, 16), 0) << "field at " << f.gguf_offset;
            EXPECT_EQ(std::memcmp(dev->data() + r * out_row + at,
                                  gguf.data() + r * in_row + b * (in_row / n_blocks) + f.gguf_offset,
                                  static_cast<size_t>(f.bytes)),
                      0)
                << "block " << b << ", field at " << f.gguf_offset;
            for (int i = 0; i < f.bytes; ++i) placed[static_cast<size_t>(at + i)] = true;
            covered += f.bytes;
          }
        }
        EXPECT_EQ(covered, in_row);  // the table's fields are the whole block
        for (int64_t i = 0; i < out_row; ++i) {
          if (!placed[static_cast<size_t>(i)]) {
            EXPECT_EQ((*dev)[static_cast<size_t>(r * out_row + i)], 0) << "padding byte " << i;
          }
        }
      }
    }
  }
}

TEST(WeightLayout, TheOtherTypesKeepTheirGgufRows) {
  for (const GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_K, GgmlType::kQ5_K}) {
    SCOPED_TRACE(ggml_type_info(type).name);
    EXPECT_FALSE(regrouped(type));
    const int64_t n_cols = 512, n_rows = 2;
    const int64_t row = *ggml_row_bytes(type, n_cols);
    EXPECT_EQ(*device_row_bytes(type, n_cols), row);
    const std::vector<uint8_t> gguf = random_bytes(static_cast<size_t>(row * n_rows), 8);
    EXPECT_EQ(*device_rows(type, n_cols, n_rows, gguf.data()), gguf);
  }
}

TEST(WeightLayout, RowsOfPartBlocksAreRefused) {
  EXPECT_EQ(device_row_bytes(GgmlType::kQ8_0, 40).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_row_bytes(GgmlType::kQ6_K, 128).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(device_rows(GgmlType::kQ4_0, 0, 1, nullptr).ok());
}

}  // namespace
}  // namespace strata::worker::cuda_kernels
