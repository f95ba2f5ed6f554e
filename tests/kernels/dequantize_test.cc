// Reference dequantization against the gguf Python package and against
// ggml's own dequantize_row_* (libggml-base of the llama_cpp package), on
// random blocks (make_quant_vectors.py). Compared as f32 bit patterns: the
// formulas are products of exactly representable integers and f16/f32
// scales evaluated in the same order in all three, so no tolerance is
// needed; the one exception is the payload of NaN (see F16 below).
#include "kernels/cpu/reference/dequantize.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/ggml_type.h"
#include "tests/kernels/oracle_vectors.h"

namespace strata::reference {
namespace {

using ::strata::testing::as_array;
using ::strata::testing::read_vector;

// Dequantizes dequant_<T>.bin and compares with dequant_<T>.<oracle>.f32.
// Without `nan_payload_exact` a NaN matches any NaN of the same sign.
void expect_matches_oracle(GgmlType type, const std::string& oracle,
                           bool nan_payload_exact = true) {
  const std::string name(ggml_type_info(type).name);
  const auto raw = read_vector("dequant_" + name + ".bin");
  const auto expected_bytes =
      read_vector("dequant_" + name + "." + oracle + ".f32");
  if (!raw || !expected_bytes) {
    GTEST_SKIP() << "no " << oracle << " vectors for " << name << " in "
                 << ::strata::testing::oracle_status().dir;
  }
  const std::vector<uint32_t> expected = as_array<uint32_t>(*expected_bytes);
  const auto n = static_cast<int64_t>(expected.size());
  ASSERT_GT(n, 0);
  ASSERT_EQ(ggml_row_bytes(type, n), static_cast<int64_t>(raw->size()));

  std::vector<float> out(expected.size());
  ASSERT_TRUE(dequantize_row(type, raw->data(), n, out.data()).ok());
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t got = std::bit_cast<uint32_t>(out[i]);
    if (got == expected[i]) continue;
    const float want = std::bit_cast<float>(expected[i]);
    if (!nan_payload_exact && std::isnan(out[i]) && std::isnan(want) &&
        std::signbit(out[i]) == std::signbit(want)) {
      continue;
    }
    if (++mismatches <= 5) {
      ADD_FAILURE() << name << " element " << i << " (block "
                    << i / ggml_type_info(type).block_size << "): got "
                    << out[i] << " (0x" << std::hex << got << "), " << oracle
                    << " has " << std::bit_cast<float>(expected[i]) << " (0x"
                    << expected[i] << ")" << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << n
                           << " elements differ from " << oracle;
}

#define STRATA_DEQUANT_GGUF_TEST(T)                \
  TEST(Dequantize, T##MatchesGgufPackage) {        \
    STRATA_REQUIRE_GGUF_VECTORS();                 \
    expect_matches_oracle(GgmlType::k##T, "gguf"); \
  }
#define STRATA_DEQUANT_GGML_TEST(T)                \
  TEST(Dequantize, T##MatchesGgml) {               \
    STRATA_REQUIRE_GGML_VECTORS();                 \
    expect_matches_oracle(GgmlType::k##T, "ggml"); \
  }

// F16 and BF16 enumerate all 65536 patterns, NaNs included: both numpy and
// ggml widen a NaN by shifting its payload, as we do, so even NaNs match.
STRATA_DEQUANT_GGUF_TEST(F32)
STRATA_DEQUANT_GGUF_TEST(F16)
STRATA_DEQUANT_GGUF_TEST(BF16)
STRATA_DEQUANT_GGUF_TEST(Q4_0)
STRATA_DEQUANT_GGUF_TEST(Q4_1)
STRATA_DEQUANT_GGUF_TEST(Q5_0)
STRATA_DEQUANT_GGUF_TEST(Q5_1)
STRATA_DEQUANT_GGUF_TEST(Q8_0)
STRATA_DEQUANT_GGUF_TEST(Q2_K)
STRATA_DEQUANT_GGUF_TEST(Q3_K)
STRATA_DEQUANT_GGUF_TEST(Q4_K)
STRATA_DEQUANT_GGUF_TEST(Q5_K)
STRATA_DEQUANT_GGUF_TEST(Q6_K)
STRATA_DEQUANT_GGUF_TEST(MXFP4)

// ggml's f16 -> f32 quietens signalling NaNs (0x7C01 -> 0x7FC02000); numpy
// and we widen them unchanged (0x7F802000), so NaNs compare by sign here.
TEST(Dequantize, F16MatchesGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_matches_oracle(GgmlType::kF16, "ggml", /*nan_payload_exact=*/false);
}
STRATA_DEQUANT_GGML_TEST(BF16)
STRATA_DEQUANT_GGML_TEST(Q4_0)
STRATA_DEQUANT_GGML_TEST(Q4_1)
STRATA_DEQUANT_GGML_TEST(Q5_0)
STRATA_DEQUANT_GGML_TEST(Q5_1)
STRATA_DEQUANT_GGML_TEST(Q8_0)
STRATA_DEQUANT_GGML_TEST(Q2_K)
STRATA_DEQUANT_GGML_TEST(Q3_K)
STRATA_DEQUANT_GGML_TEST(Q4_K)
STRATA_DEQUANT_GGML_TEST(Q5_K)
STRATA_DEQUANT_GGML_TEST(Q6_K)
STRATA_DEQUANT_GGML_TEST(Q8_K)  // gguf has no Q8_K dequantizer
STRATA_DEQUANT_GGML_TEST(MXFP4)

// Neither gguf nor ggml dequantizes Q8_1 (ggml only ever dots it); the
// script computes d * qs with numpy straight from ggml-common.h's layout.
TEST(Dequantize, Q8_1MatchesNumpyFormula) {
  STRATA_REQUIRE_GGUF_VECTORS();
  expect_matches_oracle(GgmlType::kQ8_1, "numpy");
}

#undef STRATA_DEQUANT_GGUF_TEST
#undef STRATA_DEQUANT_GGML_TEST

}  // namespace
}  // namespace strata::reference
