// The step kernels' CUDA sources (worker/cuda/kernels/elementwise.cuh,
// attention.cuh, sample.cuh) run on the CPU (tests/cuda/cuda_emulator.h)
// against kernels/cpu/reference: the indexing, the reductions and the
// numerics a device must then reproduce (their device tests: the bounds
// are the same). Each test says its bound and why.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/attention.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "tests/cuda/cuda_emulator.h"

namespace strata::worker::emulation {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
namespace elementwise {
using namespace strata::cuda_emulation;
#include "worker/cuda/kernels/elementwise.cuh"
}  // namespace elementwise
namespace attention {
using namespace strata::cuda_emulation;
#define THREADS 64
#include "worker/cuda/kernels/attention.cuh"
#undef THREADS
}  // namespace attention
namespace sample {
using namespace strata::cuda_emulation;
#define THREADS 96
#include "worker/cuda/kernels/sample.cuh"
#undef THREADS
}  // namespace sample
#pragma GCC diagnostic pop

namespace {

std::vector<float> normal_values(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Both pair orders, a partial rotation (n_rot < head_dim), positions far
// apart. The rotation is the reference's arithmetic on the same (cos, sin)
// table: 2e-6 relative covers a device's fused multiply-adds.
TEST(CudaKernelsEmulated, RopeRotateEqualsTheReference) {
  ThreadPool pool(1);
  for (const kernels::RopeOrder order : {kernels::RopeOrder::kNormal, kernels::RopeOrder::kNeox}) {
    for (const int n_rot : {64, 32}) {
      SCOPED_TRACE(std::string(order == kernels::RopeOrder::kNeox ? "neox" : "normal") +
                   ", n_rot " + std::to_string(n_rot));
      const int n_tokens = 3, n_heads = 5, head_dim = 64;
      const std::vector<int32_t> positions = {0, 17, 4000};
      kernels::RopeParams params;
      params.order = order;
      params.n_rot = n_rot;
      params.freq_base = 10000.0f;
      std::vector<float> cs(static_cast<size_t>(n_tokens) * n_rot);
      reference::ops::rope_angles(positions.data(), n_tokens, params, cs.data(), pool);
      std::vector<float> want = normal_values(static_cast<size_t>(n_tokens) * n_heads * head_dim, 1);
      std::vector<float> got = want;
      reference::ops::rope_rotate(want.data(), n_tokens, n_heads, head_dim, order, n_rot,
                                  cs.data(), pool);
      cuda_emulation::launch(2, 64, [&] {
        elementwise::strata_rope_rotate(got.data(), cs.data(), n_tokens, n_heads, head_dim,
                                        n_rot, order == kernels::RopeOrder::kNeox ? 1 : 0);
      });
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i]))) << i;
      }
    }
  }
}

// expf against the reference's exp_ggml (ggml's approximation): 1e-5
// relative.
TEST(CudaKernelsEmulated, SwigluAndAddEqualTheReference) {
  ThreadPool pool(1);
  const int64_t n = 1537;
  const std::vector<float> gate = normal_values(n, 2, 4.0f), up = normal_values(n, 3);
  std::vector<float> want(n), got(n);
  reference::ops::swiglu(gate.data(), up.data(), n, want.data(), pool);
  cuda_emulation::launch(3, 128, [&] {
    elementwise::strata_swiglu(gate.data(), up.data(), got.data(), n);
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i]))) << i;
  }
  std::vector<float> sum(n);
  cuda_emulation::launch(1, 32, [&] {
    elementwise::strata_add(gate.data(), up.data(), sum.data(), n);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], gate[i] + up[i]) << i;
}

// f16 rounding to nearest even, as the reference's f32_to_f16: exact; the
// rows outside [pos, pos + n) untouched.
TEST(CudaKernelsEmulated, StoreKvRoundsToF16AtItsRows) {
  const int n_ctx = 9, pos = 4, n = 3, k_width = 48, v_width = 40;
  const std::vector<float> k = normal_values(static_cast<size_t>(n) * k_width, 4, 100.0f);
  const std::vector<float> v = normal_values(static_cast<size_t>(n) * v_width, 5, 1e-3f);
  std::vector<uint16_t> kc(static_cast<size_t>(n_ctx) * k_width, 0xBEEF);
  std::vector<uint16_t> vc(static_cast<size_t>(n_ctx) * v_width, 0xBEEF);
  cuda_emulation::launch(2, 32, [&] {
    elementwise::strata_store_kv(k.data(), v.data(), kc.data(), vc.data(), pos, n, k_width,
                                 v_width);
  });
  for (int r = 0; r < n_ctx; ++r) {
    for (int i = 0; i < k_width; ++i) {
      const uint16_t want = r >= pos && r < pos + n
                                ? reference::f32_to_f16(k[static_cast<size_t>(r - pos) * k_width + i])
                                : uint16_t{0xBEEF};
      ASSERT_EQ(kc[static_cast<size_t>(r) * k_width + i], want) << "k row " << r << " " << i;
    }
    for (int i = 0; i < v_width; ++i) {
      const uint16_t want = r >= pos && r < pos + n
                                ? reference::f32_to_f16(v[static_cast<size_t>(r - pos) * v_width + i])
                                : uint16_t{0xBEEF};
      ASSERT_EQ(vc[static_cast<size_t>(r) * v_width + i], want) << "v row " << r << " " << i;
    }
  }
}

