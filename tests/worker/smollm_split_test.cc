// SmolLM2-135M (Q4_1, ~/.cache/strata/models) split in two stages gives
// the same greedy ids as one whole-model backend. Heavy: skips, saying so,
// when the model is absent.
#include "model/tokenizer/tokenizer.h"
#include "tests/worker/worker_test_util.h"

namespace strata::worker_test {
namespace {

TEST(SmolLM2Split, TwoStagesEqualOneProcess) {
  if (!exists(smollm_path())) {
    GTEST_SKIP() << smollm_path() << " absent (scripts/fetch-models.sh)";
  }
  auto model = gguf::GgufModel::open(smollm_path());
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = tokenizer::Tokenizer::from_gguf((*model)->first());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->encode("The capital of France is a city that");
  ASSERT_TRUE(ids.ok()) << ids.status();
  const std::vector<int32_t> prompt(ids->begin(), ids->end());
  constexpr int kTokens = 16;
  const auto expected = whole_model_greedy(smollm_path(), prompt, kTokens);
  const int n_layer = model_layers(smollm_path());
  for (int cut : {n_layer / 2, 5}) {
    auto stages = load_split(smollm_path(), {cut});
    ASSERT_EQ(stages.size(), 2u);
    EXPECT_EQ(chain_greedy(stages, prompt, kTokens), expected) << "cut " << cut;
  }
}

}  // namespace
}  // namespace strata::worker_test
