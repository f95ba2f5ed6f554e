// The row API's contract: supported types, argument errors, block sizes,
// and a few hand-built blocks whose values follow from the layout comments
// alone (no Python needed).
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/reference/block_layouts.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"

namespace strata::reference {
namespace {

constexpr GgmlType kRequiredDequant[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
    GgmlType::kQ8_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
    GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K, GgmlType::kMXFP4};

TEST(BlockLayouts, SizesMatchGgmlTypeInfo) {
  EXPECT_EQ(sizeof(BlockQ4_0), ggml_type_info(GgmlType::kQ4_0).type_size);
  EXPECT_EQ(sizeof(BlockQ4_1), ggml_type_info(GgmlType::kQ4_1).type_size);
  EXPECT_EQ(sizeof(BlockQ5_0), ggml_type_info(GgmlType::kQ5_0).type_size);
  EXPECT_EQ(sizeof(BlockQ5_1), ggml_type_info(GgmlType::kQ5_1).type_size);
  EXPECT_EQ(sizeof(BlockQ8_0), ggml_type_info(GgmlType::kQ8_0).type_size);
  EXPECT_EQ(sizeof(BlockQ8_1), ggml_type_info(GgmlType::kQ8_1).type_size);
  EXPECT_EQ(sizeof(BlockQ2_K), ggml_type_info(GgmlType::kQ2_K).type_size);
  EXPECT_EQ(sizeof(BlockQ3_K), ggml_type_info(GgmlType::kQ3_K).type_size);
  EXPECT_EQ(sizeof(BlockQ4_K), ggml_type_info(GgmlType::kQ4_K).type_size);
  EXPECT_EQ(sizeof(BlockQ5_K), ggml_type_info(GgmlType::kQ5_K).type_size);
  EXPECT_EQ(sizeof(BlockQ6_K), ggml_type_info(GgmlType::kQ6_K).type_size);
  EXPECT_EQ(sizeof(BlockQ8_K), ggml_type_info(GgmlType::kQ8_K).type_size);
  EXPECT_EQ(sizeof(BlockMxfp4), ggml_type_info(GgmlType::kMXFP4).type_size);
  EXPECT_EQ(kSuperBlock, kQK_K);
}

TEST(ReferenceApi, SupportsEveryRequiredType) {
  for (const GgmlType type : kRequiredDequant) {
    EXPECT_TRUE(can_dequantize(type)) << ggml_type_info(type).name;
    EXPECT_TRUE(can_quantize(type)) << ggml_type_info(type).name;
  }
  EXPECT_FALSE(can_dequantize(GgmlType::kIQ2_XXS));
  EXPECT_FALSE(can_quantize(GgmlType::kIQ4_NL));
  EXPECT_FALSE(can_dequantize(GgmlType::kI32));
  EXPECT_FALSE(can_quantize(GgmlType::kTQ1_0));
}

TEST(ReferenceApi, UnsupportedTypeIsUnimplemented) {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> floats(256);
  const absl::Status d =
      dequantize_row(GgmlType::kIQ2_XXS, bytes.data(), 256, floats.data());
  EXPECT_EQ(d.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(d.message().find("IQ2_XXS"), std::string::npos) << d;
  const absl::Status q =
      quantize_row(GgmlType::kIQ4_XS, floats.data(), 256, bytes.data());
  EXPECT_EQ(q.code(), absl::StatusCode::kUnimplemented);
  // An id that is no ggml type at all is reported, not dereferenced.
  const auto bogus = static_cast<GgmlType>(1000);
  EXPECT_EQ(dequantize_row(bogus, bytes.data(), 256, floats.data()).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(quantize_row(bogus, floats.data(), 256, bytes.data()).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(can_dequantize(bogus));
}

TEST(ReferenceApi, BadElementCountIsInvalidArgument) {
  std::vector<uint8_t> bytes(4096, 0);
  std::vector<float> floats(1024, 7.0f);
  for (const GgmlType type : kRequiredDequant) {
    const int64_t block = ggml_type_info(type).block_size;
    for (const int64_t n : {int64_t{-1}, -block, block + 1, block - 1}) {
      if (n == 0 || (n > 0 && n % block == 0)) continue;
      const absl::Status d =
          dequantize_row(type, bytes.data(), n, floats.data());
      EXPECT_EQ(d.code(), absl::StatusCode::kInvalidArgument)
          << ggml_type_info(type).name << " n=" << n;
      const absl::Status q = quantize_row(type, floats.data(), n, bytes.data());
      EXPECT_EQ(q.code(), absl::StatusCode::kInvalidArgument)
          << ggml_type_info(type).name << " n=" << n;
    }
  }
  // Nothing was written by the failed calls.
  for (const float f : floats) ASSERT_EQ(f, 7.0f);
  for (const uint8_t b : bytes) ASSERT_EQ(b, 0);
  const absl::Status s =
      dequantize_row(GgmlType::kQ4_K, bytes.data(), 100, floats.data());
  EXPECT_NE(s.message().find("256"), std::string::npos) << s;
  EXPECT_NE(s.message().find("100"), std::string::npos) << s;
}

TEST(ReferenceApi, NullBuffersAndEmptyRows) {
  float f = 0;
  uint8_t b[64] = {};
  EXPECT_EQ(dequantize_row(GgmlType::kQ8_0, nullptr, 32, &f).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(GgmlType::kQ8_0, &f, 32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(dequantize_row(GgmlType::kQ8_0, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(quantize_row(GgmlType::kQ4_K, nullptr, 0, nullptr).ok());
  EXPECT_TRUE(dequantize_row(GgmlType::kQ8_0, b, 0, &f).ok());
}

TEST(ReferenceApi, UnalignedRowsWork) {
  // Rows inside a file start at any byte; the reference copies blocks out.
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 37) - 18.0f;
  for (const GgmlType type : kRequiredDequant) {
    const int64_t bytes = *ggml_row_bytes(type, 512);
    std::vector<uint8_t> aligned(bytes), shifted(bytes + 1);
    ASSERT_TRUE(quantize_row(type, x.data(), 512, aligned.data()).ok());
    ASSERT_TRUE(quantize_row(type, x.data(), 512, shifted.data() + 1).ok());
    EXPECT_EQ(std::memcmp(aligned.data(), shifted.data() + 1, bytes), 0)
        << ggml_type_info(type).name;
    std::vector<float> a(512), b(513);
    ASSERT_TRUE(dequantize_row(type, aligned.data(), 512, a.data()).ok());
    ASSERT_TRUE(
        dequantize_row(type, shifted.data() + 1, 512, b.data() + 1).ok());
    EXPECT_EQ(std::memcmp(a.data(), b.data() + 1, 512 * sizeof(float)), 0)
        << ggml_type_info(type).name;
  }
}

TEST(ReferenceApi, HandBuiltBlocksDecodeAsDocumented) {
  // Q4_0: d = 0.5, element j in the lo nibble, j + 16 in the hi nibble.
  BlockQ4_0 q4{};
  q4.d = f32_to_f16(0.5f);
  q4.qs[0] = 0xF0;  // x[0] = (0 - 8) * 0.5, x[16] = (15 - 8) * 0.5
  q4.qs[1] = 0x98;  // x[1] = 0, x[17] = 0.5
  float y[256];
  ASSERT_TRUE(dequantize_row(GgmlType::kQ4_0, &q4, 32, y).ok());
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[17], 0.5f);

  // Q5_0: bit 17 of qh gives x[17] its fifth bit: (8 | 16) - 16 = 8.
  BlockQ5_0 q5{};
  q5.d = f32_to_f16(1.0f);
  std::memset(q5.qs, 0x00, sizeof(q5.qs));
  q5.qs[1] = 0x80;
  const uint32_t qh = 1u << 17;
  std::memcpy(q5.qh, &qh, 4);
  ASSERT_TRUE(dequantize_row(GgmlType::kQ5_0, &q5, 32, y).ok());
  EXPECT_EQ(y[17], 8.0f);
  EXPECT_EQ(y[0], -16.0f);

  // MXFP4: e = 128 -> d = 2^(128 - 128) = 1; code 7 -> 12, code 15 -> -12.
  BlockMxfp4 mx{};
  mx.e = 128;
  mx.qs[0] = 0xF7;
  ASSERT_TRUE(dequantize_row(GgmlType::kMXFP4, &mx, 32, y).ok());
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[16], -12.0f);
  EXPECT_EQ(y[1], 0.0f);

  // Q6_K: q = 63 - 32 = 31 for element 200 (h = 1, g = 2, l = 8): low nibble
  // in the hi half of ql[64 + 8], high bits at qh[32 + 8] >> 4.
  BlockQ6_K q6{};
  std::memset(q6.ql, 0, sizeof(q6.ql));
  std::memset(q6.qh, 0, sizeof(q6.qh));
  for (int8_t& s : q6.scales) s = 2;
  q6.d = f32_to_f16(0.25f);
  q6.ql[72] = 0xF0;
  q6.qh[40] = 0x30;
  ASSERT_TRUE(dequantize_row(GgmlType::kQ6_K, &q6, 256, y).ok());
  EXPECT_EQ(y[200], 0.25f * 2 * 31);
  EXPECT_EQ(y[199], 0.25f * 2 * -32);
}

}  // namespace
}  // namespace strata::reference
