// The KV store and attention kernels (worker/cuda/kernels/elementwise.cuh's
// stores, attention.cuh, flash_attention.cuh) on both devices, against the
// reference's attention; instantiated in kernels_test.cc (the fixture:
// kernels_fixture.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda/kernels_fixture.h"

namespace strata::worker::kernels_test {
namespace {

// f16 rounding to nearest even as the reference's f32_to_f16: exact; the
// rows outside [pos, pos + n) untouched.
TEST_P(Kernels, StoreKvRoundsToF16AtItsRows) {
  const int n_ctx = 9, pos = 4, n = 3, k_width = 48, v_width = 40;
  const std::vector<float> k = normal_values(static_cast<size_t>(n) * k_width, 4, 100.0f);
  const std::vector<float> v = normal_values(static_cast<size_t>(n) * v_width, 5, 1e-3f);
  DeviceBuffer dk = put(k), dv = put(v);
  DeviceBuffer kc = space(static_cast<size_t>(n_ctx) * k_width * 2, 0x5A);
  DeviceBuffer vc = space(static_cast<size_t>(n_ctx) * v_width * 2, 0x5A);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kStoreKvEntry, 2, 32, dk.as<const float>(),
                  dv.as<const float>(), kc.as<unsigned short>(), vc.as<unsigned short>(), pos, n,
                  k_width, v_width)
                  .ok());
  const std::vector<uint16_t> kg = get<uint16_t>(kc, static_cast<size_t>(n_ctx) * k_width);
  const std::vector<uint16_t> vg = get<uint16_t>(vc, static_cast<size_t>(n_ctx) * v_width);
  for (int r = 0; r < n_ctx; ++r) {
    const bool stored = r >= pos && r < pos + n;
    for (int i = 0; i < k_width; ++i) {
      const uint16_t want =
          stored ? reference::f32_to_f16(k[static_cast<size_t>(r - pos) * k_width + i]) : 0x5A5A;
      ASSERT_EQ(kg[static_cast<size_t>(r) * k_width + i], want) << "k row " << r << " " << i;
    }
    for (int i = 0; i < v_width; ++i) {
      const uint16_t want =
          stored ? reference::f32_to_f16(v[static_cast<size_t>(r - pos) * v_width + i]) : 0x5A5A;
      ASSERT_EQ(vg[static_cast<size_t>(r) * v_width + i], want) << "v row " << r << " " << i;
    }
  }
}

// Attention's parameters (scale 1/sqrt(dk)).
kernels::AttentionParams attention_params(int n_head, int n_head_kv, int dk, int dv,
                                          float softcap, int window, const float* sinks) {
  kernels::AttentionParams p;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim_k = dk;
  p.head_dim_v = dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(dk));
  p.softcap = softcap;
  p.sliding_window = window;
  p.sinks = sinks;
  return p;
}

// reference::ops::attention of q's rows at `positions` over an f16 cache of
// n_kv rows: [rows][n_head][dv].
std::vector<float> reference_attention(const std::vector<float>& q,
                                       const std::vector<uint16_t>& k16,
                                       const std::vector<uint16_t>& v16, int n_kv,
                                       const std::vector<int32_t>& positions,
                                       const kernels::AttentionParams& p) {
  ThreadPool pool(1);
  kernels::KvView kv;
  kv.type = GgmlType::kF16;
  kv.k = k16.data();
  kv.v = v16.data();
  kv.n_kv = n_kv;
  std::vector<float> out(positions.size() * static_cast<size_t>(p.n_head) * p.head_dim_v);
  reference::ops::AttentionScratch scratch(n_kv, p, 1);
  reference::ops::attention(q.data(), positions.data(), static_cast<int64_t>(positions.size()),
                            kv, p, out.data(), scratch, pool);
  return out;
}

