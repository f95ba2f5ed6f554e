// The step kernels other than the matrix, KV store and attention ones
// (worker/cuda/kernels: norms, RoPE, activations, sampling) on both
// devices, and the instantiation of every Kernels case, those of
// kernels_matrix_test.cc and kernels_attention_test.cc too (the fixture:
// kernels_fixture.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda/kernels_fixture.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "kernels/cpu/reference/ops/moe_routing.h"
#include "worker/head_picks.h"

namespace strata::worker::kernels_test {
namespace {

// RMSNorm, widths below, at and past the block: 2e-6 relative (float sums
// of squares against the reference's double, rsqrtf's 2 ulp).
TEST_P(Kernels, RmsNormMatchesTheReference) {
  ThreadPool pool(1);
  for (const bool weighted : {true, false}) {
    for (const int dim : {1, 31, 255, 576, 1000}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (weighted ? ", weighted" : ""));
      const int rows = 3;
      const float eps = 1e-5f;
      const std::vector<float> x = normal_values(static_cast<size_t>(rows) * dim, 3, 2.0f);
      std::vector<float> w(static_cast<size_t>(dim), 1.0f);
      if (weighted) w = normal_values(static_cast<size_t>(dim), 4);
      std::vector<float> want(x.size());
      reference::ops::rms_norm(x.data(), w.data(), rows, dim, eps, want.data(), pool);
      DeviceBuffer dx = put(x), dw = put(w), dy = space(x.size() * sizeof(float));
      ASSERT_TRUE(run(kRms, cuda_kernels::kRmsNormEntry, rows, kRmsThreads, dx.as<const float>(),
                      weighted ? dw.as<const float>() : nullptr, dy.as<float>(), dim, eps)
                      .ok());
      const std::vector<float> got = get<float>(dy, x.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i]))) << i;
      }
    }
  }
}

// The fused residual add and RMSNorm: x afterwards holds x + delta and y
// the norm of it, bit for bit what strata_add then strata_rms_norm give.
TEST_P(Kernels, AddRmsNormIsAddThenRmsNorm) {
  for (const int dim : {31, 576, 1000}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int rows = 3;
    const long long n = static_cast<long long>(rows) * dim;
    const std::vector<float> x = normal_values(n, 60), delta = normal_values(n, 61, 0.5f);
    const std::vector<float> w = normal_values(dim, 62);
    DeviceBuffer a = put(x), b = put(x), d = put(delta), dw = put(w);
    DeviceBuffer ya = space(n * sizeof(float)), yb = space(n * sizeof(float));
    ASSERT_TRUE(run(kElementwise, cuda_kernels::kAddEntry, 1, 64, a.as<const float>(),
                    d.as<const float>(), a.as<float>(), n)
                    .ok());
    ASSERT_TRUE(run(kRms, cuda_kernels::kRmsNormEntry, rows, kRmsThreads, a.as<const float>(),
                    dw.as<const float>(), ya.as<float>(), dim, 1e-6f)
                    .ok());
    ASSERT_TRUE(run(kRms, cuda_kernels::kAddRmsNormEntry, rows, kRmsThreads, b.as<float>(),
                    d.as<const float>(), dw.as<const float>(), yb.as<float>(), dim, 1e-6f)
                    .ok());
    EXPECT_EQ(get<float>(b, n), get<float>(a, n));
    EXPECT_EQ(get<float>(yb, n), get<float>(ya, n));
  }
}

