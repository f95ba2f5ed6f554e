// The matrix kernels (worker/cuda/kernels/matvec.cuh, mma.cuh) on both
// devices: matrix x columns in each type, split-K, the multi-output form,
// get_rows, the tensor-core kernel (the fixture: kernels_fixture.h;
// instantiated in kernels_test.cc).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/step_kernels.h"
#include "worker/cuda/weight_layout.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "tests/cuda/kernels_fixture.h"

namespace strata::worker::kernels_test {
namespace {

// A quantized matrix [n_rows][n_cols] of `type` from normal values: its
// GGUF rows, the same rows in the kernels' layout (weight_layout.h, what
// the kernels take) and its dequantized values.
struct Quantized {
  std::vector<unsigned char> gguf;
  long long gguf_row_bytes = 0;
  std::vector<unsigned char> bytes;  // device rows
  long long row_bytes = 0;
  std::vector<float> values;
};
Quantized quantized(GgmlType type, int n_rows, int n_cols, uint32_t seed) {
  Quantized q;
  q.gguf_row_bytes = *ggml_row_bytes(type, n_cols);
  q.gguf.resize(static_cast<size_t>(q.gguf_row_bytes) * n_rows);
  q.values.resize(static_cast<size_t>(n_rows) * n_cols);
  const std::vector<float> v = normal_values(q.values.size(), seed);
  for (int r = 0; r < n_rows; ++r) {
    const size_t at = static_cast<size_t>(r) * n_cols;
    unsigned char* b = q.gguf.data() + static_cast<size_t>(r) * q.gguf_row_bytes;
    EXPECT_TRUE(reference::quantize_row(type, v.data() + at, n_cols, b).ok());
    EXPECT_TRUE(reference::dequantize_row(type, b, n_cols, q.values.data() + at).ok());
  }
  q.row_bytes = *cuda_kernels::device_row_bytes(type, n_cols);
  q.bytes = *cuda_kernels::device_rows(type, n_cols, n_rows, q.gguf.data());
  return q;
}

// Quantized matrix x 1 and 3 columns (the latter split-K, 4 warps a row), every type, fewer and more units than
// a warp's lanes. Float sums against the reference's double:
// |y - ref| <= 1e-5 sum|w x| + 1e-6.
TEST_P(Kernels, MatvecMatchesTheReferenceForEveryType) {
  uint32_t seed = 9;
  for (const TypeCase& c : type_cases()) {
    for (const int columns : {1, 3}) {
      for (const int n_cols : {256, 2304, 172, 20}) {
        // Rows with a part unit (172 = 5 x 32 + 12; 20 < 32): the float
        // formats only, a block format's rows being whole blocks.
        const bool float_format = c.type == GgmlType::kF32 || c.type == GgmlType::kF16;
        if (n_cols % 32 != 0 && !float_format) continue;
        const int n_rows = 9;
        SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " + std::to_string(columns) +
                     " columns, " + std::to_string(n_rows) + " x " + std::to_string(n_cols));
        const Quantized q = quantized(c.type, n_rows, n_cols, seed++);
        const long long row_bytes = q.row_bytes;
        const std::vector<unsigned char>& w = q.bytes;
        const std::vector<float>& dequant = q.values;
        const std::vector<float> x = normal_values(static_cast<size_t>(columns) * n_cols, 11);
        DeviceBuffer dw = put(w), dx = put(x);
        DeviceBuffer dy = space(static_cast<size_t>(columns) * n_rows * sizeof(float));
        // 1 column: a warp a row, 4 rows a block; 3 columns: split-K, the
        // block's 4 warps share one row.
        const unsigned per_block = columns == 1 ? kMatvecThreads / 32 : 1;
        ASSERT_TRUE(run(columns == 1 ? kMatvec1 : kMatvec3,
                        std::string(cuda_kernels::matvec_entry(c.type)),
                        (n_rows + per_block - 1) / per_block, kMatvecThreads,
                        dw.as<const unsigned char>(), dx.as<const float>(), dy.as<float>(), n_rows,
                        n_cols, row_bytes)
                        .ok());
        const std::vector<float> y = get<float>(dy, static_cast<size_t>(columns) * n_rows);
        for (int col = 0; col < columns; ++col) {
          for (int r = 0; r < n_rows; ++r) {
            double want = 0.0, magnitude = 0.0;
            for (int i = 0; i < n_cols; ++i) {
              const double p = static_cast<double>(dequant[static_cast<size_t>(r) * n_cols + i]) *
                               x[static_cast<size_t>(col) * n_cols + i];
              want += p;
              magnitude += std::fabs(p);
            }
            ASSERT_NEAR(y[static_cast<size_t>(col) * n_rows + r], want, 1e-5 * magnitude + 1e-6)
                << "column " << col << ", row " << r;
          }
        }
      }
    }
  }
}

// The three-output form (a block's q, k and v held as one matrix): rows
// [0, n0) to y0, [n0, n0 + n1) to y1, the rest to y2, each value the
// one-output kernel's, bit for bit; and two outputs (gate | up).
TEST_P(Kernels, Matvec3SendsEachPartToItsOutput) {
  for (const TypeCase& c : type_cases()) {
    SCOPED_TRACE(std::string(ggml_type_info(c.type).name));
    const int n_cols = 256, n_rows = 11, n0 = 5, n1 = 4;
    const Quantized q = quantized(c.type, n_rows, n_cols, 70);
    const long long row_bytes = q.row_bytes;
    const std::vector<unsigned char>& w = q.bytes;
    const std::vector<float> x = normal_values(n_cols, 71);
    DeviceBuffer dw = put(w), dx = put(x), dy = space(n_rows * sizeof(float));
    ASSERT_TRUE(run(kMatvec1, std::string(cuda_kernels::matvec_entry(c.type)), 3, kMatvecThreads,
                    dw.as<const unsigned char>(), dx.as<const float>(), dy.as<float>(), n_rows,
                    n_cols, row_bytes)
                    .ok());
    const std::vector<float> want = get<float>(dy, n_rows);
    for (const int parts : {3, 2}) {
      const int m1 = parts == 3 ? n1 : n_rows - n0;
      DeviceBuffer y0 = space(n0 * sizeof(float)), y1 = space(m1 * sizeof(float)),
                   y2 = space((n_rows - n0 - m1 + 1) * sizeof(float));
      ASSERT_TRUE(run(kMatvec1, cuda_kernels::matvec3_entry(c.type), 3, kMatvecThreads,
                      dw.as<const unsigned char>(), dx.as<const float>(), y0.as<float>(),
                      y1.as<float>(), y2.as<float>(), n0, m1, n_rows, n_cols, row_bytes)
                      .ok());
      std::vector<float> got = get<float>(y0, n0);
      const std::vector<float> g1 = get<float>(y1, m1);
      got.insert(got.end(), g1.begin(), g1.end());
      if (parts == 3) {
        const std::vector<float> g2 = get<float>(y2, n_rows - n0 - m1);
        got.insert(got.end(), g2.begin(), g2.end());
      }
      EXPECT_EQ(got, want) << parts << " parts";
    }
  }
}

// get_rows (the token embedding): the rows of the ids, exactly the
// reference's values (the same formulas, no sums); ids repeat, any order.
TEST_P(Kernels, GetRowsDequantizesTheRowsOfTheIds) {
  const int n_rows = 6;
  const std::vector<int> ids = {5, 0, 5, 2, 3};
  for (const TypeCase& c : type_cases())
  for (const int n_cols : {512, 172}) {  // 172: a part unit, float formats only
    if (n_cols % 32 != 0 && c.type != GgmlType::kF32 && c.type != GgmlType::kF16) continue;
    SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + " x " + std::to_string(n_cols));
    const Quantized q = quantized(c.type, n_rows, n_cols, 12);
    const long long row_bytes = q.row_bytes;
    const std::vector<unsigned char>& table = q.bytes;
    const std::vector<float>& rows = q.values;
    DeviceBuffer dt = put(table), di = put(ids);
    DeviceBuffer dout = space(ids.size() * n_cols * sizeof(float));
    ASSERT_TRUE(run(kMatvec1, cuda_kernels::get_rows_entry(c.type), 2, 64,
                    dt.as<const unsigned char>(), di.as<const int>(), dout.as<float>(),
                    static_cast<int>(ids.size()), n_cols, row_bytes)
                    .ok());
    const std::vector<float> got = get<float>(dout, ids.size() * n_cols);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int col = 0; col < n_cols; ++col) {
        ASSERT_EQ(got[i * n_cols + col], rows[static_cast<size_t>(ids[i]) * n_cols + col])
            << "id " << ids[i] << ", column " << col;
      }
    }
  }
}

