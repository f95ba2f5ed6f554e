// The matvec kernels' CUDA source (worker/cuda/kernels/matvec.cuh) compiled
// for the CPU and run here, without a GPU (tests/cuda/cuda_emulator.h: a
// thread a CUDA thread, barriers for the warps' shuffles). The formats' bit
// unpacking, the units' indexing and the lanes' reduction are checked
// against the CPU reference (quantize_row -> dequantize_row, dot products
// in double) with the device test's bound, |y - ref| <= 1e-5 sum|w x| +
// 1e-6, at 1 and 3 columns. What only the device shows (PTX, launch limits,
// the f16 conversion instruction) is CudaKernel.MatvecMatchesCpuReference
// ForEveryType.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/quantize.h"
#include "model/ggml_type.h"

#include "tests/cuda/cuda_emulator.h"

namespace strata::worker::emulation {

#define THREADS 128
namespace one_column {
using namespace strata::cuda_emulation;
#define NCOLS 1
#include "worker/cuda/kernels/matvec.cuh"
#undef NCOLS
#undef STRATA_UNROLL
#undef STRATA_MATVEC
}  // namespace one_column
namespace three_columns {
using namespace strata::cuda_emulation;
#define NCOLS 3
#include "worker/cuda/kernels/matvec.cuh"
#undef NCOLS
}  // namespace three_columns

using Kernel = void (*)(const unsigned char*, const float*, float*, int, int, long long);

namespace {

using RowsKernel = void (*)(const unsigned char*, const int*, float*, int, int, long long);

struct Case {
  GgmlType type;
  Kernel one, three;
  RowsKernel rows;
};

const Case kCases[] = {
    {GgmlType::kF32, one_column::strata_matvec_f32, three_columns::strata_matvec_f32,
     one_column::strata_get_rows_f32},
    {GgmlType::kF16, one_column::strata_matvec_f16, three_columns::strata_matvec_f16,
     one_column::strata_get_rows_f16},
    {GgmlType::kQ4_0, one_column::strata_matvec_q4_0, three_columns::strata_matvec_q4_0,
     one_column::strata_get_rows_q4_0},
    {GgmlType::kQ4_1, one_column::strata_matvec_q4_1, three_columns::strata_matvec_q4_1,
     one_column::strata_get_rows_q4_1},
    {GgmlType::kQ8_0, one_column::strata_matvec_q8_0, three_columns::strata_matvec_q8_0,
     one_column::strata_get_rows_q8_0},
    {GgmlType::kQ4_K, one_column::strata_matvec_q4_k, three_columns::strata_matvec_q4_k,
     one_column::strata_get_rows_q4_k},
    {GgmlType::kQ6_K, one_column::strata_matvec_q6_k, three_columns::strata_matvec_q6_k,
     one_column::strata_get_rows_q6_k},
};

TEST(CudaMatvecEmulated, EveryTypeMatchesTheCpuReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : kCases) {
    for (const int columns : {1, 3}) {
      // 256: fewer units than lanes; 2304: more (9 super-blocks, 72 units).
      for (const int n_cols : {256, 2304}) {
        for (const int n_rows : {1, 5, 9}) {
          SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + ", " +
                       std::to_string(columns) + " columns, " + std::to_string(n_rows) + " x " +
                       std::to_string(n_cols));
          const int64_t row_bytes = *ggml_row_bytes(c.type, n_cols);
          std::vector<unsigned char> w(static_cast<size_t>(row_bytes) * n_rows);
          std::vector<float> dequant(static_cast<size_t>(n_rows) * n_cols);
          for (int r = 0; r < n_rows; ++r) {
            std::vector<float> row(static_cast<size_t>(n_cols));
            for (float& v : row) v = normal(rng);
            unsigned char* bytes = w.data() + static_cast<size_t>(r) * row_bytes;
            ASSERT_TRUE(reference::quantize_row(c.type, row.data(), n_cols, bytes).ok());
            ASSERT_TRUE(reference::dequantize_row(c.type, bytes, n_cols,
                                                  dequant.data() + static_cast<size_t>(r) * n_cols)
                            .ok());
          }
          std::vector<float> x(static_cast<size_t>(columns) * n_cols);
          for (float& v : x) v = normal(rng);
          std::vector<float> y(static_cast<size_t>(columns) * n_rows, std::nanf(""));
          const int per_block = THREADS / 32;
          const Kernel kernel = columns == 1 ? c.one : c.three;
          cuda_emulation::launch((n_rows + per_block - 1) / per_block, THREADS, [&] {
            kernel(w.data(), x.data(), y.data(), n_rows, n_cols, row_bytes);
          });
          for (int col = 0; col < columns; ++col) {
            for (int r = 0; r < n_rows; ++r) {
              double want = 0.0, magnitude = 0.0;
              for (int i = 0; i < n_cols; ++i) {
                const double p =
                    static_cast<double>(dequant[static_cast<size_t>(r) * n_cols + i]) *
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
}

// get_rows (the token embedding): each id's row dequantized, exactly the
// reference's values (the same formulas, no sums); ids repeat and come in
// any order.
TEST(CudaMatvecEmulated, GetRowsDequantizesTheRowsOfTheIds) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int n_rows = 6, n_cols = 512;
  const std::vector<int> ids = {5, 0, 5, 2, 3};
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(ggml_type_info(c.type).name));
    const int64_t row_bytes = *ggml_row_bytes(c.type, n_cols);
    std::vector<unsigned char> table(static_cast<size_t>(row_bytes) * n_rows);
    std::vector<float> rows(static_cast<size_t>(n_rows) * n_cols);
    for (int r = 0; r < n_rows; ++r) {
      std::vector<float> row(static_cast<size_t>(n_cols));
      for (float& v : row) v = normal(rng);
      unsigned char* bytes = table.data() + static_cast<size_t>(r) * row_bytes;
      ASSERT_TRUE(reference::quantize_row(c.type, row.data(), n_cols, bytes).ok());
      ASSERT_TRUE(reference::dequantize_row(c.type, bytes, n_cols,
                                            rows.data() + static_cast<size_t>(r) * n_cols)
                      .ok());
    }
    std::vector<float> got(ids.size() * n_cols, std::nanf(""));
    cuda_emulation::launch(2, 64, [&] {
      c.rows(table.data(), ids.data(), got.data(), static_cast<int>(ids.size()), n_cols,
             row_bytes);
    });
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int col = 0; col < n_cols; ++col) {
        ASSERT_EQ(got[i * n_cols + col], rows[static_cast<size_t>(ids[i]) * n_cols + col])
            << "id " << ids[i] << ", column " << col;
      }
    }
  }
}

}  // namespace
}  // namespace strata::worker::emulation