// The fused quantizing forms (the int8 kernels' rows in the launch that
// makes the values): RMSNorm, the residual add + RMSNorm and SwiGLU, then
// quantized in the same launch, give the bits of the plain kernel followed
// by strata_quantize_rows, for Q8_0, Q8_K and Q8_1 (its s), on rows whose
// width holds several units and blocks (768 = 3 Q8_K blocks), one row of
// zeros.
TEST_P(Kernels, FusedQuantizingKernelsGiveTheSeparateLaunchesBits) {
  const int rows = 3, dim = 768;
  const long long n = static_cast<long long>(rows) * dim;
  const size_t units = static_cast<size_t>(n) / 32;
  std::vector<float> x = normal_values(n, 80, 3.0f);
  std::fill(x.begin() + dim, x.begin() + 2 * dim, 0.0f);
  const std::vector<float> delta = normal_values(n, 81, 0.5f), w = normal_values(dim, 82),
                           up = normal_values(n, 83);
  struct Int8 {
    std::vector<signed char> q;
    std::vector<float> d, sums;
    bool operator==(const Int8&) const = default;
  };
  const auto read = [&](DeviceBuffer& q, DeviceBuffer& d, DeviceBuffer& s) {
    return Int8{get<signed char>(q, static_cast<size_t>(n)), get<float>(d, units),
                get<float>(s, units)};
  };
  for (const int kind :
       {cuda_kernels::kRoundQ8_0, cuda_kernels::kRoundQ8_K, cuda_kernels::kRoundQ8_1}) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    // The separate launches' bits.
    const auto separate = [&](DeviceBuffer& y) {
      DeviceBuffer q = space(static_cast<size_t>(n)), d = space(units * sizeof(float)),
                   s = space(units * sizeof(float));
      EXPECT_TRUE(run(kElementwise, cuda_kernels::kQuantizeRowsEntry, 3, 64, y.as<const float>(),
                      q.as<signed char>(), d.as<float>(), s.as<float>(), n, kind)
                      .ok());
      return read(q, d, s);
    };
    // RMSNorm.
    DeviceBuffer dx = put(x), dw = put(w), y1 = space(n * sizeof(float)),
                 y2 = space(n * sizeof(float)), q = space(static_cast<size_t>(n)),
                 d = space(units * sizeof(float)), s = space(units * sizeof(float));
    ASSERT_TRUE(run(kRms, cuda_kernels::kRmsNormEntry, rows, kRmsThreads, dx.as<const float>(),
                    dw.as<const float>(), y1.as<float>(), dim, 1e-6f)
                    .ok());
    ASSERT_TRUE(run(kRms, cuda_kernels::kRmsNormQuantizeEntry, rows, kRmsThreads,
                    dx.as<const float>(), dw.as<const float>(), y2.as<float>(), dim, 1e-6f,
                    q.as<signed char>(), d.as<float>(), s.as<float>(), kind)
                    .ok());
    EXPECT_EQ(get<float>(y2, n), get<float>(y1, n));
    EXPECT_TRUE(read(q, d, s) == separate(y1)) << "rms_norm";
    // The residual add + RMSNorm.
    DeviceBuffer xa = put(x), xb = put(x), dd = put(delta);
    ASSERT_TRUE(run(kRms, cuda_kernels::kAddRmsNormEntry, rows, kRmsThreads, xa.as<float>(),
                    dd.as<const float>(), dw.as<const float>(), y1.as<float>(), dim, 1e-6f)
                    .ok());
    ASSERT_TRUE(run(kRms, cuda_kernels::kAddRmsNormQuantizeEntry, rows, kRmsThreads,
                    xb.as<float>(), dd.as<const float>(), dw.as<const float>(), y2.as<float>(),
                    dim, 1e-6f, q.as<signed char>(), d.as<float>(), s.as<float>(), kind)
                    .ok());
    EXPECT_EQ(get<float>(xb, n), get<float>(xa, n));
    EXPECT_EQ(get<float>(y2, n), get<float>(y1, n));
    EXPECT_TRUE(read(q, d, s) == separate(y1)) << "add_rms_norm";
    // SwiGLU (x as the gate), on two launch shapes.
    DeviceBuffer du = put(up);
    ASSERT_TRUE(run(kElementwise, cuda_kernels::kSwigluEntry, 2, 64, dx.as<const float>(),
                    du.as<const float>(), y1.as<float>(), n)
                    .ok());
    const Int8 want = separate(y1);
    for (const auto& [grid, block] : {std::pair{1u, 32u}, std::pair{5u, 256u}}) {
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kSwigluQuantizeEntry, grid, block,
                      dx.as<const float>(), du.as<const float>(), y2.as<float>(),
                      q.as<signed char>(), d.as<float>(), s.as<float>(), n, kind)
                      .ok());
      EXPECT_EQ(get<float>(y2, n), get<float>(y1, n)) << "swiglu " << grid << "x" << block;
      EXPECT_TRUE(read(q, d, s) == want) << "swiglu " << grid << "x" << block;
    }
  }
}