float f16_round(float v) { return reference::f16_to_f32(reference::f32_to_f16(v)); }

// The tensor-core kernel, every type it takes: Y = X W^T with the weights
// and activations rounded to f16 (saturating: one activation is 1e5, past
// f16's 65504), against the double sum of the rounded products:
// |y - ref| <= 1e-4 sum |w x| + 1e-6 (mma_source.h). 70 rows and 67 tokens:
// two tiles each way, the second part full; 96 columns: a step of one
// unit and a zero half.
// The f16 tensor-core kernel of `source` / `entry` on `api` (grid: its
// tiles of n_rows x n_tok) against the double sum of the f16-rounded
// products: |y - ref| <= 1e-4 sum |w x| + 1e-6 (f32 sums of 16-term
// products). One token holds a 1e5 (f16 saturates it at 65504).
void expect_f16_tensor_core_products(DeviceApi* api, const KernelSource& source,
                                     const std::string& entry, GgmlType type, int n_rows,
                                     int n_tok, int n_cols, unsigned grid, unsigned block) {
  const Quantized w = quantized(type, n_rows, n_cols, 31);
  std::vector<float> x = normal_values(static_cast<size_t>(n_tok) * n_cols, 32);
  x[static_cast<size_t>(3) * n_cols + 5] = 1e5f;
  const size_t y_bytes = static_cast<size_t>(n_tok) * n_rows * sizeof(float);
  auto dw = DeviceBuffer::make(api, w.bytes.size());
  auto dx = DeviceBuffer::make(api, x.size() * sizeof(float));
  auto dy = DeviceBuffer::make(api, y_bytes);
  ASSERT_TRUE(dw.ok() && dx.ok() && dy.ok());
  ASSERT_TRUE(api->upload(dw->get(), w.bytes.data(), w.bytes.size()).ok());
  ASSERT_TRUE(api->upload(dx->get(), x.data(), x.size() * sizeof(float)).ok());
  ASSERT_TRUE(api->fill(dy->get(), 0xFF, y_bytes).ok());
  const unsigned char* wp = dw->as<const unsigned char>();
  const float* xp = dx->as<const float>();
  float* yp = dy->as<float>();
  int n0 = n_rows, n1 = 0;
  long long row_bytes = w.row_bytes;
  void* args[] = {&wp, &xp, &yp, &yp, &yp, &n0, &n1, &n_rows, &n_cols, &row_bytes, &n_tok};
  ASSERT_TRUE(api->launch(KernelRef{&source, entry}, grid, block, args).ok());
  std::vector<float> y(static_cast<size_t>(n_tok) * n_rows);
  ASSERT_TRUE(api->download(y.data(), dy->get(), y_bytes).ok());
  for (int t = 0; t < n_tok; ++t) {
    for (int r = 0; r < n_rows; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (int i = 0; i < n_cols; ++i) {
        const float xv = std::min(x[static_cast<size_t>(t) * n_cols + i], 65504.0f);
        const double p =
            static_cast<double>(f16_round(w.values[static_cast<size_t>(r) * n_cols + i])) *
            f16_round(xv);
        want += p;
        magnitude += std::fabs(p);
      }
      ASSERT_NEAR(y[static_cast<size_t>(t) * n_rows + r], want, 1e-4 * magnitude + 1e-6)
          << "token " << t << ", row " << r;
    }
  }
}

