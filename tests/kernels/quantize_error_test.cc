// quantize -> dequantize error against the bound each format implies, on
// ragged data (quant_test_data.h). Every element is checked against its own
// bound; the RMS error relative to the data's RMS is checked per kind.
//
// Notation: for a block, amax = max |x|; D16 = the f16 value the block
// stores for a scale d computed in f32; eps = 1e-6 * amax covers a few f32
// roundings in the scale arithmetic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"
#include "tests/kernels/quant_test_data.h"

namespace strata::reference {
namespace {

using ::strata::testing::make_test_blocks;
using ::strata::testing::TestBlocks;

// Fills bound[0..n) for the n elements x[0..n) of one block.
using BoundFn = std::function<void(const float* x, int n, double* bound)>;

double absmax(const float* x, int n) {
  double a = 0;
  for (int i = 0; i < n; ++i)
    a = std::max(a, std::fabs(static_cast<double>(x[i])));
  return a;
}

double f16_round(double d) {
  return f16_to_f32(f32_to_f16(static_cast<float>(d)));
}

struct Report {
  double worst_ratio = 0;  // max over elements of |err| / bound
  double worst_err = 0;
  std::map<std::string, std::pair<double, double>> sse_and_ss;  // per kind
};

// Quantizes the test data, dequantizes it, and checks every element against
// `bound`. Returns the statistics for the per-type RMS checks.
Report check_bounds(GgmlType type, const BoundFn& bound) {
  const TestBlocks data = make_test_blocks(24);
  const auto n = static_cast<int64_t>(data.x.size());
  const int block = static_cast<int>(ggml_type_info(type).block_size);
  std::vector<uint8_t> q(*ggml_row_bytes(type, n));
  std::vector<float> y(data.x.size());
  EXPECT_TRUE(quantize_row(type, data.x.data(), n, q.data()).ok());
  EXPECT_TRUE(dequantize_row(type, q.data(), n, y.data()).ok());

  Report report;
  std::vector<double> b(block);
  int violations = 0;
  for (int64_t start = 0; start < n; start += block) {
    bound(data.x.data() + start, block, b.data());
    for (int e = 0; e < block; ++e) {
      const int64_t i = start + e;
      const double err = std::fabs(static_cast<double>(data.x[i]) - y[i]);
      const std::string& kind = data.kinds[i / 256];
      report.sse_and_ss[kind].first += err * err;
      report.sse_and_ss[kind].second +=
          static_cast<double>(data.x[i]) * data.x[i];
      report.worst_err = std::max(report.worst_err, err);
      if (b[e] > 0)
        report.worst_ratio = std::max(report.worst_ratio, err / b[e]);
      if (!(err <= b[e]) && ++violations <= 5) {
        ADD_FAILURE() << ggml_type_info(type).name << " " << kind << " element "
                      << i << ": x " << data.x[i] << " y " << y[i] << " |err| "
                      << err << " > bound " << b[e];
      }
    }
  }
  EXPECT_EQ(violations, 0);
  std::printf("%s: max |err|/bound %.3f\n",
              std::string(ggml_type_info(type).name).c_str(),
              report.worst_ratio);
  return report;
}

// RMS(err) / RMS(x) of a kind.
double relative_rms(const Report& r, const std::string& kind) {
  const auto& [sse, ss] = r.sse_and_ss.at(kind);
  return ss > 0 ? std::sqrt(sse / ss) : std::sqrt(sse);
}

// Exact kinds: zero and constant blocks come back exactly for every type
// whose grid contains them; every kind's relative RMS is at most `limit`.
void expect_relative_rms(const Report& r, GgmlType type,
                         const std::map<std::string, double>& limits) {
  for (const auto& [kind, limit] : limits) {
    const double rel = relative_rms(r, kind);
    std::printf("  %-18s relative rms %.5f (limit %.5f)\n", kind.c_str(), rel,
                limit);
    EXPECT_LE(rel, limit) << ggml_type_info(type).name << " " << kind;
  }
}

// ---------------------------------------------------------------------------
// Legacy types and MXFP4: bounds from ggml's rounding rules.

// Q8_0 / Q8_1: d = amax / 127, q = round(x / d): |err| <= d/2, plus
// |q| * |d - D16| <= 127 |d - D16| for storing d as f16.
void bound_q8_0(const float* x, int n, double* bound) {
  const double amax = absmax(x, n);
  const double d = static_cast<float>(amax) / 127.0f;
  for (int e = 0; e < n; ++e) {
    bound[e] = 0.5 * d + 127 * std::fabs(d - f16_round(d)) + 1e-6 * amax;
  }
}

// Q4_0 (levels = 8) / Q5_0 (16): d = vmax / -levels, q = trunc(x/d + levels
// + 0.5) capped at 2 levels - 1: |err| <= |d|/2, except t = x/d above
// levels - 0.5 (values opposite the extreme), clipped to levels - 1:
// |err| = (t - levels + 1) |d| <= |d|.
BoundFn bound_symmetric_legacy(int levels) {
  return [levels](const float* x, int n, double* bound) {
    float vmax = 0;
    for (int e = 0; e < n; ++e) {
      if (std::fabs(x[e]) > std::fabs(vmax)) vmax = x[e];
    }
    const double amax = std::fabs(vmax);
    const double d = vmax / static_cast<float>(-levels);
    for (int e = 0; e < n; ++e) {
      const double t = d != 0 ? x[e] / d : 0;
      bound[e] = std::fabs(d) * std::max(0.5, t - (levels - 1)) +
                 levels * std::fabs(d - f16_round(d)) + 1e-6 * amax;
    }
  };
}

// Q4_1 (steps = 15) / Q5_1 (31): d = (max - min) / steps, m = min:
// |err| <= d/2 + steps |d - D16| + |min - f16(min)|.
BoundFn bound_affine_legacy(int steps) {
  return [steps](const float* x, int n, double* bound) {
    const float min = *std::min_element(x, x + n);
    const float max = *std::max_element(x, x + n);
    const double d = (max - min) / static_cast<float>(steps);
    const double amax = absmax(x, n);
    for (int e = 0; e < n; ++e) {
      bound[e] = 0.5 * d + steps * std::fabs(d - f16_round(d)) +
                 std::fabs(min - f16_round(min)) + 1e-6 * amax;
    }
  };
}

// MXFP4: d = 2^(floor(log2 amax) - 3); the grid in units of d is
// 0,1,2,3,4,6,8,12 (either sign), so |err| <= d/2 below 4d, d below 8d, 2d
// below 12d, and |x| - 12d beyond (amax < 16d: clipped by less than 4d).
void bound_mxfp4(const float* x, int n, double* bound) {
  const double amax = absmax(x, n);
  const double d =
      amax > 0
          ? std::ldexp(1.0, static_cast<int>(std::floor(std::log2(amax))) - 3)
          : 0;
  for (int e = 0; e < n; ++e) {
    const double a = d > 0 ? std::fabs(x[e]) / d : 0;
    const double units = a <= 4 ? 0.5 : a <= 8 ? 1 : a <= 12 ? 2 : a - 12;
    bound[e] = units * d + 1e-6 * amax;
  }
}

// Q8_K: d = amax / 127 kept in f32: |err| <= d/2.
void bound_q8_K(const float* x, int n, double* bound) {
  const double amax = absmax(x, n);
  for (int e = 0; e < n; ++e) bound[e] = amax / 254 + 1e-6 * amax;
}

// F16: relative 2^-11 in the normal range, 2^-25 absolute below it.
void bound_f16(const float* x, int n, double* bound) {
  for (int e = 0; e < n; ++e)
    bound[e] = std::max(std::fabs(x[e]) * 0x1p-11, 0x1p-25);
}

// BF16: relative 2^-8 (f32's exponent range, so no subnormal case here).
void bound_bf16(const float* x, int n, double* bound) {
  for (int e = 0; e < n; ++e) bound[e] = std::fabs(x[e]) * 0x1p-8 + 1e-45;
}

// ---------------------------------------------------------------------------
// K-quants. The quantizer minimises squared error, which may clip a
// sub-block's extreme value by up to about one step in exchange for finer
// steps for the rest, so the per-element bound is one full step of the
// sub-block's own min-max grid, step_j = range_j / qspan, plus what
// storing the scales costs: a sub-block scale rounded to the grid of the
// super-block scale D (D ~ max_j step_j / scale_max, itself an f16: relative
// precision 2^-10 plus an absolute 2^-24 where it is subnormal) moves the
// grid ends by up to qspan / 2 + 1 units of D; the min (affine types) moves
// by half a unit of Dmin ~ max_j |min_j| / scale_max.
//   affine (Q2_K, Q4_K, Q5_K): range_j = max(x) - min(min(x), 0)
//   symmetric (Q3_K, Q6_K):    range_j = amax_j * qspan / |qmin|
BoundFn bound_k_quant(int sub_len, int qspan, int qmin, int scale_max,
                      bool affine) {
  return [=](const float* x, int n, double* bound) {
    const int subs = n / sub_len;
    std::vector<double> step(subs);
    double max_step = 0, max_neg = 0;
    for (int j = 0; j < subs; ++j) {
      const float* xs = x + j * sub_len;
      if (affine) {
        const double lo = std::min(0.0f, *std::min_element(xs, xs + sub_len));
        const double hi = *std::max_element(xs, xs + sub_len);
        step[j] = std::max(0.0, hi - lo) / qspan;
        max_neg = std::max(max_neg, -lo);
      } else {
        step[j] = absmax(xs, sub_len) / -qmin;
      }
      max_step = std::max(max_step, step[j]);
    }
    const double f16_rel = 1 + 0x1p-10, f16_abs = 0x1p-24;
    const double unit = max_step / scale_max * f16_rel + f16_abs;
    const double min_unit =
        affine ? max_neg / scale_max * f16_rel + f16_abs : 0;
    const double slack =
        (qspan / 2.0 + 1) * unit + min_unit / 2 + 1e-6 * absmax(x, n);
    for (int e = 0; e < n; ++e) bound[e] = step[e / sub_len] + slack;
  };
}

// Relative RMS limits: about 10% above what these quantizers achieved when
// written (a regression guard, not a bound). For scale: on the same kinds
// ggml's quantize_row_*_ref is bit-identical for the legacy types and
// MXFP4, and 0-15% worse for the K-quants (Quantize.*ErrorNoWorseThanGgml).
using Limits = std::map<std::string, double>;

TEST(QuantizeError, F16WithinHalfUlp) {
  const Report r = check_bounds(GgmlType::kF16, bound_f16);
  expect_relative_rms(r, GgmlType::kF16, {{"gaussian", 0x1p-12}, {"zeros", 0}});
}

TEST(QuantizeError, BF16WithinHalfUlp) {
  const Report r = check_bounds(GgmlType::kBF16, bound_bf16);
  expect_relative_rms(r, GgmlType::kBF16, {{"gaussian", 0x1p-9}, {"zeros", 0}});
}

TEST(QuantizeError, Q8_0WithinHalfStep) {
  const Report r = check_bounds(GgmlType::kQ8_0, bound_q8_0);
  expect_relative_rms(r, GgmlType::kQ8_0,
                      Limits{{"gaussian", 0.0058},
                             {"uniform", 0.0042},
                             {"laplace", 0.0074},
                             {"outliers", 0.013},
                             {"mixed_sub_blocks", 0.0069},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q8_1WithinHalfStep) {
  const Report r = check_bounds(GgmlType::kQ8_1, bound_q8_0);
  expect_relative_rms(r, GgmlType::kQ8_1, {{"gaussian", 0.0058}, {"zeros", 0}});
}

TEST(QuantizeError, Q8_KWithinHalfStep) {
  const Report r = check_bounds(GgmlType::kQ8_K, bound_q8_K);
  expect_relative_rms(r, GgmlType::kQ8_K,
                      Limits{{"gaussian", 0.0076},
                             {"uniform", 0.0043},
                             {"laplace", 0.011},
                             {"outliers", 0.028},
                             {"mixed_sub_blocks", 0.014},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q4_0WithinHalfStepOrClip) {
  const Report r = check_bounds(GgmlType::kQ4_0, bound_symmetric_legacy(8));
  expect_relative_rms(r, GgmlType::kQ4_0,
                      Limits{{"gaussian", 0.094},
                             {"uniform", 0.072},
                             {"laplace", 0.12},
                             {"outliers", 0.13},
                             {"mixed_sub_blocks", 0.096},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q5_0WithinHalfStepOrClip) {
  const Report r = check_bounds(GgmlType::kQ5_0, bound_symmetric_legacy(16));
  expect_relative_rms(r, GgmlType::kQ5_0,
                      Limits{{"gaussian", 0.047},
                             {"uniform", 0.035},
                             {"laplace", 0.058},
                             {"outliers", 0.087},
                             {"mixed_sub_blocks", 0.049},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q4_1WithinHalfStep) {
  const Report r = check_bounds(GgmlType::kQ4_1, bound_affine_legacy(15));
  expect_relative_rms(r, GgmlType::kQ4_1,
                      Limits{{"gaussian", 0.086},
                             {"uniform", 0.067},
                             {"laplace", 0.1},
                             {"outliers", 0.12},
                             {"mixed_sub_blocks", 0.11},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q5_1WithinHalfStep) {
  const Report r = check_bounds(GgmlType::kQ5_1, bound_affine_legacy(31));
  expect_relative_rms(r, GgmlType::kQ5_1,
                      Limits{{"gaussian", 0.042},
                             {"uniform", 0.033},
                             {"laplace", 0.049},
                             {"outliers", 0.06},
                             {"mixed_sub_blocks", 0.051},
                             {"zeros", 0}});
}

TEST(QuantizeError, Mxfp4WithinHalfGridGap) {
  const Report r = check_bounds(GgmlType::kMXFP4, bound_mxfp4);
  expect_relative_rms(r, GgmlType::kMXFP4,
                      Limits{{"gaussian", 0.13},
                             {"uniform", 0.16},
                             {"laplace", 0.14},
                             {"outliers", 0.17},
                             {"mixed_sub_blocks", 0.14},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q2_KWithinOneStep) {
  const Report r =
      check_bounds(GgmlType::kQ2_K, bound_k_quant(16, 3, 0, 15, true));
  expect_relative_rms(r, GgmlType::kQ2_K,
                      Limits{{"gaussian", 0.29},
                             {"uniform", 0.24},
                             {"laplace", 0.32},
                             {"outliers", 0.17},
                             {"mixed_sub_blocks", 0.3},
                             {"tiny", 0.29},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q3_KWithinOneStep) {
  const Report r =
      check_bounds(GgmlType::kQ3_K, bound_k_quant(16, 7, -4, 31, false));
  expect_relative_rms(r, GgmlType::kQ3_K,
                      Limits{{"gaussian", 0.16},
                             {"uniform", 0.13},
                             {"laplace", 0.19},
                             {"outliers", 0.12},
                             {"mixed_sub_blocks", 0.17},
                             {"tiny", 0.16},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q4_KWithinOneStep) {
  const Report r =
      check_bounds(GgmlType::kQ4_K, bound_k_quant(32, 15, 0, 63, true));
  expect_relative_rms(r, GgmlType::kQ4_K,
                      Limits{{"gaussian", 0.077},
                             {"uniform", 0.06},
                             {"laplace", 0.089},
                             {"outliers", 0.095},
                             {"mixed_sub_blocks", 0.081},
                             {"tiny", 0.077},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q5_KWithinOneStep) {
  const Report r =
      check_bounds(GgmlType::kQ5_K, bound_k_quant(32, 31, 0, 63, true));
  expect_relative_rms(r, GgmlType::kQ5_K,
                      Limits{{"gaussian", 0.038},
                             {"uniform", 0.029},
                             {"laplace", 0.045},
                             {"outliers", 0.054},
                             {"mixed_sub_blocks", 0.04},
                             {"tiny", 0.04},
                             {"zeros", 0}});
}

TEST(QuantizeError, Q6_KWithinOneStep) {
  const Report r =
      check_bounds(GgmlType::kQ6_K, bound_k_quant(16, 63, -32, 127, false));
  expect_relative_rms(r, GgmlType::kQ6_K,
                      Limits{{"gaussian", 0.019},
                             {"uniform", 0.014},
                             {"laplace", 0.023},
                             {"outliers", 0.037},
                             {"mixed_sub_blocks", 0.018},
                             {"tiny", 0.022},
                             {"zeros", 0}});
}

// Non-finite input gives a defined block and no undefined behaviour (the
// sanitizer build checks the latter); finite blocks beside it are unharmed.
TEST(QuantizeError, NonFiniteInputIsContained) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(512, 0.5f);
  x[3] = nan;
  x[100] = inf;
  x[200] = -inf;
  for (int i = 256; i < 512; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  for (const GgmlType type :
       {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
        GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ8_1,
        GgmlType::kMXFP4, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
        GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K}) {
    std::vector<uint8_t> q(*ggml_row_bytes(type, 512));
    std::vector<float> y(512);
    ASSERT_TRUE(quantize_row(type, x.data(), 512, q.data()).ok());
    ASSERT_TRUE(dequantize_row(type, q.data(), 512, y.data()).ok());
    // The second super-block holds the integers -3..3: every type but the
    // 2- and 3-bit ones keeps them within 3/8 (Q4_0's step, by which it
    // clips the value opposite its extreme).
    if (type == GgmlType::kQ2_K || type == GgmlType::kQ3_K) continue;
    for (int i = 256; i < 512; ++i) {
      EXPECT_NEAR(y[i], x[i], 0.375) << ggml_type_info(type).name << " " << i;
    }
  }
}

}  // namespace
}  // namespace strata::reference
