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

// Metadata that counts fewer blocks than the file holds tensors for is
// refused, naming the first tensor past the count (llama.cpp refuses it
// too), rather than silently running fewer blocks.
TEST(Stories260K, BlockTensorsPastTheBlockCountAreRefused) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto opened = gguf::GgufModel::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  ASSERT_TRUE(hp.ok()) << hp.status();
  ASSERT_GE(hp->n_layer, 2);
  worker::CpuBackendOptions options;
  options.n_threads = 1;
  ASSERT_TRUE(worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options).ok());

  arch::Hyperparameters fewer = *hp;
  fewer.n_layer = hp->n_layer - 1;
  auto refused = worker::make_cpu_backend(model, fewer, {0, fewer.n_layer}, options);
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
TEST(Stories260K, VocabularyMustMatchTheEmbeddingRows) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto opened = gguf::GgufModel::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  ASSERT_TRUE(hp.ok()) << hp.status();
  ASSERT_GT(hp->n_vocab, 1);
  worker::CpuBackendOptions options;
  options.n_threads = 1;
  auto fine = worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options);
  ASSERT_TRUE(fine.ok()) << fine.status();
  const int rows = (*fine)->n_vocab();
  EXPECT_EQ(rows, hp->n_vocab);
  for (int n_vocab : {rows - 1, rows + 100}) {
    arch::Hyperparameters other = *hp;
    other.n_vocab = n_vocab;
    auto refused = worker::make_cpu_backend(model, other, {0, 1}, options);
    ASSERT_FALSE(refused.ok()) << n_vocab;
    EXPECT_NE(refused.status().message().find(
                  absl::StrCat(rows, " rows, but the vocabulary has ", n_vocab, " tokens")),
              std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace strata::engine_test