TEST_P(Kernels, MmaMatchesTheReferenceForEveryBlockType) {
  const int n_rows = 70, n_tok = 67;
  for (const TypeCase& c : type_cases()) {
    const std::string entry = cuda_kernels::mma3_entry(c.type);
    if (entry.empty()) continue;
    const bool k_quant = c.type == GgmlType::kQ4_K || c.type == GgmlType::kQ5_K ||
                         c.type == GgmlType::kQ6_K;
    for (const int n_cols : {256, 96}) {
      if (k_quant && n_cols % 256 != 0) continue;
      SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " + std::to_string(n_cols) +
                   " columns");
      expect_f16_tensor_core_products(api_.get(), mma_source(c.type), entry, c.type, n_rows, n_tok, n_cols,
                                      2 * 2, cuda_kernels::kMmaThreads);
    }
  }
}

// The f16 product on sm_90's warpgroup instructions (wgmma_source.h) from
// int8 rows (strata_quantize_rows, as the backend gives them): against the
// double sum of f16(w) f16(d q), q and d the cpu backend's rounding of x
// (reference::ops::round_activations), |y - ref| <= 1e-4 sum |w x| +
// 1e-6. 300 rows and 131 tokens (two 256 x 128 tiles each way, the second
// part full), 32 and 96 columns for the 32-value types (one step; three:
// both shared buffers and both sets of loads in flight, the last step
// alone) and 256 for the K-quants (eight); a token holds a 1e5 (f16
// saturates its values at 65504). A device that is not sm_90 has no
// wgmma: the test skips there saying so.
TEST_P(Kernels, WgmmaMatchesTheReferenceForEveryBlockType) {
  if (api_->compute_capability() != cuda_kernels::kWgmmaComputeCapability) {
    GTEST_SKIP() << api_->describe() << " is compute "
                 << api_->compute_capability() << ": wgmma is sm_90's";
  }
  const int n_rows = 300, n_tok = 131;
  int types = 0;
  for (const TypeCase& c : type_cases()) {
    const std::string entry = cuda_kernels::wgmma3_entry(c.type);
    if (entry.empty()) continue;
    ++types;
    const int kind = cuda_kernels::round_kind(c.type);
    for (const int n_cols : kind == cuda_kernels::kRoundQ8_K
                                ? std::vector<int>{256}
                                : std::vector<int>{32, 96}) {
      SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " +
                   std::to_string(n_cols) + " columns");
      const Quantized w = quantized(c.type, n_rows, n_cols, 35);
      std::vector<float> x =
          normal_values(static_cast<size_t>(n_tok) * n_cols, 36);
      x[static_cast<size_t>(3) * n_cols + 5] = 1e5f;
      DeviceBuffer dw = put(w.bytes), dx = put(x);
      const DeviceInt8Rows rows = int8_rows(dx, x.size(), kind);
      const DeviceBuffer &dq = rows.q, &dd = rows.d;
      DeviceBuffer dy =
          space(static_cast<size_t>(n_tok) * n_rows * sizeof(float));
      ASSERT_TRUE(run(wgmma_source(c.type), entry, 2 * 2,
                      cuda_kernels::kWgmmaThreads, dw.as<const unsigned char>(),
                      dq.as<const signed char>(), dd.as<const float>(),
                      dy.as<float>(), dy.as<float>(), dy.as<float>(), n_rows, 0,
                      n_rows, n_cols, w.row_bytes, n_tok)
                      .ok());
      const std::vector<float> y =
          get<float>(dy, static_cast<size_t>(n_tok) * n_rows);
      std::vector<float> xr(static_cast<size_t>(n_cols));
      for (int t = 0; t < n_tok; ++t) {
        reference::ops::round_activations(
            reference::ops::activation_type(c.type),
            x.data() + static_cast<size_t>(t) * n_cols, n_cols, xr.data());
        for (int r = 0; r < n_rows; ++r) {
          double want = 0.0, magnitude = 0.0;
          for (int i = 0; i < n_cols; ++i) {
            const double p =
                static_cast<double>(
                    f16_round(w.values[static_cast<size_t>(r) * n_cols + i])) *
                f16_round(std::clamp(xr[static_cast<size_t>(i)], -65504.0f,
                                     65504.0f));
            want += p;
            magnitude += std::fabs(p);
          }
          ASSERT_NEAR(y[static_cast<size_t>(t) * n_rows + r], want,
                      1e-4 * magnitude + 1e-6)
              << "token " << t << ", row " << r;
        }
      }
    }
  }
  EXPECT_EQ(types, 9);
}

