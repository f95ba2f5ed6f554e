// The sampler: greedy limits, seeds, penalties, parameter checks.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/sampler.h"

namespace strata::worker {
namespace {

std::vector<float> logits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Sampler, GreedyLimitsGiveTheArgmax) {
  SamplingParams greedy;  // temperature 0
  SamplingParams top_k1;
  top_k1.temperature = 1.0f;
  top_k1.top_k = 1;
  SamplingParams top_p0;
  top_p0.temperature = 1.0f;
  top_p0.top_p = 1e-6f;
  for (const SamplingParams& p : {greedy, top_k1, top_p0}) {
    ASSERT_TRUE(validate(p).ok());
    Sampler s(p, 1000);
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const std::vector<float> l = logits(1000, seed);
      EXPECT_EQ(s.sample(l), argmax(l));
    }
  }
}

// Greedy sampling of raw logits (no mask, no penalty) takes a vectorised
// path: it must give the first id of the highest logit at every length
// (tails of 1..15 past the 16-lane blocks), with many ties, -inf and NaN
// logits (a NaN is never the highest).
TEST(Sampler, GreedyIsTheFirstHighestLogitWithTiesAndTails) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-4, 4);
  std::uniform_int_distribution<int> odd(0, 99);
  for (int n : {1, 2, 3, 4, 5, 15, 16, 17, 31, 33, 1000, 49152, 49155}) {
    Sampler s(SamplingParams{}, n);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> l(static_cast<size_t>(n));
      for (float& x : l) {
        const int r = odd(rng);
        x = r == 0 ? -std::numeric_limits<float>::infinity()
            : r == 1 ? std::numeric_limits<float>::quiet_NaN()
                     : static_cast<float>(level(rng));  // few levels: ties
      }
      if (trial == 1) l.back() = 100.0f;  // the highest last
      if (trial == 2) l.front() = std::numeric_limits<float>::quiet_NaN();
      int32_t want = -1;  // the first of the highest non-NaN, by a plain scan
      for (int i = 0; i < n; ++i) {
        if (std::isnan(l[i])) continue;
        if (want < 0 || l[i] > l[want]) want = i;
      }
      if (want < 0) continue;  // all NaN: not this path's case
      EXPECT_EQ(s.sample(l), want) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedsDiffer) {
  SamplingParams p;
  p.temperature = 1.0f;
  auto draws = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, 50);
    std::vector<int32_t> out;
    for (uint32_t i = 0; i < 40; ++i) out.push_back(s.sample(logits(50, i)));
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
}

TEST(Sampler, PenaltiesLowerSeenTokens) {
  std::vector<float> l(10, 0.0f);
  l[3] = 2.0f;
  l[4] = 1.9f;
  SamplingParams p;
  p.repeat_penalty = 1.2f;  // 2.0 / 1.2 < 1.9
  Sampler s(p, 10);
  EXPECT_EQ(s.sample(l), 3);
  s.accept(3);
  EXPECT_EQ(s.sample(l), 4);
  SamplingParams f;
  f.frequency_penalty = 0.06f;
  Sampler fs(f, 10);
  fs.accept(3);
  EXPECT_EQ(fs.sample(l), 3);  // 2.0 - 0.06 > 1.9
  fs.accept(3);
  EXPECT_EQ(fs.sample(l), 4);  // 2.0 - 0.12 < 1.9
  SamplingParams pr;
  pr.presence_penalty = 0.2f;
  Sampler ps(pr, 10);
  ps.accept(3);
  EXPECT_EQ(ps.sample(l), 4);
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
  std::vector<float> l(10, 0.0f);
  l[3] = 2.0f;
  l[4] = 1.9f;
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.penalty_last_n = 2;
  Sampler s(p, 10);
  s.accept(3);
  EXPECT_EQ(s.sample(l), 4);
  s.accept(5);
  s.accept(6);  // 3 leaves the window
  EXPECT_EQ(s.sample(l), 3);
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(validate(p).message().find("top_p"), std::string::npos);
  p = {};
  p.top_k = -1;
  EXPECT_NE(validate(p).message().find("top_k"), std::string::npos);
  p = {};
  p.repeat_penalty = 0.0f;
  EXPECT_NE(validate(p).message().find("repeat_penalty"), std::string::npos);
  p = {};
  p.min_p = 2.0f;
  EXPECT_NE(validate(p).message().find("min_p"), std::string::npos);
}

}  // namespace
}  // namespace strata::worker
