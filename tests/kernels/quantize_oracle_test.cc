// Reference quantizers against the oracles on quant_input.f32 (ragged
// distributions, make_quant_vectors.py):
//  - bit-exact with gguf.quants.quantize where the package implements the
//    type, and with ggml's quantize_row_*_ref for every type whose rounding
//    we copy;
//  - for the K-quants (our own scale search) an error no worse than ggml's
//    reference quantizer on the same data.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"
#include "tests/kernels/oracle_vectors.h"

namespace strata::reference {
namespace {

using ::strata::testing::as_array;
using ::strata::testing::read_vector;

std::vector<float> load_input() {
  const auto bytes = read_vector("quant_input.f32");
  return bytes ? as_array<float>(*bytes) : std::vector<float>();
}

std::vector<std::string> load_kinds() {
  const auto bytes = read_vector("quant_input_kinds.txt");
  std::vector<std::string> kinds;
  if (!bytes) return kinds;
  std::istringstream in(std::string(bytes->begin(), bytes->end()));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) kinds.push_back(line);
  }
  return kinds;
}

void expect_bytes_match(GgmlType type, const std::string& oracle) {
  const std::string name(ggml_type_info(type).name);
  const std::vector<float> x = load_input();
  const auto expected = read_vector("quant_" + name + "." + oracle + ".bin");
  if (x.empty() || !expected)
    GTEST_SKIP() << "no " << oracle << " vectors for " << name;
  const auto n = static_cast<int64_t>(x.size());
  ASSERT_EQ(ggml_row_bytes(type, n), static_cast<int64_t>(expected->size()));
  std::vector<uint8_t> got(expected->size());
  ASSERT_TRUE(quantize_row(type, x.data(), n, got.data()).ok());
  const int64_t block_bytes = ggml_type_info(type).type_size;
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == (*expected)[i]) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << name << " byte " << i % block_bytes << " of block "
                    << i / block_bytes << ": got " << int{got[i]} << ", "
                    << oracle << " has " << int{(*expected)[i]};
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << got.size()
                           << " bytes differ from " << oracle;
}