// A K-quant's min of unit u of a row (dmin times the 6-bit min of
// get_scale_min_k4): the term the int8 kernel subtracts apart; 0 for the
// other types.
float unit_min(GgmlType type, const uint8_t* row, int u) {
  if (type != GgmlType::kQ4_K && type != GgmlType::kQ5_K) return 0.0f;
  const uint8_t* b =
      row + static_cast<size_t>(u / 8) * (type == GgmlType::kQ4_K ? 144 : 176);
  const int s = u % 8;
  const uint8_t* sc = b + 4;
  const int m = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
  return reference::f16_to_f32(static_cast<uint16_t>(b[2] | (b[3] << 8))) * static_cast<float>(m);
}

// A Q4_1 / Q5_1 unit's offset m (value = d q + m): the term that
// multiplies Q8_1's s on the cpu backend; 0 for the other types.
float unit_offset(GgmlType type, const uint8_t* row, int u) {
  if (type != GgmlType::kQ4_1 && type != GgmlType::kQ5_1) return 0.0f;
  const uint8_t* b = row + static_cast<size_t>(u) * (type == GgmlType::kQ4_1 ? 20 : 24);
  return reference::f16_to_f32(static_cast<uint16_t>(b[2] | (b[3] << 8)));
}

// The cpu backend's product of weight row r of w and activations x [n_cols]
// in double, from its pieces: the dequantized weights times the rows'
// rounded values (reference::ops::round_activations of the type the
// weights pair with), except that a Q4_1 / Q5_1 unit's offset multiplies
// Q8_1's s = f16(d sum q) (reference::ops::quantize_q8_1_row), not the sum
// of the rounded values; and the magnitude the int8 kernels' float error
// scales with: sum |w x| + |min x| (a K-quant's unit sums its scaled
// products and its min's apart, as ggml's q4_K dot product does) + |m s|.
struct Int8Want {
  double value = 0.0;
  double magnitude = 0.0;
};
Int8Want int8_want(GgmlType type, const Quantized& w, int r, int n_cols, const float* x) {
  std::vector<float> xr(static_cast<size_t>(n_cols));
  const GgmlType act = reference::ops::activation_type(type);
  reference::ops::round_activations(act, x, n_cols, xr.data());
  std::vector<int8_t> q(static_cast<size_t>(n_cols));
  std::vector<float> d(static_cast<size_t>(n_cols / 32)), s(d.size());
  if (act == GgmlType::kQ8_1) reference::ops::quantize_q8_1_row(x, n_cols, q.data(), d.data(), s.data());
  const uint8_t* row = w.gguf.data() + static_cast<size_t>(r) * w.gguf_row_bytes;
  Int8Want want;
  for (int u = 0; u < n_cols / 32; ++u) {
    const double m = unit_offset(type, row, u);
    for (int i = 32 * u; i < 32 * u + 32; ++i) {
      const double p = (static_cast<double>(w.values[static_cast<size_t>(r) * n_cols + i]) - m) *
                       xr[static_cast<size_t>(i)];
      want.value += p;
      want.magnitude +=
          std::fabs(p) + std::fabs(unit_min(type, row, u) * xr[static_cast<size_t>(i)]);
    }
    want.value += m * s[static_cast<size_t>(u)];
    want.magnitude += std::fabs(m * s[static_cast<size_t>(u)]);
  }
  return want;
}