// Grouped heads, a soft cap, a sliding window, contexts below, at and past
// the block's threads. Both round q and the probabilities to f16; the
// reference sums the softmax in double, the kernel in float, which can
// move a probability across an f16 rounding boundary (2^-11 relative):
// 2e-3 absolute on outputs of magnitude ~1.
TEST(CudaKernelsEmulated, AttentionDecodeEqualsTheReference) {
  ThreadPool pool(1);
  struct Shape {
    int n_head, n_head_kv, dk, dv, n_kv, window;
    float softcap;
  };
  for (const Shape s : {Shape{9, 3, 64, 64, 1, 0, 0.0f}, Shape{9, 3, 64, 64, 64, 0, 0.0f},
                        Shape{8, 2, 32, 48, 200, 0, 30.0f}, Shape{4, 4, 64, 64, 150, 40, 0.0f}}) {
    SCOPED_TRACE(std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) + " heads, n_kv " +
                 std::to_string(s.n_kv) + ", window " + std::to_string(s.window) + ", softcap " +
                 std::to_string(s.softcap));
    const std::vector<float> q = normal_values(static_cast<size_t>(s.n_head) * s.dk, 6);
    const std::vector<float> k = normal_values(static_cast<size_t>(s.n_kv) * s.n_head_kv * s.dk, 7);
    const std::vector<float> v = normal_values(static_cast<size_t>(s.n_kv) * s.n_head_kv * s.dv, 8);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = reference::f32_to_f16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) v16[i] = reference::f32_to_f16(v[i]);
    kernels::AttentionParams p;
    p.n_head = s.n_head;
    p.n_head_kv = s.n_head_kv;
    p.head_dim_k = s.dk;
    p.head_dim_v = s.dv;
    p.scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
    p.softcap = s.softcap;
    p.sliding_window = s.window;
    kernels::KvView kv;
    kv.type = GgmlType::kF16;
    kv.k = k16.data();
    kv.v = v16.data();
    kv.n_kv = s.n_kv;
    const int32_t pos = s.n_kv - 1;
    std::vector<float> want(static_cast<size_t>(s.n_head) * s.dv);
    reference::ops::AttentionScratch scratch(s.n_kv, p, 1);
    reference::ops::attention(q.data(), &pos, 1, kv, p, want.data(), scratch, pool);

    const int window_begin = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    std::vector<float> got(want.size(), std::nanf("")), scores(static_cast<size_t>(s.n_head) * s.n_kv);
    cuda_emulation::launch(s.n_head, 64, [&] {
      attention::strata_attention_decode(q.data(), k16.data(), v16.data(), got.data(),
                                         scores.data(), s.n_kv, window_begin, s.n_head,
                                         s.n_head_kv, s.dk, s.dv, p.scale, s.softcap);
    });
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-3f) << i;
  }
}

// The first of the largest, NaN never the largest, -1 when all are NaN.
TEST(CudaKernelsEmulated, ArgmaxIsTheFirstOfTheLargest) {
  std::mt19937 rng(10);
  std::uniform_int_distribution<int> level(-3, 3), odd(0, 20);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int n : {1, 5, 95, 96, 97, 1000, 49152}) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = odd(rng) == 0 ? nan : static_cast<float>(level(rng));
      if (trial == 3) std::fill(x.begin(), x.end(), nan);
      int want = -1;
      for (int i = 0; i < n; ++i) {
        if (!std::isnan(x[i]) && (want < 0 || x[i] > x[want])) want = i;
      }
      int got = -2;
      cuda_emulation::launch(1, 96, [&] { sample::strata_argmax(x.data(), n, &got); });
      ASSERT_EQ(got, want) << "n " << n << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace strata::worker::emulation
