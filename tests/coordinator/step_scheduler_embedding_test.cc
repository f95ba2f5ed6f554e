// Embeddings in the scheduler's core (SequenceRequest::embed): which slices
// ask the last stage for what, how the chunks' vectors are pooled, and what
// ends the sequence. The stages' answers are made by hand; the pooled
// vector is checked against the sum computed here.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "coordinator/step_scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/step_scheduler_test_util.h"

namespace strata::coordinator {
namespace {

using namespace step_test;  // NOLINT: the tests' own helpers

constexpr int kWidth = 4;  // n_embd of the answers below

std::shared_ptr<SequenceHandle> add_embedding(Core& c, uint64_t id, std::vector<int32_t> prompt,
                                              Pooling pooling) {
  auto h = std::make_shared<SequenceHandle>(id);
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.embed = pooling;
  c.s.add(h, std::move(r));
  return h;
}

// A slice's vector as a stage would pool it: the rows' "hidden" values are
// position-dependent, so a chunk counted twice or missed shows.
std::vector<float> chunk_vector(const v1::SequenceSlice& s) {
  std::vector<float> v(kWidth, 0.0f);
  for (int t = 0; t < s.tokens_size(); ++t) {
    const int pos = s.start_pos() + t;
    for (int c = 0; c < kWidth; ++c) {
      const float row = 0.25f * static_cast<float>((pos * 7 + c * 3) % 11) - 1.0f;
      if (s.embed() == v1::EMBED_SUM || t == s.tokens_size() - 1) {
        v[c] = s.embed() == v1::EMBED_SUM ? v[c] + row : row;
      }
    }
  }
  return v;
}

// Answers `b`: a vector for each embed slice (skipping those `drop` says),
// a token (5) for each sampling one.
absl::Status answer_embed(Core& c, const v1::MicroBatch& b,
                          const std::function<bool(const v1::SequenceSlice&)>& drop = nullptr) {
  v1::MicroBatchResult r;
  r.set_batch_id(b.batch_id());
  for (const v1::SequenceSlice& s : b.slices()) {
    if (s.sample()) {
      v1::SampledToken* t = r.add_tokens();
      t->set_seq_id(s.seq_id());
      t->set_id(5);
    }
    if (s.embed() == v1::EMBED_NONE || (drop && drop(s))) continue;
    v1::SliceEmbedding* e = r.add_embeddings();
    e->set_seq_id(s.seq_id());
    e->set_pos(s.start_pos());
    e->set_rows(s.tokens_size());
    for (float x : chunk_vector(s)) e->add_values(x);
  }
  return c.s.update_from_output(std::move(r));
}

// The mean over positions [0, n) of chunk_vector's rows, computed row by row.
std::vector<float> expected_mean(int n) {
  std::vector<double> sum(kWidth, 0.0);
  for (int pos = 0; pos < n; ++pos) {
    for (int c = 0; c < kWidth; ++c) {
      sum[c] += 0.25f * static_cast<float>((pos * 7 + c * 3) % 11) - 1.0f;
    }
  }
  std::vector<float> v(kWidth);
  for (int c = 0; c < kWidth; ++c) v[c] = static_cast<float>(sum[c] / n);
  return v;
}

TEST(StepSchedulerEmbedding, MeanPoolingAsksEveryChunkForItsSumAndDividesOnce) {
  Core c(options(8, /*prefill_chunk=*/8, /*max_batch_rows=*/0, /*max_in_flight=*/3));
  auto h = add_embedding(c, 1, seq_tokens(100, 20), Pooling::kMean);
  v1::MicroBatch b[3];
  for (auto& batch : b) batch = c.schedule();
  EXPECT_FALSE(c.s.schedule().has_value());  // nothing to decode after it
  const int starts[] = {0, 8, 16}, sizes[] = {8, 8, 4};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(b[i].slices_size(), 1);
    EXPECT_EQ(b[i].slices(0).start_pos(), starts[i]);
    EXPECT_EQ(b[i].slices(0).tokens_size(), sizes[i]);
    EXPECT_EQ(b[i].slices(0).embed(), v1::EMBED_SUM);
    EXPECT_FALSE(b[i].slices(0).sample());
  }
  ASSERT_TRUE(answer_embed(c, b[0]).ok());
  ASSERT_TRUE(answer_embed(c, b[1]).ok());
  EXPECT_TRUE(events(*h).empty());  // the last chunk is still out
  ASSERT_TRUE(answer_embed(c, b[2]).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kDone);
  const std::vector<float> want = expected_mean(20);
  ASSERT_EQ(e[0].embedding.size(), want.size());
  for (int k = 0; k < kWidth; ++k) EXPECT_FLOAT_EQ(e[0].embedding[k], want[k]) << k;
  EXPECT_TRUE(e[0].all_ids.empty());
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({1}));
  EXPECT_EQ(c.s.served(), 1u);
}