// Decode attention: grouped heads, a soft cap, a sliding window, contexts
// below, at and past the block's threads, V rows of 48, 64 and 320 (past
// the warps' registers: a thread a dim). Both round q and the
// probabilities to f16; the reference sums the softmax in double, the
// kernel in float, which can move a probability across an f16 rounding
// boundary: 2e-3 absolute on outputs of magnitude ~1.
TEST_P(Kernels, AttentionDecodeMatchesTheReference) {
  struct Shape {
    int n_head, n_head_kv, dk, dv, n_kv, window;
    float softcap;
    bool sinks;
  };
  for (const Shape s :
       {Shape{9, 3, 64, 64, 1, 0, 0.0f, false}, Shape{9, 3, 64, 64, 64, 0, 0.0f, false},
        Shape{8, 2, 32, 48, 200, 0, 30.0f, false}, Shape{4, 4, 64, 64, 150, 40, 0.0f, false},
        Shape{8, 2, 64, 64, 1, 0, 0.0f, true}, Shape{8, 2, 64, 64, 90, 32, 0.0f, true},
        Shape{4, 2, 64, 320, 70, 0, 0.0f, false}}) {
    SCOPED_TRACE(std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) + " heads, n_kv " +
                 std::to_string(s.n_kv) + ", window " + std::to_string(s.window) + ", softcap " +
                 std::to_string(s.softcap) + (s.sinks ? ", sinks" : ""));
    // Sinks around the scores' size, one per head (gpt-oss).
    const std::vector<float> sinks = normal_values(static_cast<size_t>(s.n_head), 9, 2.0f);
    const std::vector<float> q = normal_values(static_cast<size_t>(s.n_head) * s.dk, 6);
    const std::vector<float> k = normal_values(static_cast<size_t>(s.n_kv) * s.n_head_kv * s.dk, 7);
    const std::vector<float> v = normal_values(static_cast<size_t>(s.n_kv) * s.n_head_kv * s.dv, 8);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = reference::f32_to_f16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) v16[i] = reference::f32_to_f16(v[i]);
    const kernels::AttentionParams p = attention_params(s.n_head, s.n_head_kv, s.dk, s.dv,
                                                        s.softcap, s.window,
                                                        s.sinks ? sinks.data() : nullptr);
    const int32_t pos = s.n_kv - 1;
    const std::vector<float> want = reference_attention(q, k16, v16, s.n_kv, {pos}, p);

    const int window_begin = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    DeviceBuffer dq = put(q), dk = put(k16), dv = put(v16);
    DeviceBuffer dout = space(want.size() * sizeof(float));
    DeviceBuffer scores = space(static_cast<size_t>(s.n_head) * s.n_kv * sizeof(float));
    DeviceBuffer dsinks = put(sinks);
    ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionDecodeEntry, s.n_head, kAttentionThreads,
                    dq.as<const float>(), dk.as<const unsigned short>(),
                    dv.as<const unsigned short>(), dout.as<float>(), scores.as<float>(), s.n_kv,
                    window_begin, s.n_head, s.n_head_kv, s.dk, s.dv, p.scale, s.softcap,
                    s.sinks ? dsinks.as<const float>() : static_cast<const float*>(nullptr))
                    .ok());
    const std::vector<float> got = get<float>(dout, want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-3f) << i;
  }
}

// Flash attention of a prompt chunk (strata_flash_attention_rows, on the
// tensor cores) against reference::ops::attention of the same rows:
// grouped heads, chunks that start at 0 and later in the cache, more rows
// than a block takes, a sliding window, a soft cap, sinks, head sizes 32,
// 64 and 256 (keys in steps of 64 and 32). The kernel rounds exp(s - m) to
// f16 before normalising, the reference the normalised p
// (flash_attention_source.h): 3e-3 absolute on outputs of magnitude ~1
// (measured: at most 7.6e-4 over these cases).
TEST_P(Kernels, FlashAttentionMatchesTheReference) {
  struct Shape {
    int n_head, n_head_kv, dim, pos0, rows, window;
    float softcap;
    bool sinks;
  };
  for (const Shape s : {Shape{4, 2, 32, 0, 70, 0, 0.0f, false},
                        Shape{8, 2, 64, 37, 20, 16, 30.0f, true},
                        Shape{4, 4, 64, 100, 3, 0, 0.0f, true},
                        Shape{2, 1, 256, 5, 40, 0, 0.0f, false}}) {
    SCOPED_TRACE(std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) + " heads of " +
                 std::to_string(s.dim) + ", rows " + std::to_string(s.rows) + " at " +
                 std::to_string(s.pos0) + ", window " + std::to_string(s.window) + ", softcap " +
                 std::to_string(s.softcap) + (s.sinks ? ", sinks" : ""));
    const int n_kv = s.pos0 + s.rows;
    const std::vector<float> sinks = normal_values(static_cast<size_t>(s.n_head), 19, 2.0f);
    const std::vector<float> q = normal_values(static_cast<size_t>(s.rows) * s.n_head * s.dim, 16);
    const std::vector<float> k = normal_values(static_cast<size_t>(n_kv) * s.n_head_kv * s.dim, 17);
    const std::vector<float> v = normal_values(static_cast<size_t>(n_kv) * s.n_head_kv * s.dim, 18);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = reference::f32_to_f16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) v16[i] = reference::f32_to_f16(v[i]);
    const kernels::AttentionParams p = attention_params(
        s.n_head, s.n_head_kv, s.dim, s.dim, s.softcap, s.window, s.sinks ? sinks.data() : nullptr);
    std::vector<int32_t> positions(static_cast<size_t>(s.rows));
    for (int r = 0; r < s.rows; ++r) positions[static_cast<size_t>(r)] = s.pos0 + r;
    const std::vector<float> want = reference_attention(q, k16, v16, n_kv, positions, p);

    DeviceBuffer dq = put(q), dk = put(k16), dv = put(v16), dsinks = put(sinks);
    DeviceBuffer dout = space(want.size() * sizeof(float));
    const KernelSource& source = s.dim == 32 ? kFlash32 : s.dim == 64 ? kFlash64 : kFlash256;
    const int tiles = (s.rows + cuda_kernels::kFlashAttentionRowsPerBlock - 1) /
                      cuda_kernels::kFlashAttentionRowsPerBlock;
    ASSERT_TRUE(run(source, cuda_kernels::kFlashAttentionEntry, s.n_head * tiles,
                    cuda_kernels::kFlashAttentionThreads, dq.as<const float>(),
                    dk.as<const unsigned short>(), dv.as<const unsigned short>(), dout.as<float>(),
                    s.pos0, s.rows, s.window, s.n_head, s.n_head_kv, p.scale, s.softcap,
                    s.sinks ? dsinks.as<const float>() : static_cast<const float*>(nullptr))
                    .ok());
    const std::vector<float> got = get<float>(dout, want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 3e-3f) << i;
  }
}

