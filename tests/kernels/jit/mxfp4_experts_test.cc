// MXFP4 expert matrices (gpt-oss) through the generated kernels: one 3-D
// GGUF tensor [n_expert][n_out][n_in] (ne = [n_in, n_out, n_expert]) whose
// expert e is the WeightMatrix view at data + e * n_out * row_bytes, as the
// engine runs each expert (worker/cpu/moe.cc). For every expert and every
// row count (a decode row, few-column steps, prefill tiles):
//
//   - every ISA tier gives the same floats bit for bit;
//   - each output equals the reference dequantizer's (kernels/cpu/reference
//     /dequantize.h) weights of that expert, dequantized from the whole 3-D
//     tensor and then sliced, times the activations as ggml's Q8_0 rounds
//     them, summed in f64: within 1e-5 of sum |w x| (the integer products
//     are exact in both; only the f32 summation order differs).
//
// The widths are the tiny test model's (n_embd 128, n_ff 96) and gpt-oss's
// own (2880 = 90 blocks of 32).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/jit_matmul.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/quantize.h"

namespace strata::kernels::jit {
namespace {

namespace ops = reference::ops;

// A random 3-D MXFP4 tensor and its dequantized values, both
// [n_expert][n_out][n_in].
struct ExpertTensor {
  int64_t n_expert, n_out, n_in, row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;

  int64_t expert_bytes() const { return n_out * row_bytes; }
  WeightMatrix expert(int64_t e) const {
    auto w = ops::make_weight_matrix("blk.0.ffn_up_exps.weight", GgmlType::kMXFP4,
                                     bytes.data() + e * expert_bytes(), n_in, n_out,
                                     static_cast<uint64_t>(expert_bytes()));
    EXPECT_TRUE(w.ok()) << w.status();
    return *w;
  }
};

ExpertTensor random_experts(int64_t n_expert, int64_t n_out, int64_t n_in, uint32_t seed) {
  ExpertTensor t{n_expert, n_out, n_in, *ggml_row_bytes(GgmlType::kMXFP4, n_in), {}, {}};
  const int64_t rows = n_expert * n_out;
  t.bytes.resize(static_cast<size_t>(rows * t.row_bytes));
  t.dequantized.resize(static_cast<size_t>(rows * n_in));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < rows; ++r) {
    // Experts of different scales (their E8M0 exponents differ), some rows
    // all zero.
    const float scale = r % 13 == 4 ? 0.0f : std::exp(dist(rng)) * float(1 + r / n_out);
    for (float& v : row) v = scale * dist(rng);
    EXPECT_TRUE(reference::quantize_row(GgmlType::kMXFP4, row.data(), n_in,
                                        t.bytes.data() + r * t.row_bytes)
                    .ok());
  }
  // Dequantized as one tensor of n_expert * n_out rows, then sliced.
  EXPECT_TRUE(reference::dequantize_row(GgmlType::kMXFP4, t.bytes.data(), rows * n_in,
                                        t.dequantized.data())
                  .ok());
  return t;
}

// The activations as ggml's Q8_0 rounds them (the type paired with MXFP4).
std::vector<float> q8_0_values(const std::vector<float>& x, int64_t n_rows, int64_t n_in) {
  const int64_t row_bytes = *ggml_row_bytes(GgmlType::kQ8_0, n_in);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes));
  std::vector<float> out(x.size());
  for (int64_t t = 0; t < n_rows; ++t) {
    EXPECT_TRUE(reference::quantize_row(GgmlType::kQ8_0, x.data() + t * n_in, n_in, q.data())
                    .ok());
    EXPECT_TRUE(
        reference::dequantize_row(GgmlType::kQ8_0, q.data(), n_in, out.data() + t * n_in).ok());
  }
  return out;
}

TEST(Mxfp4Experts, SlicesEqualTheDequantizedSliceOnEveryTierBitForBit) {
  if (!cpu_has(IsaTier::kAvx2)) GTEST_SKIP() << "this CPU lacks the avx2 tier";
  struct Shape {
    int64_t n_expert, n_out, n_in;
  };
  // Tiny gpt-oss gate/up (96 x 128) and down (128 x 96); gpt-oss-sized rows
  // (2880) over a partial 16-row group.
  const Shape shapes[] = {{8, 96, 128}, {8, 128, 96}, {4, 37, 2880}};
  const int64_t kRows[] = {1, 2, 5, 16, 37};
  ThreadPool pool(2);
  for (const Shape& s : shapes) {
    const ExpertTensor t =
        random_experts(s.n_expert, s.n_out, s.n_in, static_cast<uint32_t>(s.n_in + s.n_out));
    std::mt19937 rng(static_cast<uint32_t>(s.n_out));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(37 * s.n_in));
    for (float& v : x) v = dist(rng);
    const std::vector<float> xq = q8_0_values(x, 37, s.n_in);
    JitScratch scratch(37, s.n_in);
    KernelCache cache;
    for (int64_t e = 0; e < s.n_expert; ++e) {
      const WeightMatrix w = t.expert(e);
      const float* deq = t.dequantized.data() + e * s.n_out * s.n_in;  // [n_out][n_in]
      std::vector<float> first;  // the first tier's outputs, all row counts
      for (IsaTier tier : {IsaTier::kAvx2, IsaTier::kAvx512, IsaTier::kAvx512Vnni}) {
        if (!cpu_has(tier)) continue;
        SCOPED_TRACE(std::to_string(s.n_out) + "x" + std::to_string(s.n_in) + " expert " +
                     std::to_string(e) + " " + isa_name(tier));
        auto mm = JitMatmul::create(w, tier, default_params(GgmlType::kMXFP4, tier), &cache, pool);
        ASSERT_TRUE(mm.ok()) << mm.status();
        std::vector<float> all;
        for (int64_t n_rows : kRows) {
          std::vector<float> y(static_cast<size_t>(n_rows * s.n_out), NAN);
          (*mm)->run(x.data(), n_rows, y.data(), scratch, pool);
          for (int64_t r = 0; r < n_rows; ++r) {
            for (int64_t o = 0; o < s.n_out; ++o) {
              double want = 0.0, mag = 0.0;
              for (int64_t k = 0; k < s.n_in; ++k) {
                const double p = double{deq[o * s.n_in + k]} * xq[r * s.n_in + k];
                want += p;
                mag += std::fabs(p);
              }
              const double got = y[r * s.n_out + o];
              ASSERT_LE(std::fabs(got - want), 1e-5 * mag + 1e-30)
                  << "rows " << n_rows << " y[" << r << "][" << o << "] = " << got
                  << ", dequantized " << want;
            }
          }
          all.insert(all.end(), y.begin(), y.end());
        }
        if (first.empty()) {
          first = all;
        } else {
          ASSERT_EQ(std::memcmp(all.data(), first.data(), all.size() * sizeof(float)), 0)
              << "differs from avx2";
        }
      }
    }
  }
}

// A view that starts one expert in: its bytes are exactly that expert's,
// and a view of the wrong size is refused naming the tensor.
TEST(Mxfp4Experts, ViewsAreWholeExperts) {
  const ExpertTensor t = random_experts(3, 8, 64, 7);
  EXPECT_EQ(t.expert_bytes(), 8 * (64 / 32) * 17);
  auto bad = ops::make_weight_matrix("blk.0.ffn_down_exps.weight", GgmlType::kMXFP4,
                                     t.bytes.data(), 64, 8,
                                     static_cast<uint64_t>(t.expert_bytes() - 17));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blk.0.ffn_down_exps.weight"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace strata::kernels::jit