#define STRATA_QUANT_GGUF_TEST(T)               \
  TEST(Quantize, T##MatchesGgufPackage) {       \
    STRATA_REQUIRE_GGUF_VECTORS();              \
    expect_bytes_match(GgmlType::k##T, "gguf"); \
  }
#define STRATA_QUANT_GGML_TEST(T)               \
  TEST(Quantize, T##MatchesGgml) {              \
    STRATA_REQUIRE_GGML_VECTORS();              \
    expect_bytes_match(GgmlType::k##T, "ggml"); \
  }

STRATA_QUANT_GGUF_TEST(F32)
STRATA_QUANT_GGUF_TEST(F16)
STRATA_QUANT_GGUF_TEST(BF16)
STRATA_QUANT_GGUF_TEST(Q4_0)
STRATA_QUANT_GGUF_TEST(Q4_1)
STRATA_QUANT_GGUF_TEST(Q5_0)
STRATA_QUANT_GGUF_TEST(Q5_1)
STRATA_QUANT_GGUF_TEST(Q8_0)
STRATA_QUANT_GGUF_TEST(MXFP4)

STRATA_QUANT_GGML_TEST(F16)
STRATA_QUANT_GGML_TEST(BF16)
STRATA_QUANT_GGML_TEST(Q4_0)
STRATA_QUANT_GGML_TEST(Q4_1)
STRATA_QUANT_GGML_TEST(Q5_0)
STRATA_QUANT_GGML_TEST(Q5_1)
STRATA_QUANT_GGML_TEST(Q8_0)
STRATA_QUANT_GGML_TEST(Q8_1)
STRATA_QUANT_GGML_TEST(Q8_K)
STRATA_QUANT_GGML_TEST(MXFP4)

#undef STRATA_QUANT_GGUF_TEST
#undef STRATA_QUANT_GGML_TEST

// Mean squared error of `bytes` dequantized against x, and mean of x^2, per
// input kind.
struct KindErrors {
  std::map<std::string, double> mse;
  std::map<std::string, double> mean_square;
};

KindErrors errors_by_kind(GgmlType type, const std::vector<float>& x,
                          const std::vector<uint8_t>& bytes,
                          const std::vector<std::string>& kinds) {
  std::vector<float> y(x.size());
  EXPECT_TRUE(dequantize_row(type, bytes.data(), static_cast<int64_t>(x.size()),
                             y.data())
                  .ok());
  KindErrors out;
  std::map<std::string, int64_t> count;
  for (size_t i = 0; i < x.size(); ++i) {
    const std::string& kind = kinds[i / 256];
    const double e = static_cast<double>(x[i]) - y[i];
    out.mse[kind] += e * e;
    out.mean_square[kind] += static_cast<double>(x[i]) * x[i];
    ++count[kind];
  }
  for (auto& [kind, sum] : out.mse) sum /= static_cast<double>(count[kind]);
  for (auto& [kind, sum] : out.mean_square) {
    sum /= static_cast<double>(count[kind]);
  }
  return out;
}

// Our K-quant error against ggml's reference quantizer (quantize_row_*_ref,
// no importance matrix) on the same blocks: the total squared error must not
// exceed ggml's, and no kind of data may be more than `kind_slack` worse in
// RMS, unless both sit where only the f16 rounding of the super-block scale
// decides (relative RMS below 2^-11, e.g. constant blocks, which either
// side may win by luck).
void expect_error_no_worse_than_ggml(GgmlType type, double kind_slack) {
  const std::string name(ggml_type_info(type).name);
  const std::vector<float> x = load_input();
  const std::vector<std::string> kinds = load_kinds();
  const auto theirs = read_vector("quant_" + name + ".ggml.bin");
  if (x.empty() || !theirs) GTEST_SKIP() << "no ggml vectors for " << name;
  ASSERT_EQ(kinds.size() * 256, x.size());
  std::vector<uint8_t> ours(theirs->size());
  ASSERT_TRUE(
      quantize_row(type, x.data(), static_cast<int64_t>(x.size()), ours.data())
          .ok());
  const KindErrors ours_err = errors_by_kind(type, x, ours, kinds);
  const KindErrors ggml_err = errors_by_kind(type, x, *theirs, kinds);
  double ours_total = 0, ggml_total = 0;
  for (const auto& [kind, mse] : ours_err.mse) {
    const double ggml = ggml_err.mse.at(kind);
    ours_total += mse;
    ggml_total += ggml;
    std::printf("%s %-17s rms ours %.4g ggml %.4g ratio %.3f\n", name.c_str(),
                kind.c_str(), std::sqrt(mse), std::sqrt(ggml),
                ggml > 0 ? std::sqrt(mse / ggml) : (mse > 0 ? INFINITY : 1.0));
    const double f16_floor = ours_err.mean_square.at(kind) * 0x1p-22;
    EXPECT_LE(mse, std::max(ggml * kind_slack * kind_slack, f16_floor))
        << name << " " << kind;
  }
  EXPECT_LE(ours_total, ggml_total) << name;
}

// kind_slack: a bound on the RMS ratio per kind (ggml occasionally wins a
// kind by a hair; the total must still be lower).
TEST(Quantize, Q2_KErrorNoWorseThanGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_error_no_worse_than_ggml(GgmlType::kQ2_K, 1.05);
}
TEST(Quantize, Q3_KErrorNoWorseThanGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_error_no_worse_than_ggml(GgmlType::kQ3_K, 1.05);
}
TEST(Quantize, Q4_KErrorNoWorseThanGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_error_no_worse_than_ggml(GgmlType::kQ4_K, 1.05);
}
TEST(Quantize, Q5_KErrorNoWorseThanGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_error_no_worse_than_ggml(GgmlType::kQ5_K, 1.05);
}
TEST(Quantize, Q6_KErrorNoWorseThanGgml) {
  STRATA_REQUIRE_GGML_VECTORS();
  expect_error_no_worse_than_ggml(GgmlType::kQ6_K, 1.05);
}

}  // namespace
}  // namespace strata::reference