// A prompt chunk's rows in one launch (strata_attention_rows): each row's
// output is the decode entry's for that row, bit for bit (the same device
// function), with and without a window and sinks.
TEST_P(Kernels, AttentionRowsEqualsOneDecodeLaunchPerRow) {
  const int n_head = 8, n_head_kv = 2, dk = 32, dv = 32, pos0 = 5, rows = 7;
  const int n_ctx = pos0 + rows, stride = n_ctx + 3;
  const std::vector<float> q = normal_values(static_cast<size_t>(rows) * n_head * dk, 30);
  const std::vector<float> k = normal_values(static_cast<size_t>(n_ctx) * n_head_kv * dk, 31);
  const std::vector<float> v = normal_values(static_cast<size_t>(n_ctx) * n_head_kv * dv, 32);
  const std::vector<float> sinks = normal_values(n_head, 33);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = reference::f32_to_f16(k[i]);
  for (size_t i = 0; i < v.size(); ++i) v16[i] = reference::f32_to_f16(v[i]);
  DeviceBuffer dq = put(q), dk16 = put(k16), dv16 = put(v16), dsinks = put(sinks);
  const float scale = 0.17f;
  for (const int window : {0, 4}) {
    for (const bool with_sinks : {false, true}) {
      SCOPED_TRACE("window " + std::to_string(window) + (with_sinks ? ", sinks" : ""));
      const float* sp = with_sinks ? dsinks.as<const float>() : nullptr;
      const size_t out_n = static_cast<size_t>(rows) * n_head * dv;
      DeviceBuffer out = space(out_n * sizeof(float));
      DeviceBuffer scores = space(static_cast<size_t>(rows) * n_head * stride * sizeof(float));
      ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionRowsEntry, n_head * rows,
                      kAttentionThreads, dq.as<const float>(), dk16.as<const unsigned short>(),
                      dv16.as<const unsigned short>(), out.as<float>(), scores.as<float>(), stride,
                      pos0, window, n_head, n_head_kv, dk, dv, scale, 0.0f, sp)
                      .ok());
      const std::vector<float> got = get<float>(out, out_n);
      for (int r = 0; r < rows; ++r) {
        const int n_kv = pos0 + r + 1;
        const int begin = window > 0 ? std::max(0, n_kv - window) : 0;
        DeviceBuffer one = space(static_cast<size_t>(n_head) * dv * sizeof(float));
        DeviceBuffer sc = space(static_cast<size_t>(n_head) * n_kv * sizeof(float));
        ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionDecodeEntry, n_head, kAttentionThreads,
                        dq.as<const float>() + static_cast<size_t>(r) * n_head * dk,
                        dk16.as<const unsigned short>(), dv16.as<const unsigned short>(),
                        one.as<float>(), sc.as<float>(), n_kv, begin, n_head, n_head_kv, dk, dv,
                        scale, 0.0f, sp)
                        .ok());
        const std::vector<float> want = get<float>(one, static_cast<size_t>(n_head) * dv);
        for (int i = 0; i < n_head * dv; ++i) {
          ASSERT_EQ(got[static_cast<size_t>(r) * n_head * dv + i], want[static_cast<size_t>(i)])
              << "row " << r << ", value " << i;
        }
      }
    }
  }
}

