// The tiny trained llama of ../shared (stories260K, F32 and llama.cpp's
// quantizations) against llama.cpp's greedy ids (../shared/README.md).
// Skips when ../shared is absent.
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace strata::engine_test {
namespace {

// BOS + "Once upon a time", and llama.cpp b10587's 32 greedy ids.
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
const std::vector<int32_t> kExpected = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
    338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
    265, 282, 295, 433, 426, 385, 328, 432, 358, 394};

TEST(Stories260K, GreedyMatchesLlamaCpp) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  for (GgmlType kv : {GgmlType::kF16, GgmlType::kF32}) {
    auto l = load(path, 128, 2, kv);
    ASSERT_TRUE(l.ok()) << l.status();
    auto ids = greedy(*l->backend, 0, kPrompt, 32);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, kExpected) << "kv " << (kv == GgmlType::kF16 ? "f16" : "f32");
  }
}

TEST(Stories260K, OneTokenAtATimeEqualsOneBatch) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto batched = load(path, 64);
  auto single = load(path, 64, 1, GgmlType::kF16, /*max_batch=*/1);
  ASSERT_TRUE(batched.ok() && single.ok());
  auto a = greedy(*batched->backend, 0, kPrompt, 16);
  auto b = greedy(*single->backend, 0, kPrompt, 16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

// stories260K opened with its hyperparameters, and a one-thread backend's
// options, for tests that change the metadata the weights are held to.
class Stories260KMetadata : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = shared_model("stories260K.gguf");
    if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
    auto opened = gguf::GgufModel::open(path);
    ASSERT_TRUE(opened.ok()) << opened.status();
    model_ = std::move(*opened);
    auto hp = arch::read_hyperparameters(model_->first());
    ASSERT_TRUE(hp.ok()) << hp.status();
    hp_ = *hp;
    options_.n_threads = 1;
  }
  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  worker::CpuBackendOptions options_;
};

// Metadata that counts fewer blocks than the file holds tensors for is
// refused, naming the first tensor past the count (llama.cpp refuses it
// too), rather than silently running fewer blocks.
TEST_F(Stories260KMetadata, BlockTensorsPastTheBlockCountAreRefused) {
  ASSERT_GE(hp_.n_layer, 2);
  ASSERT_TRUE(worker::make_cpu_backend(model_, hp_, {0, hp_.n_layer}, options_).ok());
  arch::Hyperparameters fewer = hp_;
  fewer.n_layer = hp_.n_layer - 1;
  auto refused = worker::make_cpu_backend(model_, fewer, {0, fewer.n_layer}, options_);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("blk." + std::to_string(fewer.n_layer) + "."), std::string::npos)
      << message;
  EXPECT_NE(message.find("metadata says " + std::to_string(fewer.n_layer) + " blocks"),
            std::string::npos)
      << message;
}

// A vocabulary whose size is not the embedding's row count is refused
// (the model would sample ids the tokenizer cannot decode), on every shard.
TEST_F(Stories260KMetadata, VocabularyMustMatchTheEmbeddingRows) {
  ASSERT_GT(hp_.n_vocab, 1);
  auto fine = worker::make_cpu_backend(model_, hp_, {0, hp_.n_layer}, options_);
  ASSERT_TRUE(fine.ok()) << fine.status();
  const int rows = (*fine)->n_vocab();
  EXPECT_EQ(rows, hp_.n_vocab);
  for (int n_vocab : {rows - 1, rows + 100}) {
    arch::Hyperparameters other = hp_;
    other.n_vocab = n_vocab;
    auto refused = worker::make_cpu_backend(model_, other, {0, 1}, options_);
    ASSERT_FALSE(refused.ok()) << n_vocab;
    EXPECT_NE(refused.status().message().find(
                  absl::StrCat(rows, " rows, but the vocabulary has ", n_vocab, " tokens")),
              std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace strata::engine_test
