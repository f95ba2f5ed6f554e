// The sampler's grammar hook: a mask takes tokens out before the chain; no
// mask changes nothing.
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/sampler.h"

namespace strata::worker {
namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> l(n);
  for (float& x : l) x = d(rng);
  return l;
}

TEST(SamplerMask, MaskedTokensAreNeverPicked) {
  const int n = 300;
  std::vector<uint64_t> mask((n + 63) / 64, 0);
  for (int id : {7, 64, 65, 299}) mask[id / 64] |= uint64_t{1} << (id % 64);
  for (float t : {0.0f, 0.7f, 1.5f}) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.seed = 3;
    Sampler s(p, n);
    for (uint64_t i = 0; i < 200; ++i) {
      const int32_t id = s.sample(random_logits(n, i), mask);
      EXPECT_TRUE(id == 7 || id == 64 || id == 65 || id == 299) << id;
    }
  }
  std::vector<uint64_t> none((n + 63) / 64, 0);
  Sampler s(SamplingParams{}, n);
  EXPECT_EQ(s.sample(random_logits(n, 1), none), -1);
}

TEST(SamplerMask, NoMaskAndFullMaskSampleTheSame) {
  const int n = 1000;
  std::vector<uint64_t> all((n + 63) / 64, ~uint64_t{0});
  for (float t : {0.0f, 1.0f, 1.5f}) {
    SamplingParams p;
    p.temperature = t;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.1f;
    p.seed = 11;
    Sampler a(p, n), b(p, n);
    for (uint64_t i = 0; i < 100; ++i) {
      const std::vector<float> l = random_logits(n, i);
      const int32_t x = a.sample(l);
      EXPECT_EQ(x, b.sample(l, all));
      a.accept(x);
      b.accept(x);
    }
  }
}

}  // namespace
}  // namespace strata::worker