// A decode step's RoPE and KV store in one launch (strata_rope_store_kv_
// batch): q and k rotated and the caches written as strata_rope_rotate_qk
// then strata_store_kv_batch leave them, bit for bit; both pair orders, a
// partial rotation (dims past n_rot stored as they are), V wider than K,
// slots out of row order, caches of their own contexts.
TEST_P(Kernels, RopeAndKvStoreInOneLaunchGiveTheTwoLaunchesBits) {
  const int n_head = 4, n_head_kv = 2, head_dim = 16, layers = 2, layer = 1, rows = 3;
  const int kw = n_head_kv * head_dim, vw = n_head_kv * 24;
  const std::vector<int> n_ctx = {9, 5, 12}, pos = {6, 0, 11}, row_of = {2, 0, 1};
  const std::vector<float> q = normal_values(static_cast<size_t>(rows) * n_head * head_dim, 90);
  const std::vector<float> k = normal_values(static_cast<size_t>(rows) * kw, 91);
  const std::vector<float> v = normal_values(static_cast<size_t>(rows) * vw, 92);
  for (const int neox : {0, 1}) {
    for (const int n_rot : {16, 8}) {
      SCOPED_TRACE("neox " + std::to_string(neox) + ", n_rot " + std::to_string(n_rot));
      const std::vector<float> cs =
          normal_values(static_cast<size_t>(rows) * (n_rot / 2) * 2, 93 + n_rot);
      // Two copies of everything: the two launches, and the one.
      struct Side {
        DeviceBuffer q, k, v;
        std::vector<DeviceBuffer> caches;
        DeviceBuffer base;
      };
      DeviceBuffer dcs = put(cs), dctx = put(n_ctx), dpos = put(pos), drow = put(row_of);
      const auto side = [&]() {
        Side s{put(q), put(k), put(v), {}, {}};
        std::vector<unsigned long long> base;
        for (int r = 0; r < rows; ++r) {
          s.caches.push_back(
              put(std::vector<uint16_t>(static_cast<size_t>(layers) * n_ctx[r] * (kw + vw), 7)));
          base.push_back(reinterpret_cast<unsigned long long>(s.caches.back().get()));
        }
        s.base = put(base);
        return s;
      };
      Side two = side(), one = side();
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeRotateQkEntry, 2, 64, two.q.as<float>(),
                      two.k.as<float>(), dcs.as<const float>(), rows, n_head, n_head_kv, head_dim,
                      n_rot, neox)
                      .ok());
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kStoreKvBatchEntry, 2, 64, two.k.as<const float>(),
                      two.v.as<const float>(), two.base.as<const unsigned long long>(),
                      dctx.as<const int>(), dpos.as<const int>(), drow.as<const int>(), layer, rows,
                      kw, vw)
                      .ok());
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kRopeStoreKvBatchEntry, 3, 32, one.q.as<float>(),
                      one.k.as<float>(), one.v.as<const float>(), dcs.as<const float>(),
                      one.base.as<const unsigned long long>(), dctx.as<const int>(),
                      dpos.as<const int>(), drow.as<const int>(), layer, rows, n_head, n_head_kv,
                      head_dim, n_rot, neox, vw)
                      .ok());
      EXPECT_EQ(get<float>(one.q, q.size()), get<float>(two.q, q.size()));
      EXPECT_EQ(get<float>(one.k, k.size()), get<float>(two.k, k.size()));
      for (int r = 0; r < rows; ++r) {
        const size_t n = static_cast<size_t>(layers) * n_ctx[r] * (kw + vw);
        EXPECT_EQ(get<uint16_t>(one.caches[static_cast<size_t>(r)], n),
                  get<uint16_t>(two.caches[static_cast<size_t>(r)], n))
            << "cache of slot " << r;
      }
      // And the rotation happened: q differs from the input.
      EXPECT_NE(get<float>(one.q, q.size()), q);
    }
  }
}