// Both pair orders, a partial rotation, positions far apart; the
// reference's arithmetic on the same (cos, sin) table: 2e-6 relative
// covers a device's fused multiply-adds.
TEST_P(Kernels, RopeRotateMatchesTheReference) {
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
      std::vector<float> cs(static_cast<size_t>(n_tokens) * n_rot);
      reference::ops::rope_angles(positions.data(), n_tokens, params, cs.data(), pool);
      std::vector<float> want = normal_values(static_cast<size_t>(n_tokens) * n_heads * head_dim, 1);
      DeviceBuffer dx = put(want), dcs = put(cs);
      reference::ops::rope_rotate(want.data(), n_tokens, n_heads, head_dim, order, n_rot,
                                  cs.data(), pool);
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeRotateEntry, 2, 64, dx.as<float>(),
                      dcs.as<const float>(), n_tokens, n_heads, head_dim, n_rot,
                      order == kernels::RopeOrder::kNeox ? 1 : 0)
                      .ok());
      const std::vector<float> got = get<float>(dx, want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i]))) << i;
      }
      // q and k (2 heads) in one launch: each the one-tensor entry's bits.
      const std::vector<float> q0 = normal_values(static_cast<size_t>(n_tokens) * n_heads * head_dim, 2);
      const std::vector<float> k0 = normal_values(static_cast<size_t>(n_tokens) * 2 * head_dim, 3);
      DeviceBuffer dq = put(q0), dk = put(k0), dq1 = put(q0), dk1 = put(k0);
      const int neox = order == kernels::RopeOrder::kNeox ? 1 : 0;
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeRotateQkEntry, 3, 32, dq.as<float>(),
                      dk.as<float>(), dcs.as<const float>(), n_tokens, n_heads, 2, head_dim, n_rot,
                      neox)
                      .ok());
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeRotateEntry, 1, 64, dq1.as<float>(),
                      dcs.as<const float>(), n_tokens, n_heads, head_dim, n_rot, neox)
                      .ok());
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeRotateEntry, 1, 64, dk1.as<float>(),
                      dcs.as<const float>(), n_tokens, 2, head_dim, n_rot, neox)
                      .ok());
      EXPECT_EQ(get<float>(dq, q0.size()), get<float>(dq1, q0.size()));
      EXPECT_EQ(get<float>(dk, k0.size()), get<float>(dk1, k0.size()));
    }
  }
}

// SwiGLU: expf against the reference's exp_ggml, 1e-5 relative; the
// residual add: exact.
TEST_P(Kernels, SwigluAndAddMatchTheReference) {
  ThreadPool pool(1);
  const long long n = 1537;
  const std::vector<float> gate = normal_values(n, 2, 4.0f), up = normal_values(n, 3);
  std::vector<float> want(n);
  reference::ops::swiglu(gate.data(), up.data(), n, want.data(), pool);
  DeviceBuffer dg = put(gate), du = put(up), dout = space(n * sizeof(float));
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kSwigluEntry, 3, 128, dg.as<const float>(),
                  du.as<const float>(), dout.as<float>(), n)
                  .ok());
  std::vector<float> got = get<float>(dout, n);
  for (long long i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i]))) << i;
  }
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kAddEntry, 1, 32, dg.as<const float>(),
                  du.as<const float>(), dout.as<float>(), n)
                  .ok());
  got = get<float>(dout, n);
  for (long long i = 0; i < n; ++i) ASSERT_EQ(got[i], gate[i] + up[i]) << i;
}

