// kernels/cpu/simd attention against reference::ops::attention on random
// queries and caches: f16 and f32 caches, GQA groups of 1..4, head sizes
// that are and are not multiples of 64, prefill and decode positions,
// sliding windows, soft-capping, attention sinks, 1..3 threads; groups of
// 2..8 heads and ragged key counts for the kernel's head x key and head x
// value tiles; and
// that a token's output does not depend on the tiling (a prefill's
// whole-group tiles against one-head decode steps, bit for bit).
#include "kernels/cpu/simd/attention.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/attention.h"

namespace strata::kernels::simd {
namespace {

namespace ops = reference::ops;

struct Shape {
  int n_head, n_head_kv, dk, dv;
  int64_t n_kv, n_tokens;
  int window;
  float softcap;
  int threads;
  bool sinks = false;  // attention sinks (gpt-oss)
};

// Sink logits for up to 16 heads, of the scores' size, so that some heads'
// sinks outweigh every key and others weigh little.
const float* sink_logits() {
  static const std::vector<float> s = {0.5f, -2.0f, 3.5f, 1.25f, -0.75f, 6.0f, 0.0f, 2.5f,
                                       -4.0f, 1.0f, 4.5f, -1.5f, 2.0f, 0.25f, -3.0f, 5.0f};
  return s.data();
}

std::string name(const Shape& s) {
  return "h" + std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) + " dk" +
         std::to_string(s.dk) + " dv" + std::to_string(s.dv) + " kv" + std::to_string(s.n_kv) +
         " t" + std::to_string(s.n_tokens) + " w" + std::to_string(s.window) + " cap" +
         std::to_string(s.softcap) + " threads" + std::to_string(s.threads) +
         (s.sinks ? " sinks" : "");
}

AttentionParams params_of(const Shape& s) {
  AttentionParams p;
  p.n_head = s.n_head;
  p.n_head_kv = s.n_head_kv;
  p.head_dim_k = s.dk;
  p.head_dim_v = s.dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
  p.softcap = s.softcap;
  p.sliding_window = s.window;
  if (s.sinks) p.sinks = sink_logits();
  return p;
}

// Random keys and values (f32, and their f16 roundings), queries peaked
// enough to matter, and the positions of the last n_tokens cache rows.
struct Inputs {
  std::vector<float> kf, vf, q;
  std::vector<uint16_t> kh, vh;
  std::vector<int32_t> positions;
  KvView kv(GgmlType type, int64_t n_kv) const {
    KvView v;
    v.type = type;
    v.k = type == GgmlType::kF16 ? static_cast<const void*>(kh.data()) : kf.data();
    v.v = type == GgmlType::kF16 ? static_cast<const void*>(vh.data()) : vf.data();
    v.n_kv = n_kv;
    return v;
  }
};

Inputs make_inputs(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.kf.resize(static_cast<size_t>(s.n_kv * s.n_head_kv * s.dk));
  in.vf.resize(static_cast<size_t>(s.n_kv * s.n_head_kv * s.dv));
  for (float& x : in.kf) x = normal(rng);
  for (float& x : in.vf) x = normal(rng);
  for (float x : in.kf) in.kh.push_back(reference::f32_to_f16(x));
  for (float x : in.vf) in.vh.push_back(reference::f32_to_f16(x));
  in.q.resize(static_cast<size_t>(s.n_tokens * s.n_head * s.dk));
  for (float& x : in.q) x = 2.0f * normal(rng);
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    in.positions.push_back(static_cast<int32_t>(s.n_kv - s.n_tokens + t));
  }
  return in;
}