// The decode rows of a step in one launch each (strata_store_kv_batch,
// strata_attention_batch): three sequences of their own contexts, their
// caches two layers deep, the rows out of order in q. The stores land at
// each row's position of layer 1, rounded to f16 as strata_store_kv; each
// row's attention is the decode entry's on its own cache, bit for bit.
TEST_P(Kernels, DecodeRowsOfSeveralSequencesInOneLaunch) {
  const int n_head = 4, n_head_kv = 2, dk = 32, dv = 32, layers = 2, layer = 1;
  const int kw = n_head_kv * dk, vw = n_head_kv * dv;
  const std::vector<int> n_ctx = {9, 5, 12}, pos = {6, 0, 11}, row_of = {2, 0, 1};
  const int rows = 3;
  const std::vector<float> q = normal_values(static_cast<size_t>(rows) * n_head * dk, 40);
  const std::vector<float> k = normal_values(static_cast<size_t>(rows) * kw, 41);
  const std::vector<float> v = normal_values(static_cast<size_t>(rows) * vw, 42);
  const std::vector<float> sinks = normal_values(n_head, 43);
  std::vector<DeviceBuffer> caches;
  std::vector<unsigned long long> base;
  for (int r = 0; r < rows; ++r) {
    // Earlier positions hold random f16 keys and values already.
    const std::vector<float> fill = normal_values(
        static_cast<size_t>(layers) * n_ctx[r] * (kw + vw), 50 + static_cast<uint32_t>(r));
    std::vector<uint16_t> f16(fill.size());
    for (size_t i = 0; i < fill.size(); ++i) f16[i] = reference::f32_to_f16(fill[i]);
    caches.push_back(put(f16));
    base.push_back(reinterpret_cast<unsigned long long>(caches.back().get()));
  }
  DeviceBuffer dq = put(q), dkeys = put(k), dvalues = put(v), dbase = put(base), dctx = put(n_ctx),
               dpos = put(pos), drow = put(row_of), dsinks = put(sinks);
  ASSERT_TRUE(run(kElementwise, cuda_kernels::kStoreKvBatchEntry, 2, 64, dkeys.as<const float>(),
                  dvalues.as<const float>(), dbase.as<const unsigned long long>(), dctx.as<const int>(),
                  dpos.as<const int>(), drow.as<const int>(), layer, rows, kw, vw)
                  .ok());
  for (int r = 0; r < rows; ++r) {
    const std::vector<uint16_t> c =
        get<uint16_t>(caches[static_cast<size_t>(r)], static_cast<size_t>(layers) * n_ctx[r] * (kw + vw));
    const size_t l1 = static_cast<size_t>(layer) * n_ctx[r] * (kw + vw);
    for (int i = 0; i < kw; ++i) {
      ASSERT_EQ(c[l1 + static_cast<size_t>(pos[r]) * kw + i],
                reference::f32_to_f16(k[static_cast<size_t>(row_of[r]) * kw + i]))
          << "row " << r << " key " << i;
    }
    for (int i = 0; i < vw; ++i) {
      ASSERT_EQ(c[l1 + static_cast<size_t>(n_ctx[r]) * kw + static_cast<size_t>(pos[r]) * vw + i],
                reference::f32_to_f16(v[static_cast<size_t>(row_of[r]) * vw + i]))
          << "row " << r << " value " << i;
    }
  }
  const std::vector<int> n_kv = {pos[0] + 1, pos[1] + 1, pos[2] + 1};
  DeviceBuffer dkv = put(n_kv);
  for (const int window : {0, 3}) {
    const int stride = 12;
    DeviceBuffer out = space(static_cast<size_t>(rows) * n_head * dv * sizeof(float));
    DeviceBuffer scores = space(static_cast<size_t>(rows) * n_head * stride * sizeof(float));
    ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionBatchEntry, n_head * rows,
                    kAttentionThreads, dq.as<const float>(), dbase.as<const unsigned long long>(),
                    dctx.as<const int>(), dkv.as<const int>(), drow.as<const int>(),
                    out.as<float>(), scores.as<float>(), stride, layer, window, n_head, n_head_kv,
                    dk, dv, 0.2f, 0.0f, dsinks.as<const float>())
                    .ok());
    const std::vector<float> got = get<float>(out, static_cast<size_t>(rows) * n_head * dv);
    for (int r = 0; r < rows; ++r) {
      const size_t l1 = static_cast<size_t>(layer) * n_ctx[r] * (kw + vw) * 2;  // bytes
      const auto* kc = reinterpret_cast<const unsigned short*>(
          static_cast<const char*>(caches[static_cast<size_t>(r)].get()) + l1);
      const unsigned short* vc = kc + static_cast<size_t>(n_ctx[r]) * kw;
      const int begin = window > 0 ? std::max(0, n_kv[r] - window) : 0;
      DeviceBuffer one = space(static_cast<size_t>(n_head) * dv * sizeof(float));
      DeviceBuffer sc = space(static_cast<size_t>(n_head) * n_kv[r] * sizeof(float));
      ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionDecodeEntry, n_head, kAttentionThreads,
                      dq.as<const float>() + static_cast<size_t>(row_of[r]) * n_head * dk, kc, vc,
                      one.as<float>(), sc.as<float>(), n_kv[r], begin, n_head, n_head_kv, dk, dv,
                      0.2f, 0.0f, dsinks.as<const float>())
                      .ok());
      const std::vector<float> want = get<float>(one, static_cast<size_t>(n_head) * dv);
      for (int i = 0; i < n_head * dv; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(row_of[r]) * n_head * dv + i], want[static_cast<size_t>(i)])
            << "window " << window << ", row " << r << ", value " << i;
      }
    }
  }
}