// Rows rounded as the activation type each weight type pairs with are the
// values the cpu backend multiplies (reference::ops::round_activations),
// bit for bit: random rows of three scales, a block of zeros, a block whose
// largest magnitude comes twice with both signs (the first in a later lane
// than the second), exact halves of the rounding step (half to even), -0
// and subnormals; any grid and block (warps stride over the blocks), in
// place as well. strata_quantize_rows gives the same values as int8 q and
// per-unit scales d (d q, bit for bit) and the sums of q (Q8_1: the cpu
// backend's s = f16(d sum q), bit for bit).
TEST_P(Kernels, RoundRowsAreWhatTheCpuBackendMultiplies) {
  const int rows = 3, width = 768;  // 3 Q8_K blocks a row, 24 of Q8_0
  std::vector<float> x = normal_values(static_cast<size_t>(rows) * width, 8);
  for (int i = 0; i < width; ++i) x[static_cast<size_t>(width) + i] *= 1e-3f;
  for (int i = 0; i < width; ++i) x[static_cast<size_t>(2 * width) + i] *= 300.0f;
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // row 0's second block
  x[512 + 2] = -7.0f;   // lane 2: the first of the largest
  x[512 + 33] = 7.0f;   // lane 1: the same magnitude, later
  // Row 1's first block: its largest is -127, so Q8_K's scale is 1 and
  // Q8_0's 127 / 127; values on the halves of the step.
  float* h = x.data() + width;
  std::fill(h, h + 256, 0.25f);
  h[0] = -127.0f;
  h[1] = 2.5f;
  h[2] = 3.5f;
  h[3] = -2.5f;
  h[4] = -0.0f;
  h[5] = 1e-40f;  // subnormal
  h[40] = 0.5f;
  h[41] = -1.5f;
  for (const auto& [kind, type] : {std::pair{cuda_kernels::kRoundF16, GgmlType::kF16},
                                   std::pair{cuda_kernels::kRoundQ8_0, GgmlType::kQ8_0},
                                   std::pair{cuda_kernels::kRoundQ8_1, GgmlType::kQ8_1},
                                   std::pair{cuda_kernels::kRoundQ8_K, GgmlType::kQ8_K}}) {
    std::vector<float> want(x.size());
    for (int r = 0; r < rows; ++r) {
      reference::ops::round_activations(type, x.data() + static_cast<size_t>(r) * width, width,
                                        want.data() + static_cast<size_t>(r) * width);
    }
    const long long n = static_cast<long long>(x.size());
    for (const auto& [grid, block] : {std::pair{1u, 32u}, std::pair{2u, 64u}, std::pair{7u, 256u}}) {
      DeviceBuffer dx = put(x), dy = space(x.size() * sizeof(float));
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRoundRowsEntry, grid, block,
                      dx.as<const float>(), dy.as<float>(), n, kind)
                      .ok());
      const std::vector<float> got = get<float>(dy, x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << "kind " << kind << " grid " << grid << "x" << block << " at " << i << ": "
            << got[i] << " for " << want[i] << " (x " << x[i] << ")";
      }
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRoundRowsEntry, grid, block,
                      dx.as<const float>(), dx.as<float>(), n, kind)
                      .ok());
      ASSERT_EQ(get<float>(dx, x.size()), got) << "in place, kind " << kind;
      if (kind == cuda_kernels::kRoundF16) continue;
      // The same as int8 and per-unit scales and sums: d q is the value.
      const size_t units = x.size() / 32;
      DeviceBuffer fresh = put(x), dq = space(x.size()), dd = space(units * sizeof(float)),
                   ds = space(units * sizeof(float));
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kQuantizeRowsEntry, grid, block,
                      fresh.as<const float>(), dq.as<signed char>(), dd.as<float>(),
                      ds.as<float>(), n, kind)
                      .ok());
      const std::vector<signed char> q = get<signed char>(dq, x.size());
      const std::vector<float> d = get<float>(dd, units), sums = get<float>(ds, units);
      // Q8_1: the cpu backend's own q, d and s (ggml's block_q8_1).
      std::vector<int8_t> q1(x.size());
      std::vector<float> d1(units), s1(units);
      reference::ops::quantize_q8_1_row(x.data(), n, q1.data(), d1.data(), s1.data());
      for (size_t u = 0; u < units; ++u) {
        int sum = 0;
        for (size_t i = 32 * u; i < 32 * u + 32; ++i) {
          sum += q[i];
          ASSERT_EQ(std::bit_cast<uint32_t>(d[u] * static_cast<float>(q[i])),
                    std::bit_cast<uint32_t>(want[i]))
              << "kind " << kind << " at " << i << ": q " << int{q[i]} << " d " << d[u];
        }
        if (kind == cuda_kernels::kRoundQ8_1) {
          ASSERT_EQ(std::bit_cast<uint32_t>(sums[u]), std::bit_cast<uint32_t>(s1[u]))
              << "s of unit " << u << " (sum of q " << sum << ", d " << d1[u] << ")";
          continue;
        }
        ASSERT_EQ(sums[u], static_cast<float>(sum)) << "kind " << kind << " unit " << u;
      }
    }
  }
}

// Graphs (DeviceApi::capture): launches recorded, not run, with their
// arguments' values; a replay runs them in order on the data as it is then
// (a = a + b twice: a + 2b, then with new a and b the same sums of the new
// values); an upload inside a capture is FailedPrecondition and records
// nothing; a released graph is InvalidArgument.
TEST_P(Kernels, GraphsReplayTheirLaunchesOnTheDataOfTheReplay) {
  const long long n = 300;
  std::vector<float> a = normal_values(n, 60), b = normal_values(n, 61);
  DeviceBuffer da = put(a), db = put(b);
  KernelRef add{&kElementwise, cuda_kernels::kAddEntry};
  absl::StatusOr<KernelHandle> k = api_->load(add);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto twice = [&]() -> absl::Status {
    for (int i = 0; i < 2; ++i) {
      const float* x = da.as<const float>();
      const float* y = db.as<const float>();
      float* out = da.as<float>();
      long long count = n;
      void* args[] = {&x, &y, &out, &count};
      if (absl::Status st = api_->launch(*k, 2, 128, args); !st.ok()) return st;
    }
    return absl::OkStatus();
  };
  absl::StatusOr<GraphHandle> g = api_->capture(twice);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(get<float>(da, n), a) << "captured launches ran";
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(api_->replay(*g).ok());
    const std::vector<float> got = get<float>(da, n);
    for (long long i = 0; i < n; ++i) ASSERT_EQ(got[i], (a[i] + b[i]) + b[i]) << i;
    a = normal_values(n, 62 + round);
    b = normal_values(n, 64 + round);
    ASSERT_TRUE(api_->upload(da.get(), a.data(), n * sizeof(float)).ok());
    ASSERT_TRUE(api_->upload(db.get(), b.data(), n * sizeof(float)).ok());
  }
  const std::vector<float> before = get<float>(da, n);
  absl::StatusOr<GraphHandle> bad = api_->capture([&] {
    return api_->upload(da.get(), b.data(), n * sizeof(float));
  });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_EQ(get<float>(da, n), before);
  api_->release(*g);
  EXPECT_EQ(api_->replay(*g).code(), absl::StatusCode::kInvalidArgument);
}