void check(const Shape& s, GgmlType type, IsaTier isa) {
  SCOPED_TRACE(name(s) + (type == GgmlType::kF16 ? " f16 " : " f32 ") + isa_name(isa));
  const AttentionParams p = params_of(s);
  if (!attention_supported(p)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";

  Inputs in = make_inputs(s, static_cast<uint32_t>(s.n_kv * 131 + s.dk * 7 + s.n_tokens));
  const KvView kv = in.kv(type, s.n_kv);
  const std::vector<float>& q = in.q;
  const std::vector<int32_t>& positions = in.positions;

  ThreadPool pool(s.threads);
  std::vector<float> want(s.n_tokens * s.n_head * s.dv), got(want.size(), NAN);
  ops::AttentionScratch scratch(s.n_kv, p, s.threads);
  ops::attention(q.data(), positions.data(), s.n_tokens, kv, p, want.data(), scratch, pool);
  AttentionBuffers buffers(s.n_kv + 3, p, s.threads, isa);
  attention(q.data(), positions.data(), s.n_tokens, kv, p, got.data(), buffers, pool);

  // Outputs are convex combinations of values of |v| ~ 1. The f32 cache
  // differs only by summation order; the f16 cache also rounds each
  // probability to f16, where a 1-ulp change of a score can move one
  // probability by one f16 ulp (2^-11 relative).
  const double tol = type == GgmlType::kF16 ? 2e-3 : 2e-5;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i;
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  }
  EXPECT_LE(worst, tol);
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {9, 3, 64, 64, 37, 37, 0, 0.0f, 2},     // SmolLM2's heads, a prefill
      {9, 3, 64, 64, 300, 1, 0, 0.0f, 2},     // a decode step
      {4, 1, 256, 256, 70, 20, 0, 0.0f, 2},   // Gemma 3's heads
      {4, 1, 256, 256, 70, 20, 16, 0.0f, 3},  // its sliding window
      {8, 8, 32, 32, 13, 5, 0, 0.0f, 1},      // no GQA, short rows
      {6, 2, 48, 72, 29, 29, 5, 0.0f, 2},     // dk not 64-aligned, dv 64 + 8
      {8, 4, 64, 64, 41, 9, 7, 50.0f, 2},     // Gemma 2: window and soft-cap
      {4, 2, 128, 128, 1, 1, 0, 0.0f, 2},     // the first token
      {1, 1, 16, 16, 9, 2, 0, 0.0f, 3},       // fewer items than threads
      // Head tiles of 2, 4 + 1, 3 + 3, 4 + 3, 4 + 4; key counts that are
      // not multiples of the tiles' 2, 4, 8 keys; value rows of 9 chunks.
      {4, 2, 64, 72, 23, 11, 0, 0.0f, 2},
      {5, 1, 32, 72, 19, 19, 6, 0.0f, 1},
      {12, 2, 48, 72, 33, 7, 0, 30.0f, 2},
      {7, 1, 64, 64, 45, 13, 9, 0.0f, 2},
      {16, 2, 256, 256, 31, 6, 0, 0.0f, 2},
      // Attention sinks (gpt-oss: 64-wide heads, GQA 8, alternate
      // sliding-window layers): prefill and decode, with and without a
      // window, 1..3 threads; head tiles of 4 + 4 and 3 + 3.
      {8, 1, 64, 64, 37, 37, 0, 0.0f, 2, true},
      {8, 1, 64, 64, 37, 37, 9, 0.0f, 2, true},
      {8, 1, 64, 64, 300, 1, 0, 0.0f, 2, true},
      {8, 1, 64, 64, 300, 1, 16, 0.0f, 3, true},
      {6, 2, 48, 72, 29, 29, 5, 0.0f, 1, true},
      {16, 2, 64, 64, 70, 20, 0, 0.0f, 3, true},
  };
  return s;
}

// The tiers whose tiles this CPU runs: avx2 (8 lanes) and, with AVX-512,
// avx512 (16 lanes; avx512vnni runs the same attention).
std::vector<IsaTier> tiers() {
  std::vector<IsaTier> t = {IsaTier::kAvx2};
  if (cpu_has(IsaTier::kAvx512)) t.push_back(IsaTier::kAvx512);
  return t;
}

