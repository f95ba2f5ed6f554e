// Mixture-of-experts routing (kernels/cpu/reference/ops/moe_routing.h)
// against values worked out here in double from the formulas of
// llama.cpp's build_moe_ffn.
#include "kernels/cpu/reference/ops/moe_routing.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace strata::reference::ops {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, int n_expert, int k, MoeGating gating,
             bool norm, float scale = 1.0f) {
  const int64_t n = static_cast<int64_t>(logits.size()) / n_expert;
  MoeRouting r;
  r.n_expert = n_expert;
  r.n_expert_used = k;
  r.gating = gating;
  r.norm_weights = norm;
  r.weights_scale = scale;
  Routed out{std::vector<int32_t>(n * k), std::vector<float>(n * k)};
  std::vector<float> scratch(2 * n_expert);
  std::vector<float> in = logits;
  moe_route(in.data(), n, r, out.experts.data(), out.weights.data(), scratch.data());
  EXPECT_EQ(in, logits) << "the logits are not changed";
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(MoeRouting, SoftmaxTopKLargestFirst) {
  // Two tokens over 4 experts.
  const Routed r = route({1, 3, 2, 0, /**/ 0.5, -2, 0.25, 4}, 4, 2, MoeGating::kSoftmax, false);
  const double s0 = std::exp(1) + std::exp(3) + std::exp(2) + std::exp(0);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_NEAR(r.weights[0], std::exp(3) / s0, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2) / s0, 1e-6);
  const double s1 = std::exp(0.5) + std::exp(-2) + std::exp(0.25) + std::exp(4);
  EXPECT_NEAR(r.weights[2], std::exp(4) / s1, 1e-6);
  EXPECT_NEAR(r.weights[3], std::exp(0.5) / s1, 1e-6);
}

TEST(MoeRouting, RenormalisedWeightsSumToOne) {
  // Mixtral / qwen3moe: the k probabilities divided by their sum.
  const Routed r = route({1, 3, 2, 0}, 4, 2, MoeGating::kSoftmax, true);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], std::exp(3) / (std::exp(3) + std::exp(2)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2) / (std::exp(3) + std::exp(2)), 1e-6);
  // k = 1 with renormalisation: weight exactly 1.
  const Routed one = route({0.1f, -0.3f, 0.7f}, 3, 1, MoeGating::kSoftmax, true);
  EXPECT_EQ(one.experts[0], 2);
  EXPECT_EQ(one.weights[0], 1.0f);
}

TEST(MoeRouting, SigmoidGating) {
  const Routed r = route({0, -1, 2, 1}, 4, 2, MoeGating::kSigmoid, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(r.weights[0], sigmoid(2), 1e-6);
  EXPECT_NEAR(r.weights[1], sigmoid(1), 1e-6);
  const Routed n = route({0, -1, 2, 1}, 4, 2, MoeGating::kSigmoid, true);
  EXPECT_NEAR(n.weights[0], sigmoid(2) / (sigmoid(2) + sigmoid(1)), 1e-6);
}

TEST(MoeRouting, SoftmaxOverTheSelectedLogits) {
  // gpt-oss: top-k of the raw logits, softmax over those k only.
  const Routed r = route({0.5, -1, 2, 1}, 4, 2, MoeGating::kSoftmaxWeight, false);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(r.weights[0], std::exp(2) / (std::exp(2) + std::exp(1)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(1) / (std::exp(2) + std::exp(1)), 1e-6);
}

TEST(MoeRouting, ScaleAndTies) {
  const Routed r = route({1, 3, 2, 0}, 4, 2, MoeGating::kSoftmax, true, 2.5f);
  EXPECT_NEAR(r.weights[0], 2.5 * std::exp(3) / (std::exp(3) + std::exp(2)), 1e-6);
  // Equal probabilities: the lower index first.
  const Routed tie = route({1, 1, 0, 1}, 4, 2, MoeGating::kSoftmax, false);
  EXPECT_EQ(tie.experts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(tie.weights[0], tie.weights[1]);
}

TEST(MoeRouting, EightExpertsTopTwoAsNumpyWouldPick) {
  // A row of 8 (the vectorised softmax path), every expert distinct.
  const std::vector<float> logits = {0.3f, -1.2f, 2.2f, 0.9f, 2.1f, -0.4f, 1.7f, 0.0f};
  const Routed r = route(logits, 8, 2, MoeGating::kSoftmax, false);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 4}));
  EXPECT_NEAR(r.weights[0], std::exp(2.2) / sum, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2.1) / sum, 1e-6);
}

}  // namespace
}  // namespace strata::reference::ops