// The bias of each column added to every row (5 rows of 96), in place:
// exact, reference::ops::add_bias's sums.
TEST_P(Kernels, AddBiasAddsTheBiasToEveryRow) {
  const long long rows = 5;
  const int width = 96;
  std::vector<float> x = normal_values(rows * width, 6), want = x;
  const std::vector<float> bias = normal_values(width, 7);
  reference::ops::add_bias(want.data(), bias.data(), rows, width);
  DeviceBuffer dx = put(x), db = put(bias);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kAddBiasEntry, 2, 64, dx.as<float>(),
                  db.as<const float>(), rows, width)
                  .ok());
  const std::vector<float> got = get<float>(dx, rows * width);
  for (long long i = 0; i < rows * width; ++i) ASSERT_EQ(got[i], want[i]) << i;
}

// The activations and the soft cap against the reference ops: GeGLU with
// its f16 roundings (exact but for tanh's last bits: one f16 step where the
// rounding is a tie), gpt-oss's clamped SwiGLU and the cap (expf / tanhf:
// 2e-6 relative), the scale (exact).
TEST_P(Kernels, ActivationsAndCapsMatchTheReference) {
  ThreadPool pool(1);
  const long long n = 3001;
  std::vector<float> gate = normal_values(n, 20, 5.0f), up = normal_values(n, 21, 3.0f);
  gate[0] = -12.0f, gate[1] = 11.0f, gate[2] = 7.5f, gate[3] = -10.0f;  // the branches
  auto near = [](float got, float want, float rel) {
    return std::fabs(got - want) <= rel * std::max(1.0f, std::fabs(want));
  };
  DeviceBuffer dg = put(gate), du = put(up), dout = space(n * sizeof(float));
  std::vector<float> want(n);
  reference::ops::geglu(gate.data(), up.data(), n, want.data(), pool);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kGegluEntry, 3, 128, dg.as<const float>(),
                  du.as<const float>(), dout.as<float>(), n)
                  .ok());
  std::vector<float> got = get<float>(dout, n);
  for (long long i = 0; i < n; ++i) {
    ASSERT_TRUE(near(got[i], want[i], 1e-3f)) << i << ": " << got[i] << " vs " << want[i];
  }
  reference::ops::swiglu_oai(gate.data(), up.data(), n, reference::ops::kGptOssAlpha,
                             reference::ops::kGptOssLimit, want.data(), pool);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kSwigluOaiEntry, 2, 64, dg.as<const float>(),
                  du.as<const float>(), dout.as<float>(), n, reference::ops::kGptOssAlpha,
                  reference::ops::kGptOssLimit)
                  .ok());
  got = get<float>(dout, n);
  for (long long i = 0; i < n; ++i) ASSERT_TRUE(near(got[i], want[i], 2e-6f)) << i;
  want = gate;
  reference::ops::soft_cap(want.data(), n, 30.0f);
  DeviceBuffer dx = put(gate);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kSoftCapEntry, 2, 64, dx.as<float>(), 30.0f, n).ok());
  got = get<float>(dx, n);
  for (long long i = 0; i < n; ++i) ASSERT_TRUE(near(got[i], want[i], 2e-6f)) << i;
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kScaleEntry, 1, 32, dx.as<float>(), 0.125f, n).ok());
  const std::vector<float> scaled = get<float>(dx, n);
  for (long long i = 0; i < n; ++i) ASSERT_EQ(scaled[i], got[i] * 0.125f) << i;
}