// strata_attention_batch_quantize: the batch entry's outputs, bit for bit,
// and each row's as int8 rows of Q8_0, Q8_K (a block over 8 heads) and
// Q8_1, strata_quantize_rows' bits; the per-row counts are back at 0 after
// each launch (a second launch gives the same).
TEST_P(Kernels, AttentionThatQuantizesItsRowsGivesTheTwoLaunchesBits) {
  const int n_head = 8, n_head_kv = 2, dk = 32, dv = 32, layer = 0, rows = 3, stride = 16;
  const int kw = n_head_kv * dk, vw = n_head_kv * dv, width = n_head * dv;
  const std::vector<int> n_ctx = {9, 5, 16}, n_kv = {7, 1, 16}, row_of = {2, 0, 1};
  const std::vector<float> q = normal_values(static_cast<size_t>(rows) * n_head * dk, 60);
  std::vector<DeviceBuffer> caches;
  std::vector<unsigned long long> base;
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> fill =
        normal_values(static_cast<size_t>(n_ctx[r]) * (kw + vw), 61 + static_cast<uint32_t>(r));
    std::vector<uint16_t> f16(fill.size());
    for (size_t i = 0; i < fill.size(); ++i) f16[i] = reference::f32_to_f16(fill[i]);
    caches.push_back(put(f16));
    base.push_back(reinterpret_cast<unsigned long long>(caches.back().get()));
  }
  DeviceBuffer dq = put(q), dbase = put(base), dctx = put(n_ctx), dkv = put(n_kv),
               drow = put(row_of);
  const size_t values = static_cast<size_t>(rows) * width, units = values / 32;
  DeviceBuffer want_out = space(values * sizeof(float)),
               scores = space(static_cast<size_t>(rows) * n_head * stride * sizeof(float));
  ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionBatchEntry, n_head * rows, kAttentionThreads,
                  dq.as<const float>(), dbase.as<const unsigned long long>(), dctx.as<const int>(),
                  dkv.as<const int>(), drow.as<const int>(), want_out.as<float>(),
                  scores.as<float>(), stride, layer, 0, n_head, n_head_kv, dk, dv, 0.2f, 0.0f,
                  static_cast<const float*>(nullptr))
                  .ok());
  const std::vector<float> want = get<float>(want_out, values);
  for (const int kind : {cuda_kernels::kRoundQ8_0, cuda_kernels::kRoundQ8_K,
                         cuda_kernels::kRoundQ8_1}) {
    SCOPED_TRACE("kind " + std::to_string(kind));
    DeviceBuffer wq = space(values), wd = space(units * sizeof(float)),
                 ws = space(units * sizeof(float));
    ASSERT_TRUE(run(kElementwise, cuda_kernels::kQuantizeRowsEntry, 4, 256,
                    want_out.as<const float>(), wq.as<signed char>(), wd.as<float>(),
                    ws.as<float>(), static_cast<long long>(values), kind)
                    .ok());
    DeviceBuffer done = put(std::vector<unsigned>(rows, 0u));
    for (int launch = 0; launch < 2; ++launch) {
      DeviceBuffer out = space(values * sizeof(float)), xq = space(values),
                   xd = space(units * sizeof(float)), xs = space(units * sizeof(float));
      ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionBatchQuantizeEntry, n_head * rows,
                      kAttentionThreads, dq.as<const float>(), dbase.as<const unsigned long long>(),
                      dctx.as<const int>(), dkv.as<const int>(), drow.as<const int>(),
                      out.as<float>(), scores.as<float>(), stride, layer, 0, n_head, n_head_kv,
                      dk, dv, 0.2f, 0.0f, static_cast<const float*>(nullptr), kind,
                      xq.as<signed char>(), xd.as<float>(), xs.as<float>(), done.as<unsigned>())
                      .ok());
      EXPECT_EQ(get<float>(out, values), want) << "launch " << launch;
      EXPECT_EQ(get<signed char>(xq, values), get<signed char>(wq, values)) << "launch " << launch;
      EXPECT_EQ(get<float>(xd, units), get<float>(wd, units)) << "launch " << launch;
      EXPECT_EQ(get<float>(xs, units), get<float>(ws, units)) << "launch " << launch;
      EXPECT_EQ(get<unsigned>(done, rows), std::vector<unsigned>(rows, 0u)) << "launch " << launch;
    }
  }
}

