// F16 / BF16 / E8M0 conversions: special values by hand, exhaustive round
// trips, and the f32 -> f16 / bf16 narrowing against numpy (gguf) and ggml.
#include "kernels/cpu/reference/fp16.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/oracle_vectors.h"

namespace strata::reference {
namespace {

using ::strata::testing::as_array;
using ::strata::testing::read_vector;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Fp16, SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);  // -0 stays -0
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);   // largest finite
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);  // below the tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);   // tie -> even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);         // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);               // tie -> even = 0
  EXPECT_EQ(f32_to_f16(0x1.0002p-25f), 0x0001);          // just above the tie
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);           // 1.5 ulp -> even 2
  EXPECT_EQ(f32_to_f16(-0x1p-26f), 0x8000);              // underflow keeps sign
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f), 0x0400);           // rounds up to normal
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);        // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);    // tie -> even (up)
  EXPECT_EQ(f32_to_f16(from_bits(0x00000001)), 0x0000);  // f32 subnormal

  // NaN: stays NaN, keeps its sign, becomes quiet, keeps top payload bits.
  EXPECT_EQ(f32_to_f16(from_bits(0x7FC00000)), 0x7E00);
  EXPECT_EQ(f32_to_f16(from_bits(0xFFC00000)), 0xFE00);
  EXPECT_EQ(f32_to_f16(from_bits(0x7F800001)), 0x7E00);  // sNaN -> quiet
  EXPECT_EQ(f32_to_f16(from_bits(0x7FA02000)), 0x7F01);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  EXPECT_EQ(bits(f16_to_f32(0xFE00)), 0xFFC00000u);
}

TEST(Fp16, EveryF16RoundTripsThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << h;
      // Quiet NaNs come back unchanged; signalling ones come back quietened.
      ASSERT_EQ(f32_to_f16(f), h | 0x0200) << h;
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << h;
    }
  }
}

TEST(Bf16, SpecialValuesAndRounding) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie -> even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00000001)), 0x0000);  // subnormal
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);  // kept, not flushed
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F800001)), 0x7FC0);  // sNaN -> quiet
  EXPECT_EQ(f32_to_bf16(from_bits(0xFFC12345)), 0xFFC1);  // payload, sign
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits(f), h << 16);
    const bool is_nan = (h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0;
    ASSERT_EQ(f32_to_bf16(f), is_nan ? (h | 0x40) : h) << h;
  }
}

TEST(E8m0, MatchesGgmlDefinitions) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(1), 0x1p-126f);
  EXPECT_EQ(bits(e8m0_to_f32(0)), 0x00400000u);  // 2^-127, subnormal
  EXPECT_TRUE(std::isinf(e8m0_to_f32(255)));     // ggml: no NaN case
  EXPECT_EQ(e8m0_to_f32_half(128), 1.0f);
  EXPECT_EQ(e8m0_to_f32_half(127), 0.5f);
  EXPECT_EQ(bits(e8m0_to_f32_half(0)), 0x00200000u);  // 2^-128
  EXPECT_EQ(bits(e8m0_to_f32_half(1)), 0x00400000u);  // 2^-127
  EXPECT_EQ(e8m0_to_f32_half(2), 0x1p-126f);
  EXPECT_EQ(e8m0_to_f32_half(255), 0x1p127f);
  for (int e = 1; e < 255; ++e) {
    EXPECT_EQ(e8m0_to_f32_half(static_cast<uint8_t>(e)),
              0.5f * e8m0_to_f32(static_cast<uint8_t>(e)));
  }
}

// f32 -> 16-bit narrowing of float_specials.f32 against an oracle file.
// `nan_payload_exact`: compare NaN outputs bit for bit; otherwise require a
// NaN of the same sign (the oracles differ among themselves on payloads).
void expect_narrowing_matches(const std::string& type,
                              const std::string& oracle,
                              uint16_t (*narrow)(float),
                              bool nan_payload_exact) {
  const auto input = read_vector("float_specials.f32");
  const auto expected_bytes =
      read_vector("float_specials." + type + "." + oracle + ".bin");
  if (!input || !expected_bytes) GTEST_SKIP() << "no float_specials vectors";
  const std::vector<float> x = as_array<float>(*input);
  const std::vector<uint16_t> expected = as_array<uint16_t>(*expected_bytes);
  ASSERT_EQ(x.size(), expected.size());
  int mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t got = narrow(x[i]);
    bool same = got == expected[i];
    if (!same && std::isnan(x[i]) && !nan_payload_exact) {
      const uint16_t exp_mask = type == "F16" ? 0x7C00 : 0x7F80;
      const bool expected_nan = (expected[i] & exp_mask) == exp_mask &&
                                (expected[i] & ~exp_mask & 0x7FFF) != 0;
      same = expected_nan && (got & 0x8000) == (expected[i] & 0x8000);
    }
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << type << " of 0x" << std::hex << bits(x[i]) << " ("
                    << x[i] << "): got 0x" << got << ", " << oracle << " has 0x"
                    << expected[i] << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// numpy keeps a signalling NaN's payload as is (we quieten it, like F16C),
// so NaNs are compared by NaN-ness and sign; everything else bit for bit.
TEST(Fp16, NarrowingMatchesGgufPackage) {
  STRATA_REQUIRE_GGUF_VECTORS();
  expect_narrowing_matches("F16", "gguf", f32_to_f16, false);
}

// ggml's portable f32 -> f16 writes sign | 0x7E00 for every NaN.
TEST(Fp16, NarrowingMatchesGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_narrowing_matches("F16", "ggml", f32_to_f16, false);
}

TEST(Bf16, NarrowingMatchesGgufPackage) {
  STRATA_REQUIRE_GGUF_VECTORS();
  expect_narrowing_matches("BF16", "gguf", f32_to_bf16, true);
}

TEST(Bf16, NarrowingMatchesGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_narrowing_matches("BF16", "ggml", f32_to_bf16, true);
}

// The row conversion (F16C where the CPU has it) equals the scalar one on
// every class of input: a sweep of bit patterns through normals,
// subnormals, ties, overflow, infinities and NaNs, at lengths that leave a
// scalar tail.
TEST(Fp16, RowConversionEqualsScalar) {
  std::vector<float> src;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 0x10001ull * 2) {
    src.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
                  std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    src.push_back(v);
  }
  src.resize(src.size() / 8 * 8 + 5);  // a ragged tail
  std::vector<uint16_t> row(src.size());
  f32_to_f16_row(src.data(), row.data(), static_cast<int64_t>(src.size()));
  int mismatches = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (row[i] != f32_to_f16(src[i]) && mismatches++ < 5) {
      ADD_FAILURE() << "bits " << std::bit_cast<uint32_t>(src[i]) << ": row "
                    << row[i] << ", scalar " << f32_to_f16(src[i]);
    }
  }
  EXPECT_GT(src.size(), 30000u);
}

}  // namespace
}  // namespace strata::reference