// The data movement of the mixture-of-experts step: rows gathered and
// scattered by index, the weighted
// sum of each row's slots in slot order, qwen2moe's shared expert added with
// its sigmoid gate: each against a plain loop.
TEST_P(Kernels, RowsAndExpertSumsMoveTheRightValues) {
  const int rows = 5, width = 40, k = 3;
  const std::vector<float> src = normal_values(rows * width, 22);
  DeviceBuffer dsrc = put(src);
  const std::vector<int> ids = {4, 0, 4, 2};
  DeviceBuffer dids = put(ids), dgathered = space(ids.size() * width * sizeof(float));
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kGatherRowsEntry, 2, 64, dsrc.as<const float>(),
                  dids.as<const int>(), dgathered.as<float>(), static_cast<int>(ids.size()), width)
                  .ok());
  const std::vector<float> gathered = get<float>(dgathered, ids.size() * width);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int c = 0; c < width; ++c) ASSERT_EQ(gathered[i * width + c], src[ids[i] * width + c]);
  }
  const std::vector<int> to = {3, 1};  // rows 0 and 1 of src into rows 3 and 1
  DeviceBuffer dto = put(to), dscattered = space(rows * width * sizeof(float), 0);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kScatterRowsEntry, 1, 64, dsrc.as<const float>(),
                  dto.as<const int>(), dscattered.as<float>(), 2, width)
                  .ok());
  const std::vector<float> scattered = get<float>(dscattered, rows * width);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < width; ++c) {
      const float want = r == 3 ? src[c] : r == 1 ? src[width + c] : 0.0f;
      ASSERT_EQ(scattered[r * width + c], want) << r << "," << c;
    }
  }
  const std::vector<float> slots = normal_values(rows * k * width, 23);
  const std::vector<float> weights = normal_values(rows * k, 24);
  DeviceBuffer dslots = put(slots), dweights = put(weights), dy = space(rows * width * sizeof(float));
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kMoeSumEntry, 2, 64, dslots.as<const float>(),
                  dweights.as<const float>(), dy.as<float>(), rows, k, width)
                  .ok());
  std::vector<float> y = get<float>(dy, rows * width);
  for (int t = 0; t < rows; ++t) {
    for (int c = 0; c < width; ++c) {
      float want = slots[(t * k) * width + c] * weights[t * k];
      for (int j = 1; j < k; ++j) want += slots[(t * k + j) * width + c] * weights[t * k + j];
      ASSERT_EQ(y[t * width + c], want) << t << "," << c;
    }
  }
  const std::vector<float> g = normal_values(rows, 25);
  DeviceBuffer dg = put(g);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kAddSharedExpertEntry, 2, 64, dy.as<float>(),
                  dsrc.as<const float>(), dg.as<const float>(), rows, width)
                  .ok());
  const std::vector<float> before = y;
  y = get<float>(dy, rows * width);
  for (int t = 0; t < rows; ++t) {
    const float gate = g[t] / (1.0f + std::exp(-g[t])) / g[t];
    for (int c = 0; c < width; ++c) {
      const float want = before[t * width + c] + src[t * width + c] * gate;
      ASSERT_NEAR(y[t * width + c], want, 1e-6f * std::max(1.0f, std::fabs(want)));
    }
  }
}

// Greedy: the first of the largest, NaN never the largest, -1 when all are
// NaN (worker/sampler.cc's pick).
TEST_P(Kernels, ArgmaxIsTheFirstOfTheLargest) {
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
      DeviceBuffer dx = put(x), did = space(sizeof(int));
      ASSERT_TRUE(run(kSample, cuda_kernels::kArgmaxEntry, 1, kSampleThreads,
                      dx.as<const float>(), n, did.as<int>())
                      .ok());
      ASSERT_EQ(get<int>(did, 1)[0], want) << "n " << n << " trial " << trial;
    }
  }
}

// strata_argmax_rows: a block a row, each row's pick as strata_argmax's
// (the plain scan's), and bad = 1 exactly for the rows holding a NaN or an
// infinity (rows 1 and 3 of 4).
TEST_P(Kernels, ArgmaxRowsPickEachRowAndFlagNonFiniteOnes) {
  const int n = 1000, rows = 4;
  std::vector<float> x = normal_values(static_cast<size_t>(rows) * n, 13);
  x[1 * n + 17] = std::numeric_limits<float>::quiet_NaN();
  x[3 * n + 999] = -std::numeric_limits<float>::infinity();
  x[2 * n + 500] = x[2 * n + 900] = 9.0f;  // a tie: the first
  DeviceBuffer dx = put(x), ids = space(rows * sizeof(int)), bad = space(rows * sizeof(int));
  ASSERT_TRUE(run(kSample, cuda_kernels::kArgmaxRowsEntry, rows, kSampleThreads,
                  dx.as<const float>(), n, ids.as<int>(), bad.as<int>())
                  .ok());
  const std::vector<int> got = get<int>(ids, rows), flags = get<int>(bad, rows);
  for (int r = 0; r < rows; ++r) {
    int want = -1;
    for (int i = 0; i < n; ++i) {
      const float v = x[static_cast<size_t>(r) * n + i];
      if (!std::isnan(v) && (want < 0 || v > x[static_cast<size_t>(r) * n + want])) want = i;
    }
    EXPECT_EQ(got[static_cast<size_t>(r)], want) << "row " << r;
    EXPECT_EQ(flags[static_cast<size_t>(r)], r == 1 || r == 3 ? 1 : 0) << "row " << r;
  }
  EXPECT_EQ(got[2], 500);
}

