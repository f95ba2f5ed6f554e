// Every generated matmul kernel against the reference matmul
// (kernels/cpu/reference/ops/matmul.h) on random weights and activations:
// every weight type with a generator, every ISA tier this CPU runs, ragged
// shapes (n_out not a multiple of any tile; n_rows 1, 2, 3, 7, 64, 513),
// 1 and 2 threads, default and non-default tile parameters.
//
// Tolerance: |y_jit - y_ref| <= 1e-5 * sum_k |w_k x_k| (+1e-30), i.e.
// relative to the magnitude of the sum, not of the result: the integer
// products are exact in both, so the two may differ only by f32 summation
// order (and, for zero points, by applying the offset as a separate f32
// term), a few ulps of the largest partial sum.
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/jit/activations.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/quantize.h"

namespace strata::kernels::jit {
namespace {

namespace ops = reference::ops;

constexpr double kRelTolerance = 1e-5;

struct Matrix {
  GgmlType type;
  int64_t n_in, n_out;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [n_out][n_in]
  WeightMatrix view() const {
    auto w = ops::make_weight_matrix("w", type, bytes.data(), n_in, n_out,
                                     bytes.size());
    EXPECT_TRUE(w.ok()) << w.status();
    return *w;
  }
};

Matrix random_matrix(GgmlType type, int64_t n_in, int64_t n_out,
                     std::mt19937& rng) {
  Matrix m{type, n_in, n_out, {}, {}};
  const int64_t row_bytes = *ggml_row_bytes(type, n_in);
  m.bytes.resize(static_cast<size_t>(row_bytes * n_out));
  m.dequantized.resize(static_cast<size_t>(n_in * n_out));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    // Row scales vary, and some rows are all zero, to reach every branch.
    const float scale = r % 11 == 5 ? 0.0f : std::exp(dist(rng));
    for (float& v : row) v = scale * dist(rng);
    EXPECT_TRUE(reference::quantize_row(type, row.data(), n_in,
                                        m.bytes.data() + r * row_bytes)
                    .ok());
    EXPECT_TRUE(reference::dequantize_row(type, m.bytes.data() + r * row_bytes,
                                          n_in, m.dequantized.data() + r * n_in)
                    .ok());
  }
  return m;
}

std::vector<float> random_activations(int64_t n_rows, int64_t n_in,
                                      std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_rows * n_in));
  for (int64_t t = 0; t < n_rows; ++t) {
    const float scale = t % 5 == 3 ? 100.0f : 1.0f;  // outliers per row
    for (int64_t i = 0; i < n_in; ++i) x[t * n_in + i] = scale * dist(rng);
  }
  if (n_rows > 1) {  // one all-zero activation block
    for (int64_t i = 0; i < std::min<int64_t>(32, n_in); ++i)
      x[n_in + i] = 0.0f;
  }
  return x;
}

// Checks run() against the reference for one matrix, every row count and
// both thread counts; returns the number of compared outputs.
int64_t check(const Matrix& m, IsaTier tier, const KernelParams& params,
              const std::string& what, double* worst) {
  static const int64_t kRows[] = {1, 2, 3, 7, 64, 513};
  std::mt19937 rng(1234);
  const WeightMatrix w = m.view();
  int64_t compared = 0;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    KernelCache cache;
    auto mm = JitMatmul::create(w, tier, params, &cache, pool);
    EXPECT_TRUE(mm.ok()) << what << ": " << mm.status();
    if (!mm.ok()) return compared;
    JitScratch scratch(513, m.n_in);
    ops::MatmulScratch ref_scratch(513, m.n_in, threads);
    for (int64_t n_rows : kRows) {
      const std::vector<float> x = random_activations(n_rows, m.n_in, rng);
      std::vector<float> y(static_cast<size_t>(n_rows * m.n_out), NAN);
      std::vector<float> ref(y.size());
      (*mm)->run(x.data(), n_rows, y.data(), scratch, pool);
      ops::matmul(w, x.data(), n_rows, ref.data(), ref_scratch, pool);
      int failures = 0;
      for (int64_t t = 0; t < n_rows; ++t) {
        for (int64_t r = 0; r < m.n_out; ++r) {
          double mag = 0.0;
          for (int64_t k = 0; k < m.n_in; ++k) {
            mag += std::fabs(double{m.dequantized[r * m.n_in + k]} *
                             x[t * m.n_in + k]);
          }
          const double got = y[t * m.n_out + r];
          const double want = ref[t * m.n_out + r];
          const double tol = kRelTolerance * mag + 1e-30;
          if (mag > 0) *worst = std::max(*worst, std::fabs(got - want) / mag);
          if (!(std::fabs(got - want) <= tol) && failures++ < 5) {
            ADD_FAILURE() << what << " threads=" << threads
                          << " n_rows=" << n_rows << " y[" << t << "][" << r
                          << "] = " << got << ", reference " << want
                          << " (tolerance " << tol << ")";
          }
          ++compared;
        }
      }
    }
  }
  return compared;
}