// The int8 tensor-core kernel, every type it takes: the rows quantized by
// strata_quantize_rows (Q8_0, Q8_1 or Q8_K, as the cpu backend pairs them),
// the weights' q times the rows' q exact per unit, against the cpu
// backend's double sum (int8_want): float sums of per-unit terms,
// |y - ref| <= 1e-5 magnitude + 1e-6. 70 rows and 67 tokens (two tiles
// each way, the second part full), 96 columns for the 32-value types (a
// step of one unit and a zero half), a token with a 1e5 (Q8_1's f16 s of
// its unit overflows: the cpu backend's product is infinite, and so is the
// kernel's).
TEST_P(Kernels, MmaInt8MatchesTheReferenceForEveryTypeItTakes) {
  const int n_rows = 70, n_tok = 67;
  int types = 0;
  for (const TypeCase& c : type_cases()) {
    const std::string entry = cuda_kernels::mma3_i8_entry(c.type);
    if (entry.empty()) continue;
    ++types;
    const int kind = cuda_kernels::round_kind(c.type);
    for (const int n_cols : {512, 96}) {  // K-quants: two superblocks
      if (kind == cuda_kernels::kRoundQ8_K && n_cols % 256 != 0) continue;
      SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " + std::to_string(n_cols) +
                   " columns");
      const Quantized w = quantized(c.type, n_rows, n_cols, 33);
      std::vector<float> x = normal_values(static_cast<size_t>(n_tok) * n_cols, 34);
      x[static_cast<size_t>(3) * n_cols + 5] = 1e5f;
      DeviceBuffer dw = put(w.bytes), dx = put(x);
      const DeviceInt8Rows rows = int8_rows(dx, x.size(), kind);
      const DeviceBuffer &dq = rows.q, &dd = rows.d, &ds = rows.sums;
      DeviceBuffer dy = space(static_cast<size_t>(n_tok) * n_rows * sizeof(float));
      ASSERT_TRUE(run(mma_source(c.type), entry, 2 * 2, cuda_kernels::kMmaThreads,
                      dw.as<const unsigned char>(), dq.as<const signed char>(),
                      dd.as<const float>(), ds.as<const float>(), dy.as<float>(), dy.as<float>(),
                      dy.as<float>(), n_rows, 0, n_rows, n_cols, w.row_bytes, n_tok)
                      .ok());
      const std::vector<float> y = get<float>(dy, static_cast<size_t>(n_tok) * n_rows);
      for (int t = 0; t < n_tok; ++t) {
        for (int r = 0; r < n_rows; ++r) {
          const Int8Want want =
              int8_want(c.type, w, r, n_cols, x.data() + static_cast<size_t>(t) * n_cols);
          if (std::isinf(want.value)) {  // Q8_1's f16 s overflows at the 1e5, as ggml's does
            ASSERT_EQ(y[static_cast<size_t>(t) * n_rows + r], want.value) << "token " << t;
            continue;
          }
          ASSERT_NEAR(y[static_cast<size_t>(t) * n_rows + r], want.value,
                      1e-5 * want.magnitude + 1e-6)
              << "token " << t << ", row " << r;
        }
      }
    }
  }
  EXPECT_EQ(types, 9);
}