// strata_top_k_rows: each row's k largest in top_candidates' order (the
// sampler's: larger first, equal ones by lower index, -0 as +0), written
// where the table says; rows whose ties straddle the cut (the scan path),
// k = n, k = 1024, a row of 49,152; bad = 1 exactly for the rows holding a
// NaN or an infinity.
TEST_P(Kernels, TopKRowsSelectInTheSamplersOrder) {
  struct Row {
    int n, k;
    int levels;  // values drawn from this many levels: ties
  };
  const std::vector<Row> shapes = {{1000, 40, 0},  {1000, 40, 7},   {97, 97, 5}, {1500, 1024, 0},
                                   {49152, 50, 0}, {3000, 300, 3}, {5, 1, 2},   {1000, 10, 0}};
  std::mt19937 rng(14);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int rows = static_cast<int>(shapes.size());
  const int n = 49152;  // the row stride: every row's first shapes[r].n values are its own
  std::vector<float> x(static_cast<size_t>(rows) * n, 0.0f);
  std::vector<int> table;
  int total = 0;
  for (int r = 0; r < rows; ++r) {
    const Row& s = shapes[static_cast<size_t>(r)];
    float* row = x.data() + static_cast<size_t>(r) * n;
    for (int i = 0; i < n; ++i) {
      row[i] = i >= s.n ? -1e30f
               : s.levels > 0 ? static_cast<float>(static_cast<int>(rng() % s.levels)) - 2.0f
                              : normal(rng);
    }
    if (r == 2) row[3] = -0.0f;
    table.push_back(s.k);
    table.push_back(total);
    total += s.k;
  }
  x[static_cast<size_t>(7) * n + 20] = std::numeric_limits<float>::quiet_NaN();
  x[static_cast<size_t>(6) * n + 100] = std::numeric_limits<float>::infinity();
  DeviceBuffer dx = put(x), dt = put(table), ids = space(total * sizeof(int)),
               values = space(total * sizeof(float)), bad = space(rows * sizeof(int));
  ASSERT_TRUE(run(kSample, cuda_kernels::kTopKRowsEntry, rows, kSampleThreads,
                  dx.as<const float>(), n, dt.as<const int>(), ids.as<int>(), values.as<float>(),
                  bad.as<int>())
                  .ok());
  const std::vector<int> got = get<int>(ids, total), flags = get<int>(bad, rows);
  const std::vector<float> got_values = get<float>(values, total);
  for (int r = 0; r < 6; ++r) {  // rows 6 and 7 hold an infinity and a NaN
    const Row& s = shapes[static_cast<size_t>(r)];
    std::vector<int32_t> want(static_cast<size_t>(s.k));
    std::vector<float> want_values(static_cast<size_t>(s.k));
    top_candidates(std::span<const float>(x.data() + static_cast<size_t>(r) * n, n), s.k,
                   want.data(), want_values.data());
    const int at = table[static_cast<size_t>(2 * r + 1)];
    EXPECT_EQ(std::vector<int>(got.begin() + at, got.begin() + at + s.k),
              std::vector<int>(want.begin(), want.end()))
        << "row " << r;
    EXPECT_EQ(std::vector<float>(got_values.begin() + at, got_values.begin() + at + s.k),
              want_values)
        << "row " << r;
  }
  EXPECT_EQ(flags, (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1}));
}

