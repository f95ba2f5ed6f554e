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

}  // namespace
}  // namespace strata::engine_test
