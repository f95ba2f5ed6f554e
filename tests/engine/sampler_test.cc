// The sampler: greedy limits, seeds, penalties, parameter checks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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

// OpenAI's logit_bias is step 0 of the chain: added to the raw logits
// before the penalties, the mask and every later step. The expected token
// is computed here from the chain's definition (sampler.h), one token at a
// time, for greedy (with and without penalties or a mask) and for the
// limits of sampling that make it greedy (top_k 1, a tiny top_p).
TEST(Sampler, LogitBiasIsAddedBeforeEveryOtherStep) {
  constexpr int kVocab = 1000;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, kVocab - 1);
  std::uniform_real_distribution<float> small(-6.0f, 6.0f);
  for (uint32_t trial = 0; trial < 40; ++trial) {
    const std::vector<float> l = logits(kVocab, 100 + trial);
    std::map<int32_t, float> bias;
    for (int i = 0; i < 60; ++i) bias[pick(rng)] = small(rng);
    bias[argmax(l)] = trial % 3 == 0 ? -100.0f : bias[argmax(l)];
    if (trial % 4 == 1) bias[pick(rng)] = 100.0f;
    std::vector<int32_t> seen = {argmax(l), pick(rng), pick(rng)};
    std::vector<uint64_t> allowed((kVocab + 63) / 64, ~uint64_t{0});
    for (int i = 0; i < 100; ++i) {
      const int id = pick(rng);
      allowed[static_cast<size_t>(id) / 64] &= ~(uint64_t{1} << (id % 64));
    }
    for (const bool penalize : {false, true}) {
      for (const bool masked : {false, true}) {
        // The chain by hand: bias, then the repetition penalty, over the
        // allowed ids; the first of the highest.
        int32_t want = -1;
        float best = 0.0f;
        for (int32_t i = 0; i < kVocab; ++i) {
          if (masked && !((allowed[static_cast<size_t>(i) / 64] >> (i % 64)) & 1)) continue;
          float v = l[static_cast<size_t>(i)];
          if (auto it = bias.find(i); it != bias.end()) v += it->second;
          if (penalize && std::count(seen.begin(), seen.end(), i) > 0) {
            v = v > 0.0f ? v / 1.5f : v * 1.5f;
          }
          if (want < 0 || v > best) {
            want = i;
            best = v;
          }
        }
        SamplingParams greedy;
        greedy.logit_bias = LogitBias({bias.begin(), bias.end()});
        greedy.repeat_penalty = penalize ? 1.5f : 1.0f;
        SamplingParams top_k1 = greedy;
        top_k1.temperature = 0.7f;
        top_k1.top_k = 1;
        top_k1.seed = trial;
        SamplingParams top_p0 = top_k1;
        top_p0.top_k = 0;
        top_p0.top_p = 1e-7f;
        for (const SamplingParams& p : {greedy, top_k1, top_p0}) {
          ASSERT_TRUE(validate(p).ok());
          Sampler s(p, kVocab);
          for (int32_t id : seen) s.accept(id);
          const int32_t got =
              masked ? s.sample(l, allowed) : s.sample(l);
          EXPECT_EQ(got, want) << "trial " << trial << " penalize " << penalize << " masked "
                               << masked << " temperature " << p.temperature;
        }
      }
    }
  }
}

// The order of bias and penalty shows where a penalty divides: -1 + 2 = 1,
// then / 1.2 = 0.833 beats 0.82; penalty first (-1.2, + 2 = 0.8) would not.
TEST(Sampler, LogitBiasComesBeforeTheRepetitionPenalty) {
  std::vector<float> l(10, 0.0f);
  l[3] = -1.0f;
  l[4] = 0.82f;
  SamplingParams p;
  p.repeat_penalty = 1.2f;
  p.logit_bias = {{3, 2.0f}};
  Sampler s(p, 10);
  s.accept(3);
  EXPECT_EQ(s.sample(l), 3);
}

// +100 all but forces a token and -100 all but bans one when sampling at
// temperature 1 over logits of spread ~2: every draw of 200 seeds.
TEST(Sampler, LogitBiasOfAHundredForcesOrBans) {
  constexpr int kVocab = 500;
  const std::vector<float> l = logits(kVocab, 5);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams force;
    force.temperature = 1.0f;
    force.seed = seed;
    force.logit_bias = {{17, 100.0f}};
    Sampler f(force, kVocab);
    EXPECT_EQ(f.sample(l), 17) << seed;
    // Ban all but ids 40 and 41.
    SamplingParams ban = force;
    std::vector<LogitBias::Entry> all_but_two;
    for (int32_t i = 0; i < kVocab; ++i) {
      if (i != 40 && i != 41) all_but_two.emplace_back(i, -100.0f);
    }
    ban.logit_bias = LogitBias(std::move(all_but_two));
    Sampler b(ban, kVocab);
    const int32_t t = b.sample(l);
    EXPECT_TRUE(t == 40 || t == 41) << seed << ": " << t;
  }
}

// The sampler trusts its ids to be checked against the vocabulary
// (sampling_proto.h refuses them); one past it is ignored, not written.
TEST(Sampler, LogitBiasPastTheVocabularyIsIgnored) {
  const std::vector<float> l = logits(64, 9);
  SamplingParams p;
  p.logit_bias = {{64, 100.0f}, {1000000, 100.0f}};
  ASSERT_TRUE(validate(p).ok());
  Sampler s(p, 64);
  EXPECT_EQ(s.sample(l), argmax(l));
}

// A request's n choices copy its parameters n times; the bias (up to
// n_vocab pairs) is held once.
TEST(Sampler, CopiesOfALogitBiasShareItsPairs) {
  std::vector<LogitBias::Entry> many;
  for (int32_t i = 0; i < 1000; ++i) many.emplace_back(i, -1.0f);
  SamplingParams p;
  p.logit_bias = LogitBias(std::move(many));
  const std::vector<SamplingParams> choices(128, p);
  for (const SamplingParams& c : choices) {
    EXPECT_EQ(c.logit_bias.entries().data(), p.logit_bias.entries().data());
    EXPECT_EQ(c.logit_bias.entries().size(), 1000u);
  }
  EXPECT_TRUE(LogitBias(std::vector<LogitBias::Entry>{}).empty());
}

TEST(Sampler, ValidateRefusesUnorderedOrNonFiniteLogitBias) {
  SamplingParams p;
  p.logit_bias = {{5, 1.0f}, {5, 2.0f}};
  EXPECT_NE(validate(p).message().find("logit_bias: token id 5"), std::string::npos);
  p.logit_bias = {{6, 1.0f}, {5, 2.0f}};
  EXPECT_FALSE(validate(p).ok());
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(validate(p).ok());
  p.logit_bias = {{1, std::numeric_limits<float>::infinity()}};
  EXPECT_NE(validate(p).message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{1, 100.0f}, {2, -100.0f}};
  EXPECT_TRUE(validate(p).ok());
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