// strata_moe_route: each token's experts and weights as
// reference::ops::moe_route gives them, for every gating (softmax over 8,
// 60 (3 chunks of 16 and 12 more), 128 and 256 experts; sigmoid;
// softmax over the k, k = 4 and k = 20 (a chunk and 4 more)), with and
// without renormalising and scaling: the same experts in the same order,
// ties by lower index (logits of few levels); the weights within an ulp
// (the e^x outside the 16-value chunks is rounded from double; glibc's
// expf is not correctly rounded for every input). A token whose logits
// are all NaN still gets k distinct valid experts.
TEST_P(Kernels, MoeRouteGivesTheReferencesExpertsAndWeights) {
  using reference::ops::MoeGating;
  static_assert(static_cast<int>(MoeGating::kSoftmax) == cuda_kernels::kMoeGatingSoftmax &&
                    static_cast<int>(MoeGating::kSigmoid) == cuda_kernels::kMoeGatingSigmoid &&
                    static_cast<int>(MoeGating::kSoftmaxWeight) ==
                        cuda_kernels::kMoeGatingSoftmaxWeight,
                "strata_moe_route's gating argument is the reference's enum");
  struct Case {
    int n_expert, k;
    MoeGating gating;
    bool norm;
    float scale;
    int levels;  // logits drawn from this many levels (ties); 0: normal
  };
  const std::vector<Case> cases = {
      {8, 2, MoeGating::kSoftmax, true, 1.0f, 0},
      {8, 1, MoeGating::kSoftmax, false, 1.0f, 0},
      {60, 4, MoeGating::kSoftmax, false, 1.0f, 0},
      {128, 8, MoeGating::kSoftmax, true, 1.0f, 0},
      {128, 8, MoeGating::kSoftmax, false, 2.5f, 3},
      {256, 8, MoeGating::kSigmoid, true, 2.5f, 0},
      {64, 6, MoeGating::kSigmoid, false, 1.0f, 4},
      {32, 4, MoeGating::kSoftmaxWeight, false, 1.0f, 0},
      {128, 20, MoeGating::kSoftmaxWeight, true, 1.0f, 0},
      {16, 16, MoeGating::kSoftmax, true, 1.0f, 5},
  };
  const int tokens = 7;
  std::mt19937 rng(71);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.n_expert << " experts, k " << c.k << ", gating "
                                      << static_cast<int>(c.gating) << (c.norm ? ", norm" : "")
                                      << ", scale " << c.scale << ", levels " << c.levels);
    std::vector<float> logits(static_cast<size_t>(tokens) * c.n_expert);
    for (float& v : logits) {
      v = c.levels > 0 ? static_cast<float>(static_cast<int>(rng() % c.levels)) - 1.0f
                       : normal(rng);
    }
    reference::ops::MoeRouting r;
    r.n_expert = c.n_expert;
    r.n_expert_used = c.k;
    r.gating = c.gating;
    r.norm_weights = c.norm;
    r.weights_scale = c.scale;
    std::vector<int32_t> want(static_cast<size_t>(tokens) * c.k);
    std::vector<float> want_w(want.size()), scratch(2 * static_cast<size_t>(c.n_expert));
    reference::ops::moe_route(logits.data(), tokens, r, want.data(), want_w.data(),
                              scratch.data());
    DeviceBuffer dl = put(logits), ids = space(want.size() * sizeof(int)),
                 w = space(want.size() * sizeof(float));
    ASSERT_TRUE(run(kSample, cuda_kernels::kMoeRouteEntry, tokens, kSampleThreads,
                    dl.as<const float>(), c.n_expert, c.k, static_cast<int>(c.gating),
                    c.norm ? 1 : 0, c.scale, ids.as<int>(), w.as<float>())
                    .ok());
    const std::vector<int> got = get<int>(ids, want.size());
    const std::vector<float> got_w = get<float>(w, want.size());
    EXPECT_EQ(got, std::vector<int>(want.begin(), want.end()));
    for (size_t i = 0; i < want_w.size(); ++i) {
      const float ulp = std::nextafter(want_w[i], INFINITY) - want_w[i];
      EXPECT_LE(std::fabs(got_w[i] - want_w[i]), ulp) << "slot " << i << ": " << got_w[i]
                                                      << " against " << want_w[i];
    }
  }
  // A token of NaN logits, another of NaNs but for two numbers: k distinct
  // experts, the numbers first.
  std::vector<float> odd(2 * 8, std::numeric_limits<float>::quiet_NaN());
  odd[8 + 5] = 1.0f;
  odd[8 + 2] = 3.0f;
  DeviceBuffer dl = put(odd), ids = space(2 * 4 * sizeof(int)), w = space(2 * 4 * sizeof(float));
  ASSERT_TRUE(run(kSample, cuda_kernels::kMoeRouteEntry, 2, kSampleThreads, dl.as<const float>(),
                  8, 4, static_cast<int>(MoeGating::kSigmoid), 1, 1.0f, ids.as<int>(),
                  w.as<float>())
                  .ok());
  const std::vector<int> got = get<int>(ids, 8);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 2, 5, 0, 1}));
}

// A launch of a kernel the source does not have: InvalidArgument naming it.
TEST_P(Kernels, AMissingEntryIsInvalidArgument) {
  const std::vector<float> x(4, 1.0f);
  DeviceBuffer dx = put(x), did = space(sizeof(int));
  const absl::Status st =
      run(kSample, "strata_no_such_kernel", 1, 32, dx.as<const float>(), 4, did.as<int>());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("strata_no_such_kernel"), std::string::npos) << st;
}

INSTANTIATE_TEST_SUITE_P(On, Kernels, ::testing::ValuesIn(kernel_params()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace strata::worker::kernels_test