struct Shape {
  int64_t n_in, n_out;
};

std::vector<Shape> shapes_for(GgmlType type) {
  const int64_t block = ggml_type_info(type).block_size;
  // Rows: several groups and a partial one (37, 35: also of 16-row
  // groups), and fewer than one group.
  if (block == 256) return {{256, 37}, {768, 13}};
  if (block == 32) return {{96, 37}, {576, 13}, {32, 5}, {160, 9}, {64, 35}};
  return {{100, 37}, {64, 13}, {3, 6}};  // float types: ragged n_in too
}

class JitMatmulTest
    : public ::testing::TestWithParam<std::tuple<GgmlType, IsaTier>> {};

TEST_P(JitMatmulTest, EqualsReferenceOnRaggedShapes) {
  const auto [type, tier] = GetParam();
  if (!cpu_has(tier)) {
    GTEST_SKIP() << "this CPU lacks the " << isa_name(tier) << " tier";
  }
  std::mt19937 rng(static_cast<unsigned>(type) * 31 + 7);
  // Default parameters, the widest tile, a tall one, and prefetch + unroll.
  const PackedLayout layout =
      *packed_layout(type, shapes_for(type)[0].n_in, 1, tier);
  // (A structured binding cannot be captured before C++20 in clang 14.)
  const int limit = [&, tier = tier] {
    TileConf c;
    c.encoding = layout.encoding;
    c.paired_scales = layout.paired_scales;
    c.interleaved = layout.row_group > 1;
    if (c.interleaved) c.group = layout.row_group;
    c.wide = tier != IsaTier::kAvx2 && c.interleaved;
    c.vnni = tier == IsaTier::kAvx512Vnni && c.interleaved;
    return max_tile(c);
  }();
  // Interleaved layouts: tiles are row groups (8, or 16 on avx512vnni),
  // only cols varies.
  const int group = layout.row_group;
  std::vector<KernelParams> variants(4, default_params(type, tier));
  variants[1].rows = 1;
  variants[1].cols = group > 1 ? limit / group : limit;
  variants[1].decode_rows = limit;
  variants[2].rows = limit / 2;
  variants[2].cols = group > 1 ? 1 : 2;
  variants[2].unroll = 3;
  variants[2].act_block = 5;
  variants[3].unroll = 4;
  variants[3].prefetch = 256;
  variants[3].decode_rows = 3;
  variants[3].row_grain = 3;
  int64_t compared = 0;
  double worst = 0.0;
  for (const Shape& s : shapes_for(type)) {
    const Matrix m = random_matrix(type, s.n_in, s.n_out, rng);
    for (const KernelParams& p : variants) {
      compared += check(m, tier, p,
                        std::string(ggml_type_info(type).name) + " " +
                            std::to_string(s.n_in) + "x" +
                            std::to_string(s.n_out) + " " + params_text(p),
                        &worst);
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(compared, 0);
  std::printf("%s: %lld outputs, max |jit - reference| / sum |w x| = %.2g\n",
              std::string(ggml_type_info(type).name).c_str(),
              static_cast<long long>(compared), worst);
}

std::string test_name(
    const ::testing::TestParamInfo<std::tuple<GgmlType, IsaTier>>& info) {
  return std::string(ggml_type_info(std::get<0>(info.param)).name) + "_" +
         isa_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAndTiers, JitMatmulTest,
    ::testing::Combine(::testing::Values(GgmlType::kQ4_0, GgmlType::kQ4_1,
                                         GgmlType::kQ5_0, GgmlType::kQ5_1,
                                         GgmlType::kQ8_0, GgmlType::kMXFP4,
                                         GgmlType::kQ4_K, GgmlType::kQ5_K,
                                         GgmlType::kQ6_K, GgmlType::kF16,
                                         GgmlType::kBF16, GgmlType::kF32),
                       ::testing::Values(IsaTier::kAvx2, IsaTier::kAvx512,
                                         IsaTier::kAvx512Vnni)),
    test_name);

// Q8_0 weights of -128 (legal in a file though ggml never writes them):
// |w| = 128 still fits vpmaddubsw's unsigned operand (AVX2), and w + 128 =
// 0 is the bottom of the VNNI tier's unsigned range.
TEST(JitMatmul, Q8_0WithMinus128EqualsReference) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  std::mt19937 rng(99);
  Matrix m = random_matrix(GgmlType::kQ8_0, 96, 21, rng);
  const int64_t row_bytes = *ggml_row_bytes(GgmlType::kQ8_0, 96);
  for (int64_t r = 0; r < 21; r += 4) {
    m.bytes[r * row_bytes + 2 + (r % 32)] = 0x80;  // qs[r % 32] = -128
    ASSERT_TRUE(reference::dequantize_row(GgmlType::kQ8_0,
                                          m.bytes.data() + r * row_bytes, 96,
                                          m.dequantized.data() + r * 96)
                    .ok());
  }
  double worst = 0.0;
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
    if (!cpu_has(t)) continue;  // the tiers test above says so
    check(m, t, default_params(GgmlType::kQ8_0, t),
          std::string("Q8_0 with -128, ") + isa_name(t), &worst);
  }
}