TEST(StepSchedulerEmbedding, LastPoolingAsksOnlyTheLastChunkForItsLastRow) {
  Core c(options(8, /*prefill_chunk=*/8, 0, /*max_in_flight=*/2));
  auto h = add_embedding(c, 1, seq_tokens(100, 13), Pooling::kLast);
  v1::MicroBatch b0 = c.schedule();
  v1::MicroBatch b1 = c.schedule();
  EXPECT_EQ(b0.slices(0).embed(), v1::EMBED_NONE);
  EXPECT_FALSE(b0.slices(0).sample());
  EXPECT_EQ(b1.slices(0).embed(), v1::EMBED_LAST);
  EXPECT_FALSE(b1.slices(0).sample());
  ASSERT_TRUE(answer_embed(c, b0).ok());
  ASSERT_TRUE(answer_embed(c, b1).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kDone);
  EXPECT_EQ(e[0].embedding, chunk_vector(b1.slices(0)));
}

TEST(StepSchedulerEmbedding, AChunkWithoutItsVectorFailsTheSequence) {
  Core c(options(8, 8, 0, 2));
  auto h = add_embedding(c, 1, seq_tokens(100, 12), Pooling::kMean);
  v1::MicroBatch b0 = c.schedule();
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(answer_embed(c, b0, [](const v1::SequenceSlice&) { return true; }).ok());
  ASSERT_TRUE(answer_embed(c, b1).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kError);
  EXPECT_EQ(e[0].error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(e[0].error.message(),
            "the last stage pooled positions up to 0 of the prompt's 12 for its embedding");
}

TEST(StepSchedulerEmbedding, AVectorOfAnotherSequenceOrPositionIsIgnored) {
  Core c(options(8, 8, 0, 1));
  auto h = add_embedding(c, 1, seq_tokens(100, 6), Pooling::kMean);
  v1::MicroBatch b = c.schedule();
  v1::MicroBatchResult r;
  r.set_batch_id(b.batch_id());
  for (uint64_t seq : {1u, 9u}) {  // 9: not in this micro-batch
    v1::SliceEmbedding* e = r.add_embeddings();
    e->set_seq_id(seq);
    e->set_pos(0);
    e->set_rows(6);
    for (float x : chunk_vector(b.slices(0))) e->add_values(x);
  }
  v1::SliceEmbedding* beyond = r.add_embeddings();  // rows past the prompt: dropped
  beyond->set_seq_id(1);
  beyond->set_pos(2);
  beyond->set_rows(9);
  beyond->add_values(1000.0f);
  ASSERT_TRUE(c.s.update_from_output(std::move(r)).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kDone);
  const std::vector<float> want = expected_mean(6);
  for (int k = 0; k < kWidth; ++k) EXPECT_FLOAT_EQ(e[0].embedding[k], want[k]) << k;
}

TEST(StepSchedulerEmbedding, EmbeddingsRunBesideDecodingSequencesAndNeverDecode) {
  Core c(options(8, 8, 0, 1));
  auto g = c.add(1, {1, 2, 3}, /*max_tokens=*/3);
  ASSERT_TRUE(c.answer(c.schedule(), {40}).ok());
  auto h = add_embedding(c, 2, seq_tokens(100, 5), Pooling::kLast);
  v1::MicroBatch b = c.schedule();
  ASSERT_EQ(b.slices_size(), 2);  // the decode row, then the whole prompt
  EXPECT_TRUE(b.slices(0).sample());
  EXPECT_EQ(b.slices(1).seq_id(), 2u);
  EXPECT_EQ(b.slices(1).embed(), v1::EMBED_LAST);
  ASSERT_TRUE(answer_embed(c, b).ok());
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({2}));
  v1::MicroBatch next = c.schedule();
  ASSERT_EQ(next.slices_size(), 1);
  EXPECT_EQ(next.slices(0).seq_id(), 1u);
  ASSERT_EQ(events(*h).size(), 1u);
}