// The matvec kernel's int8 form (decode on the rows' Q8 values, dp4a):
// every type it takes, 1 column and 3 (split-K, 4 warps a row), fewer and
// more units than a warp's lanes, a column with an outlier (its units'
// scales far apart). Against the cpu backend's double sum (int8_want),
// within float rounding of the per-unit sums: |y - ref| <= 1e-5 magnitude
// + 1e-6.
TEST_P(Kernels, MatvecInt8MatchesTheReferenceForEveryTypeItTakes) {
  int types = 0;
  uint32_t seed = 50;
  for (const TypeCase& c : type_cases()) {
    const std::string entry = cuda_kernels::matvec3_i8_entry(c.type);
    if (entry.empty()) continue;
    ++types;
    const int kind = cuda_kernels::round_kind(c.type);
    for (const int columns : {1, 3}) {
      for (const int n_cols : {256, 2304, 96}) {
        if (kind == cuda_kernels::kRoundQ8_K && n_cols % 256 != 0) continue;
        const int n_rows = 9;
        SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " + std::to_string(columns) +
                     " columns, " + std::to_string(n_cols));
        const Quantized w = quantized(c.type, n_rows, n_cols, seed++);
        std::vector<float> x = normal_values(static_cast<size_t>(columns) * n_cols, seed++);
        x[static_cast<size_t>(columns - 1) * n_cols + 7] = 3e4f;
        DeviceBuffer dw = put(w.bytes), dx = put(x);
        const DeviceInt8Rows rows = int8_rows(dx, x.size(), kind);
        const DeviceBuffer &dq = rows.q, &dd = rows.d, &ds = rows.sums;
        DeviceBuffer dy = space(static_cast<size_t>(columns) * n_rows * sizeof(float));
        // kMatvec3's int8 form: 3 rows a warp (WARP_ROWS), one warp group a block.
        const unsigned per_block = columns == 1 ? kMatvecThreads / 32 : 3;
        ASSERT_TRUE(run(columns == 1 ? kMatvec1 : kMatvec3, entry,
                        (n_rows + per_block - 1) / per_block, kMatvecThreads,
                        dw.as<const unsigned char>(), dq.as<const signed char>(),
                        dd.as<const float>(), ds.as<const float>(), dy.as<float>(),
                        dy.as<float>(), dy.as<float>(), n_rows, 0, n_rows, n_cols, w.row_bytes)
                        .ok());
        const std::vector<float> y = get<float>(dy, static_cast<size_t>(columns) * n_rows);
        for (int col = 0; col < columns; ++col) {
          for (int r = 0; r < n_rows; ++r) {
            const Int8Want want =
                int8_want(c.type, w, r, n_cols, x.data() + static_cast<size_t>(col) * n_cols);
            ASSERT_NEAR(y[static_cast<size_t>(col) * n_rows + r], want.value,
                        1e-5 * want.magnitude + 1e-6)
                << "column " << col << ", row " << r;
          }
        }
      }
    }
  }
  EXPECT_EQ(types, 9);
}