TEST(JitMatmul, RefusesTypesWithoutGenerator) {
  std::vector<uint8_t> bytes(*ggml_row_bytes(GgmlType::kQ2_K, 256));
  auto w = ops::make_weight_matrix("w", GgmlType::kQ2_K, bytes.data(), 256, 1,
                                   bytes.size());
  ASSERT_TRUE(w.ok());
  ThreadPool pool(1);
  auto mm =
      JitMatmul::create(*w, IsaTier::kAvx2, KernelParams{}, nullptr, pool);
  EXPECT_EQ(mm.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(kernel_name(GgmlType::kQ2_K, IsaTier::kAvx2).find("reference"),
            std::string::npos);
  EXPECT_NE(kernel_name(GgmlType::kQ4_1, IsaTier::kAvx2).find("avx2"),
            std::string::npos);
}

TEST(JitMatmul, RefusesTilesBeyondTheRegisterFile) {
  std::mt19937 rng(1);
  ThreadPool pool(1);
  // Q5_0 (row tiles): 4x4 accumulators; Q4_0 (8-row groups): 6 columns.
  for (auto [type, cols] :
       {std::pair{GgmlType::kQ5_0, 4}, std::pair{GgmlType::kQ4_0, 6}}) {
    const Matrix m = random_matrix(type, 64, 4, rng);
    KernelParams p;
    p.rows = 4;
    p.cols = cols;
    auto mm = JitMatmul::create(m.view(), IsaTier::kAvx2, p, nullptr, pool);
    EXPECT_EQ(mm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(mm.status().message().find("accumulators"), std::string::npos)
        << mm.status();
  }
}

// Every tier computes the same integer sums exactly and finishes them with
// the same f32 operations in the same order, so the tiers' outputs are
// equal bit for bit (Q8_0 on VNNI too: its zero point of 128 is taken off
// the int32 sums), whatever the tile shape.
TEST(JitMatmul, TiersAgreeBitForBit) {
  if (!cpu_has(IsaTier::kAvx512))
    GTEST_SKIP() << "this CPU lacks the avx512 tier";
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                        GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kMXFP4,
                        GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    const int64_t n_in = ggml_type_info(type).block_size == 256 ? 512 : 160;
    // 45 rows: two whole 16-row groups (one pair on the VNNI tier) and a
    // partial one; 61: three (a pair and one alone) and a partial one.
    for (int64_t n_out : {45, 61}) {
      const Matrix m = random_matrix(type, n_in, n_out, rng);
      const int64_t n_rows = 37;
      const std::vector<float> x = random_activations(n_rows, n_in, rng);
      JitScratch scratch(n_rows, n_in);
      std::vector<float> want;
      for (IsaTier t :
           {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
        if (!cpu_has(t)) continue;
        // VNNI: up to 6 columns pair row groups (max_paired_cols), 7 do not.
        for (int cols : {1, 3, 6, 7}) {
          KernelParams p = default_params(type, t);
          p.cols = std::min(cols, t == IsaTier::kAvx2 ? 3 : 7);
          auto mm = JitMatmul::create(m.view(), t, p, nullptr, pool);
          ASSERT_TRUE(mm.ok()) << mm.status();
          std::vector<float> y(static_cast<size_t>(n_rows * m.n_out));
          for (int64_t rows :
               {n_rows, int64_t{1}}) {  // prefill, then decode of row 0
            (*mm)->run(x.data(), rows, y.data(), scratch, pool);
            if (want.empty()) want = y;
            for (int64_t i = 0; i < rows * m.n_out; ++i) {
              ASSERT_EQ(std::memcmp(&y[i], &want[i], 4), 0)
                  << ggml_type_info(type).name << " " << isa_name(t)
                  << " cols=" << p.cols << " rows=" << rows << " output " << i
                  << ": " << y[i] << ", avx2 " << want[i];
            }
          }
        }
      }
    }
  }
}

// Batch invariance at the kernel: a row's output is the same bits whether
// it runs alone (the decode tile), among 2..16 rows (few-column tiles, with
// any few_cols) or among many (prefill tiles), on every type and tier.
TEST(JitMatmul, ARowsOutputDoesNotDependOnTheRowsBesideIt) {
  std::mt19937 rng(17);
  ThreadPool pool(2);
  for (IsaTier tier : {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
    if (!cpu_has(tier)) continue;
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ8_0,
                          GgmlType::kMXFP4, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                          GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      const int64_t block = ggml_type_info(type).block_size;
      const int64_t n_in = block == 256 ? 512 : block == 32 ? 160 : 100;
      const Matrix m = random_matrix(type, n_in, 45, rng);
      const int64_t n_rows = 40;
      const std::vector<float> x = random_activations(n_rows, n_in, rng);
      JitScratch scratch(n_rows, n_in);
      for (int few_cols : {0, 3}) {
        KernelParams p = default_params(type, tier);
        p.few_cols = few_cols;
        auto mm = JitMatmul::create(m.view(), tier, p, nullptr, pool);
        ASSERT_TRUE(mm.ok()) << mm.status();
        // Each row alone: the reference bits.
        std::vector<float> alone(static_cast<size_t>(n_rows * m.n_out));
        for (int64_t t = 0; t < n_rows; ++t) {
          (*mm)->run(x.data() + t * n_in, 1, alone.data() + t * m.n_out, scratch, pool);
        }
        for (int64_t rows : {2, 3, 5, 8, 13, 16, 17, 40}) {
          std::vector<float> y(static_cast<size_t>(rows * m.n_out));
          (*mm)->run(x.data(), rows, y.data(), scratch, pool);
          for (int64_t i = 0; i < rows * m.n_out; ++i) {
            ASSERT_EQ(std::memcmp(&y[i], &alone[i], 4), 0)
                << ggml_type_info(type).name << " " << isa_name(tier) << " few_cols=" << few_cols
                << " rows=" << rows << " output " << i << ": " << y[i] << ", alone " << alone[i];
          }
        }
      }
    }
  }
}

// A decode run's warm plan for the next matmul (set_decode_successor)
// names only bytes of that matmul's planes, from the start of the thread's
// share, and no more than asked (rounded up to whole row groups).
TEST(JitMatmul, DecodeWarmPlanStaysInsideTheThreadsShare) {
  std::mt19937 rng(9);
  const IsaTier tier = *select_isa();
  for (GgmlType type :
       {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ8_0,
        GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF16, GgmlType::kF32}) {
    const int64_t n_in = ggml_type_info(type).block_size == 256 ? 512 : 160;
    for (int64_t n_out : {int64_t{5}, int64_t{45}, int64_t{203}}) {
      const Matrix m = random_matrix(type, n_in, n_out, rng);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        KernelParams params = default_params(type, tier);
        params.decode_rows =
            3;  // float rows: a partial last tile (groups ignore it)
        auto mm = JitMatmul::create(m.view(), tier, params, nullptr, pool);
        ASSERT_TRUE(mm.ok()) << mm.status();
        const PackedLayout& l = (*mm)->layout();
        const PackedWeights& pw = (*mm)->packed();
        const bool grouped = l.row_group > 1;
        const std::pair<const uint8_t*, int64_t> planes[] = {
            {pw.values(), value_plane_bytes(l)},
            {pw.scales(), grouped ? scale_plane_bytes(l) : 0},
            {pw.mins(), grouped ? min_plane_bytes(l) : 0},
            {pw.hbits(), grouped ? hbit_plane_bytes(l) : 0}};
        const int64_t R = (*mm)->params().decode_rows;
        const int64_t n_tiles = (n_out + R - 1) / R;
        for (int t = 0; t < threads; ++t) {
          for (int64_t bytes : {int64_t{1}, int64_t{4096}, int64_t{1} << 30}) {
            const ThreadPool::WarmPlan plan =
                (*mm)->decode_warm_plan(t, pool, bytes);
            // Plan tiles: row groups, or rows for float types.
            const int64_t share =
                grouped
                    ? pool.share_begin(n_tiles, t + 1) -
                          pool.share_begin(n_tiles, t)
                    : std::min(n_out, pool.share_begin(n_tiles, t + 1) * R) -
                          pool.share_begin(n_tiles, t) * R;
            EXPECT_LE(plan.tiles, share);
            int64_t per_tile = 0;
            for (int i = 0; i < plan.planes; ++i) per_tile += plan.stride[i];
            if (plan.tiles > 0) {
              EXPECT_LT((plan.tiles - 1) * per_tile, bytes);
            }
            if (bytes >= (int64_t{1} << 30)) {
              EXPECT_EQ(plan.tiles, share);
            }
            for (int i = 0; i < plan.planes; ++i) {
              bool inside = false;
              for (auto [start, size] : planes) {
                if (start != nullptr && plan.base[i] >= start &&
                    plan.base[i] + plan.tiles * plan.stride[i] <=
                        start + size) {
                  inside = true;
                }
              }
              EXPECT_TRUE(inside) << ggml_type_info(type).name << " n_out "
                                  << n_out << " thread " << t << " plane " << i;
            }
            if (plan.planes > 0 && share > 0) {
              const int64_t stride0 =
                  grouped ? l.value_stride : R * l.value_stride;
              EXPECT_EQ(plan.base[0],
                        pw.values() + pool.share_begin(n_tiles, t) * stride0);
            }
          }
        }
      }
    }
  }
}

// The VNNI tier's tiles hold more columns (32 registers), but not 14.
TEST(JitMatmul, VnniTilesHoldThirteenColumns) {
  if (!cpu_has(IsaTier::kAvx512Vnni)) {
    GTEST_SKIP() << "this CPU lacks the avx512vnni tier";
  }
  std::mt19937 rng(3);
  ThreadPool pool(1);
  const Matrix m = random_matrix(GgmlType::kQ4_0, 64, 4, rng);
  KernelParams p = default_params(GgmlType::kQ4_0, IsaTier::kAvx512Vnni);
  p.cols = 13;
  EXPECT_TRUE(
      JitMatmul::create(m.view(), IsaTier::kAvx512Vnni, p, nullptr, pool).ok());
  p.cols = 14;
  auto mm = JitMatmul::create(m.view(), IsaTier::kAvx512Vnni, p, nullptr, pool);
  EXPECT_EQ(mm.status().code(), absl::StatusCode::kInvalidArgument);
  // Q8_0 runs as w + 128 with zero point 128 on this tier only.
  EXPECT_NE(
      kernel_name(GgmlType::kQ8_0, IsaTier::kAvx512Vnni).find("avx512vnni u8"),
      std::string::npos);
  EXPECT_NE(kernel_name(GgmlType::kQ8_0, IsaTier::kAvx2).find("avx2 s8"),
            std::string::npos);
  EXPECT_NE(kernel_name(GgmlType::kF16, IsaTier::kAvx512Vnni)
                .find("the avx2 one runs"),
            std::string::npos);
}

// Q8_0 / Q8_1 activations of the VNNI tier's layouts (16 blocks at a time
// on AVX-512) against the AVX2 tier's (a block at a time): the same q
// bytes, d and corrections, over rows of 37 blocks (two batches of 16 and
// a tail of 5) with zero blocks, tiny and huge magnitudes and exact ties
// (x id = k + 0.5, where round-half-even decides).
TEST(JitMatmul, VnniActivationsEqualAvx2Activations) {
  if (!cpu_has(IsaTier::kAvx512Vnni)) GTEST_SKIP() << "this CPU lacks the avx512vnni tier";
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const int64_t n_in = 32 * 37, n_rows = 9;
  std::vector<float> x(static_cast<size_t>(n_rows * n_in));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n_rows * n_in; ++i) {
    const int64_t block = i / 32;
    const float scale = block % 7 == 3 ? 0.0f : block % 7 == 5 ? 1e-30f : block % 7 == 6 ? 3e5f : 1.0f;
    x[i] = normal(rng) * scale;
  }
  // Ties: block 1 of row 0 holds 127 (amax, so id = 1) and halves.
  for (int j = 0; j < 32; ++j) x[32 + j] = j == 0 ? 127.0f : (j % 2 ? 1 : -1) * (j * 0.5f + 0.5f);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    SCOPED_TRACE(ggml_type_info(type).name);
    const PackedLayout vnni = *packed_layout(type, n_in, 16, IsaTier::kAvx512Vnni);
    const PackedLayout avx2 = *packed_layout(type, n_in, 16, IsaTier::kAvx2);
    ASSERT_EQ(vnni.row_group, 16);
    ASSERT_EQ(vnni.act, avx2.act);
    ActivationBuffers a(n_rows, n_in), b(n_rows, n_in);
    prepare_activations(vnni, x.data(), n_rows, a, pool);
    prepare_activations(avx2, x.data(), n_rows, b, pool);
    EXPECT_EQ(std::memcmp(a.q(), b.q(), static_cast<size_t>(n_rows * n_in)), 0);
    for (int64_t t = 0; t < n_rows; ++t) {
      for (int64_t u = 0; u < vnni.n_units; ++u) {
        const float* da = a.d() + t * vnni.act_d_stride;
        const float* db = b.d() + t * avx2.act_d_stride;
        ASSERT_EQ(std::memcmp(&da[u], &db[u], 4), 0) << "row " << t << " d " << u;
        if (vnni.correction == Correction::kNone) continue;
        const float* ca = a.corr() + t * vnni.corr_len;
        const float* cb = b.corr() + t * avx2.corr_len;
        // Q8_0: the zero point differs by tier (128 on VNNI, none on AVX2),
        // so compare z sum q through each layout's own zero point.
        if (vnni.correction == Correction::kZeroPoint) {
          int32_t za, zb = 0;
          std::memcpy(&za, &ca[u], 4);
          if (avx2.correction == Correction::kZeroPoint) {
            std::memcpy(&zb, &cb[u], 4);
            EXPECT_EQ(za / vnni.zero_point, zb / avx2.zero_point) << "row " << t << " unit " << u;
          } else {
            int sum = 0;
            for (int j = 0; j < 32; ++j) sum += b.q()[t * n_in + u * 32 + j];
            EXPECT_EQ(za, vnni.zero_point * sum) << "row " << t << " unit " << u;
          }
        } else {
          ASSERT_EQ(std::memcmp(&ca[u], &cb[u], 4), 0) << "row " << t << " corr " << u;
        }
      }
    }
  }
}

TEST(Isa, NamesRoundTrip) {
  for (IsaTier t : {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
    EXPECT_EQ(parse_isa(isa_name(t)), t);
  }
  EXPECT_EQ(parse_isa("sse2"), std::nullopt);
}

TEST(Isa, SelectRefusesUnknownAndMissingTiers) {
  EXPECT_EQ(select_isa("sse2").status().code(),
            absl::StatusCode::kInvalidArgument);
  for (IsaTier t : {IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
    auto s = select_isa(isa_name(t));
    if (cpu_has(t)) {
      EXPECT_EQ(*s, t);
    } else {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(s.status().message().find("lacks"), std::string::npos);
    }
  }
  ::setenv("STRATA_ISA", "bogus", 1);
  auto s = select_isa();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("STRATA_ISA"), std::string::npos);
  ::unsetenv("STRATA_ISA");
  auto detected = detect_isa();
  if (detected.ok()) {
    EXPECT_EQ(*select_isa(), *detected);
  }
}

}  // namespace
}  // namespace strata::kernels::jit