// Decode attention split over its keys (strata_attention_split_scores, then
// _weigh): rows of 1, 5, 23, 37 and 64 keys in chunks of at least 8 over 4
// blocks a head (one chunk, and 3 or 4 of unequal lengths), grouped heads,
// a sliding window, a soft cap, sinks, V rows of 320 (a thread a dim).
// Against reference::ops::attention, with the decode kernel's bound (only
// the order of the softmax's and the chunks' sums differ from it); a row
// of one chunk gives strata_attention_batch's bits; each row the same bits
// launched alone (rows independent of each other); with a kind, o's int8
// rows are strata_quantize_rows' of the output, and the counts are zeros
// after each launch.
TEST_P(Kernels, SplitDecodeAttentionMatchesTheReferenceAndKeepsEachRowsBits) {
  struct Shape {
    int n_head, n_head_kv, dk, dv, window;
    float softcap;
    bool sinks;
  };
  const int splits = 4, split_keys = 8, layer = 0;
  const std::vector<int> n_kv = {37, 1, 64, 5, 23}, row_of = {3, 0, 4, 1, 2};
  const int rows = static_cast<int>(n_kv.size());
  for (const Shape s : {Shape{4, 2, 32, 32, 0, 0.0f, false}, Shape{8, 2, 64, 64, 20, 30.0f, true},
                        Shape{4, 4, 64, 320, 0, 0.0f, false}}) {
    SCOPED_TRACE(std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) + " heads, dv " +
                 std::to_string(s.dv) + ", window " + std::to_string(s.window) + ", softcap " +
                 std::to_string(s.softcap) + (s.sinks ? ", sinks" : ""));
    const int kw = s.n_head_kv * s.dk, vw = s.n_head_kv * s.dv, width = s.n_head * s.dv;
    const std::vector<float> sinks = normal_values(static_cast<size_t>(s.n_head), 79, 2.0f);
    const std::vector<float> q = normal_values(static_cast<size_t>(rows) * s.n_head * s.dk, 70);
    const kernels::AttentionParams p = attention_params(s.n_head, s.n_head_kv, s.dk, s.dv,
                                                        s.softcap, s.window,
                                                        s.sinks ? sinks.data() : nullptr);
    // Row r's cache: n_ctx = n_kv + 3 positions (the last 3 never read).
    std::vector<int> n_ctx;
    std::vector<DeviceBuffer> caches;
    std::vector<unsigned long long> base;
    std::vector<float> want(static_cast<size_t>(rows) * width);
    for (int r = 0; r < rows; ++r) {
      const int nc = n_kv[r] + 3;
      n_ctx.push_back(nc);
      const std::vector<float> fill = normal_values(static_cast<size_t>(nc) * (kw + vw),
                                                    71 + static_cast<uint32_t>(r));
      std::vector<uint16_t> f16(fill.size());
      for (size_t i = 0; i < fill.size(); ++i) f16[i] = reference::f32_to_f16(fill[i]);
      caches.push_back(put(f16));
      base.push_back(reinterpret_cast<unsigned long long>(caches.back().get()));
      const std::vector<uint16_t> k16(f16.begin(), f16.begin() + static_cast<ptrdiff_t>(n_kv[r]) * kw);
      const auto v0 = f16.begin() + static_cast<ptrdiff_t>(nc) * kw;
      const std::vector<uint16_t> v16(v0, v0 + static_cast<ptrdiff_t>(n_kv[r]) * vw);
      const auto qr = q.begin() + static_cast<ptrdiff_t>(row_of[r]) * s.n_head * s.dk;
      const std::vector<float> one = reference_attention(
          std::vector<float>(qr, qr + s.n_head * s.dk), k16, v16, n_kv[r], {n_kv[r] - 1}, p);
      std::copy(one.begin(), one.end(), want.begin() + static_cast<ptrdiff_t>(row_of[r]) * width);
    }
    const int stride = 64;
    const size_t values = static_cast<size_t>(rows) * width, units = values / 32;
    DeviceBuffer dq = put(q), dbase = put(base), dctx = put(n_ctx), dkv = put(n_kv),
                 drow = put(row_of), dsinks = put(sinks);
    const float* sink_ptr = s.sinks ? dsinks.as<const float>() : nullptr;
    // Launches the pair over `count` rows from `first` of the tables.
    const auto split = [&](int first, int count, DeviceBuffer& out, int kind, DeviceBuffer* xq,
                           DeviceBuffer* xd, DeviceBuffer* xs, DeviceBuffer& done,
                           DeviceBuffer& head_done) {
      DeviceBuffer scores = space(static_cast<size_t>(count) * s.n_head * stride * sizeof(float));
      DeviceBuffer part = space(static_cast<size_t>(count) * s.n_head * splits * 2 * sizeof(float));
      DeviceBuffer part_o =
          space(static_cast<size_t>(count) * s.n_head * splits * s.dv * sizeof(float));
      const unsigned grid = static_cast<unsigned>(count * s.n_head * splits);
      absl::Status st = run(
          kAttention, cuda_kernels::kAttentionSplitScoresEntry, grid, kAttentionThreads,
          dq.as<const float>(), dbase.as<const unsigned long long>() + first,
          dctx.as<const int>() + first, dkv.as<const int>() + first, drow.as<const int>() + first,
          out.as<float>(), scores.as<float>(), stride, part.as<float>(), layer, s.window, s.n_head,
          s.n_head_kv, s.dk, s.dv, p.scale, s.softcap, sink_ptr, splits, split_keys);
      if (!st.ok()) return st;
      return run(kAttention, cuda_kernels::kAttentionSplitWeighEntry, grid, kAttentionThreads,
                 dbase.as<const unsigned long long>() + first, dctx.as<const int>() + first,
                 dkv.as<const int>() + first, drow.as<const int>() + first, out.as<float>(),
                 scores.as<float>(), stride, part.as<const float>(), part_o.as<float>(),
                 head_done.as<unsigned>(), layer, s.window, s.n_head, s.n_head_kv, s.dk, s.dv,
                 sink_ptr, splits, split_keys, kind,
                 xq != nullptr ? xq->as<signed char>() : nullptr,
                 xd != nullptr ? xd->as<float>() : nullptr,
                 xs != nullptr ? xs->as<float>() : nullptr, done.as<unsigned>());
    };
    DeviceBuffer done = put(std::vector<unsigned>(rows, 0u));
    DeviceBuffer head_done = put(std::vector<unsigned>(static_cast<size_t>(rows) * s.n_head, 0u));
    DeviceBuffer out = space(values * sizeof(float));
    ASSERT_TRUE(split(0, rows, out, cuda_kernels::kRoundNone, nullptr, nullptr, nullptr, done,
                      head_done)
                    .ok());
    const std::vector<float> got = get<float>(out, values);
    for (size_t i = 0; i < values; ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-3f) << "row " << i / static_cast<size_t>(width);
    }
    EXPECT_EQ(get<unsigned>(head_done, static_cast<size_t>(rows) * s.n_head),
              std::vector<unsigned>(static_cast<size_t>(rows) * s.n_head, 0u));

    // The batch kernel's output: the one-chunk rows' bits (1 and 5 keys;
    // the window keeps 23 and 37 to 20, still more than a chunk).
    DeviceBuffer batch_out = space(values * sizeof(float));
    DeviceBuffer batch_scores = space(static_cast<size_t>(rows) * s.n_head * stride * sizeof(float));
    ASSERT_TRUE(run(kAttention, cuda_kernels::kAttentionBatchEntry, s.n_head * rows,
                    kAttentionThreads, dq.as<const float>(), dbase.as<const unsigned long long>(),
                    dctx.as<const int>(), dkv.as<const int>(), drow.as<const int>(),
                    batch_out.as<float>(), batch_scores.as<float>(), stride, layer, s.window,
                    s.n_head, s.n_head_kv, s.dk, s.dv, p.scale, s.softcap, sink_ptr)
                    .ok());
    const std::vector<float> batch = get<float>(batch_out, values);
    int multi = 0;
    for (int r = 0; r < rows; ++r) {
      const int len = std::min(n_kv[r], s.window > 0 ? s.window : n_kv[r]);
      const auto at = static_cast<ptrdiff_t>(row_of[r]) * width;
      const std::vector<float> split_row(got.begin() + at, got.begin() + at + width);
      const std::vector<float> batch_row(batch.begin() + at, batch.begin() + at + width);
      if (len <= split_keys) {
        EXPECT_EQ(split_row, batch_row) << "row " << r << " (" << len << " keys: one chunk)";
      } else {
        ++multi;
      }
      // Alone: the same bits.
      DeviceBuffer alone = space(values * sizeof(float));
      ASSERT_TRUE(split(r, 1, alone, cuda_kernels::kRoundNone, nullptr, nullptr, nullptr, done,
                        head_done)
                      .ok());
      const std::vector<float> a = get<float>(alone, values);
      EXPECT_EQ(std::vector<float>(a.begin() + at, a.begin() + at + width), split_row)
          << "row " << r << " alone";
    }
    EXPECT_EQ(multi, 3);

    // With o's int8 rows: strata_quantize_rows' bits of the same output.
    for (const int kind : {cuda_kernels::kRoundQ8_0, cuda_kernels::kRoundQ8_K}) {
      if (kind == cuda_kernels::kRoundQ8_K && width % 256 != 0) continue;
      SCOPED_TRACE("kind " + std::to_string(kind));
      DeviceBuffer wq = space(values), wd = space(units * sizeof(float)),
                   ws = space(units * sizeof(float));
      ASSERT_TRUE(run(kElementwise, cuda_kernels::kQuantizeRowsEntry, 4, 256, out.as<const float>(),
                      wq.as<signed char>(), wd.as<float>(), ws.as<float>(),
                      static_cast<long long>(values), kind)
                      .ok());
      DeviceBuffer qout = space(values * sizeof(float)), xq = space(values),
                   xd = space(units * sizeof(float)), xs = space(units * sizeof(float));
      ASSERT_TRUE(split(0, rows, qout, kind, &xq, &xd, &xs, done, head_done).ok());
      EXPECT_EQ(get<float>(qout, values), got);
      EXPECT_EQ(get<signed char>(xq, values), get<signed char>(wq, values));
      EXPECT_EQ(get<float>(xd, units), get<float>(wd, units));
      EXPECT_EQ(get<float>(xs, units), get<float>(ws, units));
      EXPECT_EQ(get<unsigned>(done, rows), std::vector<unsigned>(rows, 0u));
    }
  }
}

}  // namespace
}  // namespace strata::worker::kernels_test