// The int8 form's rows a warp (WARP_ROWS) change no bit of a row's sums:
// 3 rows a warp against one, 3 columns split-K over 4 warps, rows that
// leave the last warp part full (10 = 3 + 3 + 3 + 1).
TEST_P(Kernels, MatvecInt8RowsAWarpChangeNoBits) {
  int types = 0;
  for (const TypeCase& c : type_cases()) {
    const std::string entry = cuda_kernels::matvec3_i8_entry(c.type);
    if (entry.empty()) continue;
    ++types;
    SCOPED_TRACE(ggml_type_info(c.type).name);
    const int kind = cuda_kernels::round_kind(c.type);
    const int n_rows = 10, n_cols = 512, columns = 3;
    const Quantized w = quantized(c.type, n_rows, n_cols, 60);
    const std::vector<float> x = normal_values(static_cast<size_t>(columns) * n_cols, 61);
    DeviceBuffer dw = put(w.bytes), dx = put(x);
    const DeviceInt8Rows rows = int8_rows(dx, x.size(), kind);
    const DeviceBuffer &dq = rows.q, &dd = rows.d, &ds = rows.sums;
    std::vector<float> got[2];
    for (const int rows_a_warp : {3, 1}) {
      DeviceBuffer dy = space(static_cast<size_t>(columns) * n_rows * sizeof(float));
      ASSERT_TRUE(run(rows_a_warp == 3 ? kMatvec3 : kMatvec3Row, entry,
                      (n_rows + rows_a_warp - 1) / rows_a_warp, kMatvecThreads,
                      dw.as<const unsigned char>(), dq.as<const signed char>(),
                      dd.as<const float>(), ds.as<const float>(), dy.as<float>(), dy.as<float>(),
                      dy.as<float>(), n_rows, 0, n_rows, n_cols, w.row_bytes)
                      .ok());
      got[rows_a_warp == 3 ? 0 : 1] = get<float>(dy, static_cast<size_t>(columns) * n_rows);
    }
    EXPECT_EQ(got[0], got[1]);
  }
  EXPECT_EQ(types, 9);
}

// The int8 form on the tensor cores (matvec3_mma_entry) gives the dp4a
// kernel's outputs bit for bit, in the backend's builds (step_sources())
// of 16, 8 and 1 columns and each split (1, 2, 4 warps a row: the sums it
// reproduces differ): every type with an int8 form, 70 rows (a partial
// 16-row tile), rows of 33 units (a lane with two), 72 (past 32 R) and 3
// or 8 (lanes with none), a column with a 3e4.
TEST_P(Kernels, MatvecMmaGivesTheInt8KernelsBits) {
  struct Case {
    size_t columns_at, split_at;  // kStepMatvecColumns, kStepRowWarps indices
    bool wide;
  };
  static_assert(cuda_kernels::kStepMatvecColumns[4] == 16 &&
                cuda_kernels::kStepMatvecColumns[3] == 8 && cuda_kernels::kStepRowWarps[2] == 4);
  int types = 0;
  for (const TypeCase& c : type_cases()) {
    const std::string i8 = cuda_kernels::matvec3_i8_entry(c.type);
    if (i8.empty()) continue;
    ++types;
    const int kind = cuda_kernels::round_kind(c.type);
    const bool k_quant = kind == cuda_kernels::kRoundQ8_K;
    for (const Case& k : {Case{4, 0, true}, Case{3, 2, true}, Case{4, 1, false}, Case{0, 2, false}}) {
      const int columns = cuda_kernels::kStepMatvecColumns[k.columns_at];
      const int split = cuda_kernels::kStepRowWarps[k.split_at];
      const int n_rows = 70;
      const int n_cols = k.wide ? (k_quant ? 2304 : 1056) : (k_quant ? 256 : 96);
      SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " + std::to_string(columns) +
                   " columns, split " + std::to_string(split) + ", " + std::to_string(n_cols));
      const Quantized w = quantized(c.type, n_rows, n_cols, 70);
      std::vector<float> x = normal_values(static_cast<size_t>(columns) * n_cols, 71);
      x[static_cast<size_t>(columns - 1) * n_cols + 9] = 3e4f;
      DeviceBuffer dw = put(w.bytes), dx = put(x);
      const DeviceInt8Rows rows = int8_rows(dx, x.size(), kind);
      const KernelSource& build = cuda_kernels::step_sources()
          .matvec[cuda_kernels::step_matvec_type_index(c.type)][k.split_at][k.columns_at];
      std::vector<float> got[2];
      for (const bool mma : {false, true}) {
        const unsigned block = 128;
        const int rows_a_block = mma ? block / 32 * 16
                                     : static_cast<int>(block) / 32 / split *
                                           cuda_kernels::matvec_i8_warp_rows(columns);
        DeviceBuffer dy = space(static_cast<size_t>(columns) * n_rows * sizeof(float));
        ASSERT_TRUE(run(build, mma ? cuda_kernels::matvec3_mma_entry(c.type) : i8,
                        static_cast<unsigned>((n_rows + rows_a_block - 1) / rows_a_block), block,
                        dw.as<const unsigned char>(), rows.q.as<const signed char>(),
                        rows.d.as<const float>(), rows.sums.as<const float>(), dy.as<float>(),
                        dy.as<float>(), dy.as<float>(), n_rows, 0, n_rows, n_cols, w.row_bytes)
                        .ok());
        got[mma] = get<float>(dy, static_cast<size_t>(columns) * n_rows);
      }
      for (size_t at = 0; at < got[0].size(); ++at) {
        ASSERT_EQ(got[1][at], got[0][at]) << "column " << at / n_rows << ", row " << at % n_rows;
      }
    }
  }
  EXPECT_EQ(types, 9);
}