TEST(StepSchedulerEmbedding, MeanPoolingRestoresNothingFromThePrefixCacheLastPoolingDoes) {
  Core c(cached(/*blocks=*/16));
  const std::vector<int32_t> prompt = seq_tokens(200, 40);  // two full blocks and 8
  run_one(c, 1, prompt);  // caches blocks 0 and 1
  for (Pooling p : {Pooling::kMean, Pooling::kLast}) {
    auto h = add_embedding(c, p == Pooling::kMean ? 2 : 3, prompt, p);
    v1::MicroBatch b = c.schedule();
    ASSERT_EQ(b.slices_size(), 1);
    const v1::SequenceSlice& s = b.slices(0);
    if (p == Pooling::kMean) {
      EXPECT_EQ(s.restore_blocks_size(), 0);
      EXPECT_EQ(s.start_pos(), 0);
      EXPECT_EQ(s.tokens_size(), 40);
    } else {
      EXPECT_EQ(restored(s).size(), 2u);
      EXPECT_EQ(s.start_pos(), 32);
      EXPECT_EQ(s.tokens_size(), 8);
    }
    ASSERT_TRUE(answer_embed(c, b).ok());
    std::vector<SequenceEvent> e = events(*h);
    ASSERT_EQ(e.size(), 1u);
    ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kDone);
    EXPECT_EQ(e[0].cached_tokens, p == Pooling::kMean ? 0 : 32);
    if (p == Pooling::kMean) {
      const std::vector<float> want = expected_mean(40);
      for (int k = 0; k < kWidth; ++k) EXPECT_FLOAT_EQ(e[0].embedding[k], want[k]) << k;
    } else {
      EXPECT_EQ(e[0].embedding, chunk_vector(s));
    }
    c.s.take_finished();
  }
}

TEST(StepSchedulerEmbedding, AMigratedEmbeddingStartsAgainAndCountsEachPositionOnce) {
  Core c(options(8, 8, 0, 2));
  auto h = add_embedding(c, 1, seq_tokens(100, 20), Pooling::kMean);
  v1::MicroBatch b0 = c.schedule();
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(answer_embed(c, b0).ok());  // its vector is kept ...
  EXPECT_EQ(c.s.suspend(absl::UnavailableError("worker w1 died"), /*max_migrations=*/1), 1);
  // ... and dropped with the pipeline: every chunk again, each once.
  for (;;) {
    std::optional<v1::MicroBatch> b = c.s.schedule();
    if (!b) break;
    ASSERT_TRUE(answer_embed(c, *b).ok());
  }
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].kind, SequenceEvent::Kind::kDone);
  const std::vector<float> want = expected_mean(20);
  for (int k = 0; k < kWidth; ++k) EXPECT_FLOAT_EQ(e[0].embedding[k], want[k]) << k;
}

}  // namespace
}  // namespace strata::coordinator