TEST(SimdAttention, EqualsReferenceWithF16Cache) {
  for (IsaTier isa : tiers()) {
    for (const Shape& s : shapes()) check(s, GgmlType::kF16, isa);
  }
}

TEST(SimdAttention, EqualsReferenceWithF32Cache) {
  for (IsaTier isa : tiers()) {
    for (const Shape& s : shapes()) check(s, GgmlType::kF32, isa);
  }
}

// The 512-bit tiles (avx512, avx512vnni) against the 8-lane ones: the same
// floats, prefill and decode steps (the spread split), 1..3 threads.
TEST(SimdAttention, WideTilesEqualEightLaneTiles) {
  if (!cpu_has(IsaTier::kAvx512)) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL/DQ";
  for (const Shape& s : shapes()) {
    for (GgmlType type : {GgmlType::kF16, GgmlType::kF32}) {
      SCOPED_TRACE(name(s) + (type == GgmlType::kF16 ? " f16" : " f32"));
      const AttentionParams p = params_of(s);
      Inputs in = make_inputs(s, static_cast<uint32_t>(s.n_kv * 29 + s.dv));
      const KvView kv = in.kv(type, s.n_kv);
      ThreadPool pool(s.threads);
      std::vector<float> narrow(s.n_tokens * s.n_head * s.dv, NAN), wide(narrow.size(), NAN);
      AttentionBuffers b8(s.n_kv, p, s.threads, IsaTier::kAvx2);
      AttentionBuffers b16(s.n_kv, p, s.threads, IsaTier::kAvx512Vnni);
      ASSERT_FALSE(b8.wide());
      ASSERT_EQ(b16.wide(), cpu_has(IsaTier::kAvx512Vnni));
      AttentionBuffers b16f(s.n_kv, p, s.threads, IsaTier::kAvx512);
      ASSERT_TRUE(b16f.wide());
      attention(in.q.data(), in.positions.data(), s.n_tokens, kv, p, narrow.data(), b8, pool);
      attention(in.q.data(), in.positions.data(), s.n_tokens, kv, p, wide.data(), b16f, pool);
      EXPECT_EQ(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)), 0);
      // Each token alone (a decode step: keys spread over the threads).
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        std::vector<float> one(s.n_head * s.dv, NAN);
        attention(in.q.data() + t * s.n_head * s.dk, in.positions.data() + t, 1, kv, p,
                  one.data(), b16f, pool);
        EXPECT_EQ(std::memcmp(one.data(), narrow.data() + t * s.n_head * s.dv,
                              one.size() * sizeof(float)),
                  0)
            << "token " << t;
      }
    }
  }
}

// Each token of a prefill (whole-group head tiles) alone as a decode step
// (one-head items): the same floats.
TEST(SimdAttention, OutputDoesNotDependOnTiling) {
  for (const Shape& s : shapes()) {
    for (GgmlType type : {GgmlType::kF16, GgmlType::kF32}) {
      SCOPED_TRACE(name(s) + (type == GgmlType::kF16 ? " f16" : " f32"));
      const AttentionParams p = params_of(s);
      if (!attention_supported(p)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
      Inputs in = make_inputs(s, static_cast<uint32_t>(s.n_kv * 17 + s.n_head));
      const KvView kv = in.kv(type, s.n_kv);
      const std::vector<float>& q = in.q;
      const std::vector<int32_t>& positions = in.positions;

      ThreadPool pool(2);
      AttentionBuffers buffers(s.n_kv, p, 2);
      std::vector<float> all(s.n_tokens * s.n_head * s.dv), one(s.n_head * s.dv);
      attention(q.data(), positions.data(), s.n_tokens, kv, p, all.data(), buffers, pool);
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        attention(q.data() + t * s.n_head * s.dk, positions.data() + t, 1, kv, p, one.data(),
                  buffers, pool);
        EXPECT_EQ(std::memcmp(one.data(), all.data() + t * s.n_head * s.dv,
                              one.size() * sizeof(float)),
                  0)
            << "token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::simd