// Batch invariance: a token's results are the same bits however many
// tokens run with it and wherever its tile puts it (5 tokens from the
// middle of 67 alone); the three-output form puts each part's rows in its
// own output with the one-output values.
TEST_P(Kernels, MmaTokensDoNotDependOnTheOthers) {
  const int n_rows = 70, n_tok = 67, n_cols = 256, first = 37, few = 5, n0 = 20, n1 = 30;
  for (const GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_info(type).name);
    const std::string entry = cuda_kernels::mma3_entry(type);
    const Quantized w = quantized(type, n_rows, n_cols, 41);
    const std::vector<float> x = normal_values(static_cast<size_t>(n_tok) * n_cols, 42);
    DeviceBuffer dw = put(w.bytes), dx = put(x);
    DeviceBuffer all = space(static_cast<size_t>(n_tok) * n_rows * sizeof(float));
    ASSERT_TRUE(run(mma_source(type), entry, 4, cuda_kernels::kMmaThreads, dw.as<const unsigned char>(),
                    dx.as<const float>(), all.as<float>(), all.as<float>(), all.as<float>(),
                    n_rows, 0, n_rows, n_cols, w.row_bytes, n_tok)
                    .ok());
    const std::vector<float> whole = get<float>(all, static_cast<size_t>(n_tok) * n_rows);
    DeviceBuffer y0 = space(static_cast<size_t>(few) * n0 * sizeof(float)),
                 y1 = space(static_cast<size_t>(few) * n1 * sizeof(float)),
                 y2 = space(static_cast<size_t>(few) * (n_rows - n0 - n1) * sizeof(float));
    ASSERT_TRUE(run(mma_source(type), entry, 2, cuda_kernels::kMmaThreads, dw.as<const unsigned char>(),
                    dx.as<const float>() + static_cast<size_t>(first) * n_cols, y0.as<float>(),
                    y1.as<float>(), y2.as<float>(), n0, n1, n_rows, n_cols, w.row_bytes, few)
                    .ok());
    const std::vector<float> g0 = get<float>(y0, static_cast<size_t>(few) * n0),
                             g1 = get<float>(y1, static_cast<size_t>(few) * n1),
                             g2 = get<float>(y2, static_cast<size_t>(few) * (n_rows - n0 - n1));
    for (int t = 0; t < few; ++t) {
      for (int r = 0; r < n_rows; ++r) {
        const float got = r < n0        ? g0[static_cast<size_t>(t) * n0 + r]
                          : r < n0 + n1 ? g1[static_cast<size_t>(t) * n1 + r - n0]
                                        : g2[static_cast<size_t>(t) * (n_rows - n0 - n1) + r -
                                             n0 - n1];
        ASSERT_EQ(got, whole[static_cast<size_t>(first + t) * n_rows + r])
            << "token " << first + t << ", row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace strata::worker::kernels_test
