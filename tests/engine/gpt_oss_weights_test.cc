// gpt-oss's tensors (attention sinks, the attention output bias, the router
// and expert biases, the FFN norm stored as post_attention_norm) are
// required where its recipe says so, and a file without one is refused
// naming the tensor. Uses the tiny MoE models of scripts/make-test-models.sh
// (a Mixtral-shaped file has none of these tensors); skips when absent.
#include <string>

#include "tests/engine/engine_test_util.h"

namespace strata::engine_test {
namespace {

TEST(GptOssWeights, MissingTensorsAreNamed) {
  const std::string path = real_model("tiny/tiny-mixtral.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (scripts/make-test-models.sh)";
  auto opened = gguf::GgufModel::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model = std::move(*opened);
  auto hp = arch::read_hyperparameters(model->first());
  ASSERT_TRUE(hp.ok()) << hp.status();
  worker::CpuBackendOptions options;
  options.n_threads = 1;
  ASSERT_TRUE(worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options).ok());

  struct Case {
    void (*set)(arch::BlockRecipe&);
    std::string tensor;
  };
  const Case cases[] = {
      {[](arch::BlockRecipe& r) { r.attn_sinks = true; }, "blk.0.attn_sinks.weight"},
      {[](arch::BlockRecipe& r) { r.attn_out_bias = true; }, "blk.0.attn_output.bias"},
      {[](arch::BlockRecipe& r) { r.expert_bias = true; }, "blk.0.ffn_gate_inp.bias"},
      {[](arch::BlockRecipe& r) { r.ffn_norm = "post_attention_norm.weight"; },
       "blk.0.post_attention_norm.weight"},
  };
  for (const Case& c : cases) {
    arch::Hyperparameters with = *hp;
    c.set(with.recipe);
    auto refused = worker::make_cpu_backend(model, with, {0, with.n_layer}, options);
    ASSERT_FALSE(refused.ok()) << c.tensor;
    EXPECT_EQ(refused.status().message(), c.tensor + ": missing") << refused.status();
  }
}

// The tiny gpt-oss loads whole and split at every block boundary.
TEST(GptOssWeights, TinyModelLoadsWholeAndSplit) {
  const std::string path = real_model("tiny/tiny-gpt-oss.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (scripts/make-test-models.sh)";
  auto opened = gguf::GgufModel::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model = std::move(*opened);
  auto hp = arch::read_hyperparameters(model->first());
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->family, arch::Family::kGptOss);
  worker::CpuBackendOptions options;
  options.n_threads = 1;
  for (int cut = 0; cut <= hp->n_layer; ++cut) {
    if (cut > 0) {
      EXPECT_TRUE(worker::make_cpu_backend(model, *hp, {0, cut}, options).ok()) << cut;
    }
    if (cut < hp->n_layer) {
      EXPECT_TRUE(worker::make_cpu_backend(model, *hp, {cut, hp->n_layer}, options).ok())
          << cut;
    }
  }
}

}  // namespace
}  // namespace strata::engine_test
