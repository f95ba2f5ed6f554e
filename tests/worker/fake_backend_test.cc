// The fake backend (worker/fake_backend.h) and the Stage over it: the
// Stage hands a whole micro-batch to one forward() (every slice, in
// order), and a sequence's sampled ids do not depend on what else is in
// its micro-batches. The fake's outputs depend on each sequence's whole
// history, so a row given the wrong position or sequence shows.
#include "worker/fake_backend.h"

#include <map>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "worker/shard_plan.h"

namespace strata::worker_test {
namespace {

constexpr int kLayers = 4;
constexpr int kEmbd = 8;
constexpr int kVocab = 50;

std::unique_ptr<worker::FakeBackend> fake(int first, int last) {
  worker::FakeBackendOptions o;
  o.n_layer = kLayers;
  o.n_embd = kEmbd;
  o.n_vocab = kVocab;
  o.range = {first, last};
  o.max_batch = 64;
  o.record_calls = true;
  return std::make_unique<worker::FakeBackend>(o);
}

std::unique_ptr<worker::Stage> fake_stage(std::unique_ptr<worker::FakeBackend> backend,
                                          worker::FakeBackend** view) {
  *view = backend.get();
  worker::ShardPlan plan;
  v1::ShardInfo& info = plan.info;
  info.set_shard_id(kShardId);
  info.set_first_block(backend->range().first);
  info.set_last_block(backend->range().last);
  info.set_embedding(backend->range().first == 0);
  info.set_head(backend->range().last == kLayers);
  info.set_n_layer(kLayers);
  info.set_n_embd(kEmbd);
  info.set_n_ctx(64);
  info.set_max_sequences(16);
  info.set_max_batch_rows(64);
  return worker::make_stage(std::move(plan), std::move(backend), {});
}

worker::ForwardRequest one_sequence(int seq, std::span<const int32_t> tokens) {
  worker::ForwardRequest r;
  r.seq = seq;
  r.tokens = tokens;
  return r;
}

worker::ForwardRequest sliced(std::span<const int32_t> tokens,
                              std::span<const worker::ForwardSlice> slices) {
  worker::ForwardRequest r;
  r.tokens = tokens;
  r.slices = slices;
  return r;
}

TEST(FakeBackend, OutputsDependOnTheSequencesHistoryOnly) {
  auto b = fake(0, kLayers);
  ASSERT_TRUE(b->add_sequence(1, 16).ok());
  ASSERT_TRUE(b->add_sequence(2, 16).ok());
  const int32_t a[] = {3, 4, 5};
  worker::ForwardResult r;
  ASSERT_TRUE(b->forward(one_sequence(1, a), &r).ok());
  const std::vector<float> one(r.logits.begin(), r.logits.end());
  ASSERT_EQ(one.size(), static_cast<size_t>(kVocab));
  // The same rows on another sequence give the same logits; one row
  // fewer (another history) gives others.
  ASSERT_TRUE(b->forward(one_sequence(2, a), &r).ok());
  EXPECT_EQ(std::vector<float>(r.logits.begin(), r.logits.end()), one);
  ASSERT_TRUE(b->truncate_sequence(2, 1).ok());
  const int32_t tail[] = {5};
  ASSERT_TRUE(b->forward(one_sequence(2, tail), &r).ok());
  EXPECT_NE(std::vector<float>(r.logits.begin(), r.logits.end()), one);
  // Refusals change nothing: a sequence twice, rows that do not add up.
  const worker::ForwardSlice twice[] = {{1, 1, worker::Logits::kLast}, {1, 1, worker::Logits::kLast}};
  const int32_t two[] = {1, 2};
  EXPECT_TRUE(absl::IsInvalidArgument(b->forward(sliced(two, twice), &r)));
  const worker::ForwardSlice short_slices[] = {{1, 1, worker::Logits::kLast}};
  EXPECT_TRUE(absl::IsInvalidArgument(b->forward(sliced(two, short_slices), &r)));
  EXPECT_EQ(*b->sequence_length(1), 3);
  EXPECT_EQ(*b->sequence_length(2), 2);
}

// Greedy ids of `n_seqs` sequences with different prompts through a chain
// of fake stages, `together` sequences per micro-batch (1: each alone).
// `stages` keeps the stages (which own the backends) for the caller.
std::map<uint64_t, std::vector<int32_t>> greedy(int n_seqs, int together, int cut,
                                                std::vector<std::unique_ptr<worker::Stage>>& stages,
                                                std::vector<worker::FakeBackend*>* backends) {
  worker::FakeBackend* view = nullptr;
  if (cut == 0) {
    stages.push_back(fake_stage(fake(0, kLayers), &view));
    backends->push_back(view);
  } else {
    stages.push_back(fake_stage(fake(0, cut), &view));
    backends->push_back(view);
    stages.push_back(fake_stage(fake(cut, kLayers), &view));
    backends->push_back(view);
  }
  std::map<uint64_t, std::vector<int32_t>> ids;
  for (int g = 0; g < n_seqs; g += together) {
    // Prompts of 1 + q % 5 tokens, in one micro-batch; then 6 decode steps.
    v1::MicroBatch batch;
    batch.set_shard_id(kShardId);
    std::map<uint64_t, int> pos;
    for (int q = g; q < std::min(n_seqs, g + together); ++q) {
      std::vector<int32_t> prompt;
      for (int i = 0; i <= q % 5; ++i) prompt.push_back((q * 7 + i) % kVocab);
      *batch.add_slices() = slice(100 + q, 0, prompt);
      pos[100 + q] = static_cast<int>(prompt.size());
    }
    for (int step = 0; step < 6; ++step) {
      auto result = run_chain(stages, batch);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) return ids;
      batch.clear_slices();
      for (const v1::SampledToken& t : result->tokens()) {
        ids[t.seq_id()].push_back(t.id());
        *batch.add_slices() = slice(t.seq_id(), pos[t.seq_id()]++, {t.id()});
      }
    }
  }
  return ids;
}

TEST(FakeBackend, StageRunsAMicroBatchAsOneForwardWithTheSameIds) {
  // The fake is not split-invariant (a later stage hashes the hidden rows,
  // not the tokens): each split is held to its own solo run.
  for (int cut : {0, 1, 3}) {
    std::vector<std::unique_ptr<worker::Stage>> solo_stages;
    std::vector<worker::FakeBackend*> solo_backends;
    const auto solo = greedy(16, 1, cut, solo_stages, &solo_backends);
    ASSERT_EQ(solo.size(), 16u);
    for (int together : {4, 16}) {
      std::vector<std::unique_ptr<worker::Stage>> stages;
      std::vector<worker::FakeBackend*> backends;
      EXPECT_EQ(greedy(16, together, cut, stages, &backends), solo)
          << together << " together, cut " << cut;
      // Each micro-batch was one forward() on every stage: 6 steps per
      // group of `together` sequences, the first holding every prompt.
      for (worker::FakeBackend* b : backends) {
        ASSERT_EQ(b->calls().size(), static_cast<size_t>(6 * 16 / together));
        EXPECT_EQ(b->calls()[0].size(), static_cast<size_t>(together));
        EXPECT_EQ(b->calls()[0][1].rows, 2);  // sequence 101's prompt
        EXPECT_EQ(b->calls()[1][0].rows, 1);  // a decode row
      }
    }
  }
}

}  // namespace
}  // namespace strata::worker_test
