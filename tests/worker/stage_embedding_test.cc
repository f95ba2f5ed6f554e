// Embedding slices (SequenceSlice.embed) through a split of stories260K
// (../shared): a slice's sum is the sum of its rows' vectors, computed
// here another way, from the last rows of every prefix (EMBED_LAST of a
// prompt cut after each position: causal attention makes that row the
// prompt's row there); chunked sums add up to the whole slice's; an
// embedding slice samples nothing; the refusals name the field.
#include <cmath>
#include <vector>

#include "tests/worker/worker_test_util.h"

namespace strata::worker_test {
namespace {

#define SKIP_WITHOUT_STORIES() \
  if (!exists(stories_path())) \
  GTEST_SKIP() << stories_path() << " absent (../shared/models)"

std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 37 + 11) % 500);
  return p;
}

v1::SequenceSlice embed_slice(uint64_t seq, int start, std::vector<int32_t> tokens,
                              v1::EmbedRows how) {
  v1::SequenceSlice s = slice(seq, start, std::move(tokens), /*sample=*/false);
  s.set_embed(how);
  return s;
}

// The one embedding of a micro-batch of one slice.
std::vector<float> run_embedding(std::span<const std::unique_ptr<worker::Stage>> stages,
                                 const v1::SequenceSlice& s) {
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() = s;
  auto result = run_chain(stages, batch);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_EQ(result->tokens_size(), 0);
  EXPECT_EQ(result->embeddings_size(), 1);
  if (result->embeddings_size() != 1) return {};
  const v1::SliceEmbedding& e = result->embeddings(0);
  EXPECT_EQ(e.seq_id(), s.seq_id());
  EXPECT_EQ(e.pos(), s.start_pos());
  EXPECT_EQ(e.rows(), s.tokens_size());
  return {e.values().begin(), e.values().end()};
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, norm = 0;
  for (size_t c = 0; c < want.size(); ++c) {
    err += (got[c] - want[c]) * (got[c] - want[c]);
    norm += want[c] * want[c];
  }
  ASSERT_GT(norm, 0.0) << what;
  EXPECT_LT(std::sqrt(err / norm), 1e-4) << what;
}

TEST(StageEmbedding, ASumIsTheSumOfEveryPrefixsLastRowAndChunksAddUp) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  ASSERT_EQ(stages.size(), 2u);
  const int n = 24;
  const std::vector<int32_t> p = prompt_of(n);
  const std::vector<float> whole = run_embedding(stages, embed_slice(1, 0, p, v1::EMBED_SUM));
  ASSERT_FALSE(whole.empty());
  // Every prefix's last row (start_pos 0 starts sequence 100 afresh).
  std::vector<double> rows_sum(whole.size(), 0.0);
  for (int k = 1; k <= n; ++k) {
    const std::vector<float> last = run_embedding(
        stages, embed_slice(100, 0, std::vector<int32_t>(p.begin(), p.begin() + k),
                            v1::EMBED_LAST));
    ASSERT_EQ(last.size(), whole.size());
    for (size_t c = 0; c < last.size(); ++c) rows_sum[c] += last[c];
  }
  expect_close(whole, rows_sum, "one slice against the prefixes' last rows");
  // The same prompt in chunks of 5 (one sequence): the chunks' sums.
  std::vector<double> chunks(whole.size(), 0.0);
  for (int start = 0; start < n; start += 5) {
    const int rows = std::min(5, n - start);
    const std::vector<float> part = run_embedding(
        stages, embed_slice(2, start, std::vector<int32_t>(p.begin() + start,
                                                           p.begin() + start + rows),
                            v1::EMBED_SUM));
    ASSERT_EQ(part.size(), whole.size());
    for (size_t c = 0; c < part.size(); ++c) chunks[c] += part[c];
  }
  std::vector<double> whole_d(whole.begin(), whole.end());
  std::vector<float> chunks_f(chunks.begin(), chunks.end());
  expect_close(chunks_f, whole_d, "chunks against one slice");
  // The last row of the whole prompt is the last prefix's.
  const std::vector<float> last_whole = run_embedding(stages, embed_slice(3, 0, p, v1::EMBED_LAST));
  const std::vector<float> last_again = run_embedding(stages, embed_slice(4, 0, p, v1::EMBED_LAST));
  EXPECT_EQ(last_whole, last_again);  // a backend is deterministic
}

TEST(StageEmbedding, BesideOtherSlicesAVectorIsTheSameAsAlone) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {1, 3});
  const std::vector<int32_t> p = prompt_of(9);
  const std::vector<float> alone = run_embedding(stages, embed_slice(1, 0, p, v1::EMBED_SUM));
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() = slice(7, 0, prompt_of(4), /*sample=*/true);
  *batch.add_slices() = embed_slice(8, 0, p, v1::EMBED_SUM);
  *batch.add_slices() = embed_slice(9, 0, prompt_of(3), v1::EMBED_LAST);
  auto result = run_chain(stages, batch);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens_size(), 1);
  EXPECT_EQ(result->tokens(0).seq_id(), 7u);
  ASSERT_EQ(result->embeddings_size(), 2);
  EXPECT_EQ(result->embeddings(0).seq_id(), 8u);
  EXPECT_EQ(result->embeddings(1).seq_id(), 9u);
  const std::vector<float> beside(result->embeddings(0).values().begin(),
                                  result->embeddings(0).values().end());
  EXPECT_EQ(beside, alone);  // batch invariance (worker/backend.h)
}

TEST(StageEmbedding, RefusalsNameTheField) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {});
  ASSERT_EQ(stages.size(), 1u);
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  v1::SequenceSlice s = embed_slice(1, 0, prompt_of(3), v1::EMBED_SUM);
  s.set_sample(true);
  *batch.add_slices() = s;
  auto r = run_chain(stages, batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "slices[0].embed: not with sample or prompt_logprobs (an embedding slice gets no "
            "logits)");
  batch.mutable_slices(0)->set_sample(false);
  batch.mutable_slices(0)->set_prompt_logprobs(1);
  EXPECT_EQ(run_chain(stages, batch).status().code(), absl::StatusCode::kInvalidArgument);
  batch.mutable_slices(0)->clear_prompt_logprobs();
  batch.mutable_slices(0)->set_embed(static_cast<v1::EmbedRows>(7));
  r = run_chain(stages, batch);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "slices[0].embed: 7 is not EMBED_NONE, EMBED_LAST or EMBED_SUM");
  EXPECT_EQ(stages[0]->live_sequences(), 0);
}

}  // namespace
}  // namespace strata::worker_test
