// Stage on stories260K (../shared): splits give the whole model's greedy
// ids; every check of stage.h names its field and changes nothing.
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>

#include "tests/worker/worker_test_util.h"
#include "worker/cuda/cuda_device.h"
#include "worker/fake_backend.h"
#include "worker/in_process_link.h"
#include "worker/shard_plan.h"

namespace strata::worker_test {
namespace {

#define SKIP_WITHOUT_STORIES() \
  if (!exists(stories_path())) \
  GTEST_SKIP() << stories_path() << " absent (../shared/models)"

constexpr int kTokens = 16;

TEST(StageSplit, GreedyIdsEqualWholeModelOn1To3Stages) {
  SKIP_WITHOUT_STORIES();
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), kTokens);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kTokens));
  // stories260K has 5 blocks: one stage, even-ish and uneven splits.
  const std::vector<std::vector<int>> splits = {{},     {1},    {2},   {4},
                                                {1, 2}, {1, 4}, {3, 4}};
  for (const std::vector<int>& cuts : splits) {
    auto stages = load_split(stories_path(), cuts);
    ASSERT_EQ(stages.size(), cuts.size() + 1);
    EXPECT_EQ(chain_greedy(stages, stories_prompt(), kTokens), expected)
        << "cuts " << ::testing::PrintToString(cuts);
  }
}

TEST(StageSplit, SeveralSequencesInOneMicroBatchMatchAlone) {
  SKIP_WITHOUT_STORIES();
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), 8);
  auto stages = load_split(stories_path(), {2});
  // Three sequences: prompts together in one micro-batch, then decode
  // steps of all three as three one-row slices.
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  for (uint64_t s = 10; s < 13; ++s) {
    *batch.add_slices() = slice(s, 0, stories_prompt());
  }
  std::vector<std::vector<int32_t>> ids(3);
  int pos = static_cast<int>(stories_prompt().size());
  for (int step = 0; step < 8; ++step) {
    auto result = run_chain(stages, batch);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->tokens_size(), 3);
    batch.clear_slices();
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(result->tokens(s).seq_id(), 10u + s);
      ids[s].push_back(result->tokens(s).id());
      *batch.add_slices() = slice(10 + s, pos, {ids[s].back()});
    }
    ++pos;
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(ids[s], expected) << "sequence " << s;
  EXPECT_EQ(stages[0]->live_sequences(), 3);
  const uint64_t free_ids[] = {10, 11, 99};
  EXPECT_EQ(stages[0]->free_sequences(free_ids, 3), 2);
  EXPECT_EQ(stages[0]->live_sequences(), 1);
}

TEST(StageSplit, PromptInChunksEqualsOneSlice) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {3});
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), 4);
  // The prompt in chunks of 2 (no sampling until the last).
  const std::vector<int32_t>& p = stories_prompt();
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  for (size_t i = 0; i < p.size(); i += 2) {
    const size_t n = std::min<size_t>(2, p.size() - i);
    batch.clear_slices();
    *batch.add_slices() =
        slice(5, static_cast<int>(i),
              std::vector<int32_t>(p.begin() + i, p.begin() + i + n),
              i + n == p.size());
    auto result = run_chain(stages, batch);
    ASSERT_TRUE(result.ok()) << result.status();
    if (i + n == p.size()) {
      ASSERT_EQ(result->tokens_size(), 1);
      EXPECT_EQ(result->tokens(0).id(), expected[0]);
    } else {
      EXPECT_EQ(result->tokens_size(), 0);
    }
  }
}

TEST(StageSplit, RestartAtPositionZeroForgetsTheSequence) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  const auto first = chain_greedy(stages, stories_prompt(), 6, 3);
  const auto again = chain_greedy(stages, stories_prompt(), 6, 3);
  EXPECT_EQ(first, again);
}

TEST(StageSampling, LogprobsAreALogSoftmaxAndTopIsSorted) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {});
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  v1::SequenceSlice s = slice(1, 0, stories_prompt());
  s.set_logprobs(true);
  s.set_top_logprobs(5);
  *batch.add_slices() = s;
  auto result = run_chain(stages, batch);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens_size(), 1);
  const v1::SampledToken& t = result->tokens(0);
  ASSERT_EQ(t.top_size(), 5);
  EXPECT_EQ(t.top(0).id(), t.id());  // greedy: the most likely
  EXPECT_FLOAT_EQ(t.top(0).logprob(), t.logprob());
  EXPECT_LE(t.logprob(), 0.0f);
  for (int i = 1; i < 5; ++i)
    EXPECT_LE(t.top(i).logprob(), t.top(i - 1).logprob());
}

// A scored prompt (prompt_logprobs), in chunks of 3 over two stages: each
// token after the first gets the log-probability and top tokens that
// sampling it after the tokens before it gives (a sequence of that prefix,
// the token forced with a bias of +100: log-probabilities are of the raw
// logits), to the bit; the last row of a chunk scores next_token.
TEST(StageSampling, PromptLogprobsAreThoseOfSamplingEachTokenAfterItsPrefix) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  const std::vector<int32_t>& p = stories_prompt();
  ASSERT_GE(p.size(), 5u);
  std::vector<v1::TokenChoice> scored;
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  for (size_t i = 0; i < p.size(); i += 3) {
    const size_t n = std::min<size_t>(3, p.size() - i);
    batch.clear_slices();
    v1::SequenceSlice s = slice(5, static_cast<int>(i),
                                std::vector<int32_t>(p.begin() + i, p.begin() + i + n),
                                i + n == p.size());
    s.set_prompt_logprobs(2);
    if (i + n < p.size()) s.set_next_token(p[i + n]);
    *batch.add_slices() = s;
    auto result = run_chain(stages, batch);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->prompt_logprobs_size(), 1);
    const v1::PromptLogprobs& lp = result->prompt_logprobs(0);
    EXPECT_EQ(lp.seq_id(), 5u);
    EXPECT_EQ(lp.pos(), static_cast<int>(i) + 1);
    EXPECT_EQ(lp.tokens_size(), static_cast<int>(i + n < p.size() ? n : n - 1));
    for (const v1::TokenChoice& t : lp.tokens()) scored.push_back(t);
    EXPECT_EQ(result->tokens_size(), i + n == p.size() ? 1 : 0);
  }
  ASSERT_EQ(scored.size(), p.size() - 1);
  for (size_t k = 1; k < p.size(); ++k) {
    batch.clear_slices();
    v1::SequenceSlice s =
        slice(100 + k, 0, std::vector<int32_t>(p.begin(), p.begin() + k), true);
    s.set_logprobs(true);
    s.set_top_logprobs(2);
    s.mutable_sampling()->add_logit_bias_ids(p[k]);
    s.mutable_sampling()->add_logit_bias_values(100.0f);
    *batch.add_slices() = s;
    auto result = run_chain(stages, batch);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->tokens_size(), 1);
    const v1::SampledToken& t = result->tokens(0);
    const v1::TokenChoice& c = scored[k - 1];
    ASSERT_EQ(t.id(), p[k]);
    EXPECT_EQ(c.id(), p[k]) << k;
    EXPECT_EQ(c.logprob(), t.logprob()) << k;
    ASSERT_EQ(c.top_size(), 2);
    ASSERT_EQ(t.top_size(), 2);
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(c.top(j).id(), t.top(j).id()) << k;
      EXPECT_EQ(c.top(j).logprob(), t.top(j).logprob()) << k;
    }
  }
}

// Bounds of the scoring fields, named; nothing runs.
TEST(StageSampling, PromptLogprobsOutOfRangeAreRefused) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {});
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  v1::SequenceSlice s = slice(1, 0, stories_prompt());
  s.set_prompt_logprobs(21);
  *batch.add_slices() = s;
  auto r = run_chain(stages, batch);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("slices[0].prompt_logprobs: 21 is out of range [0, 20]"),
            std::string::npos)
      << r.status();
  s.set_prompt_logprobs(0);
  s.set_next_token(1 << 20);
  batch.clear_slices();
  *batch.add_slices() = s;
  r = run_chain(stages, batch);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("slices[0].next_token: 1048576 is out of range [0, "),
            std::string::npos)
      << r.status();
  // Scored rows are bounded per micro-batch (their logits are kept whole),
  // on a stage taking 512 rows.
  const int n_layer = model_layers(stories_path());
  auto wide = worker::load_stage(
      shard_request(stories_path(), 0, n_layer, n_layer, /*n_ctx=*/512, 8, /*max_batch_rows=*/512),
      1, worker::StageOptions{});
  ASSERT_TRUE(wide.ok()) << wide.status();
  std::vector<std::unique_ptr<worker::Stage>> one;
  one.push_back(std::move(*wide));
  batch.clear_slices();
  std::vector<int32_t> many;
  while (many.size() < 300) many.insert(many.end(), stories_prompt().begin(), stories_prompt().end());
  many.resize(300);
  v1::SequenceSlice big = slice(2, 0, many);
  big.set_prompt_logprobs(0);
  *batch.add_slices() = big;
  r = run_chain(one, batch);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("300 rows of scored slices (prompt_logprobs) exceed 256"),
            std::string::npos)
      << r.status();
}

TEST(StageSampling, SeededSamplingRepeatsAndNeedsASeed) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  v1::SequenceSlice s = slice(1, 0, stories_prompt());
  s.mutable_sampling()->set_temperature(0.8f);
  *batch.add_slices() = s;
  auto missing = run_chain(stages, batch);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("slices[0].sampling.seed"),
            std::string::npos)
      << missing.status();
  batch.mutable_slices(0)->mutable_sampling()->set_seed(42);
  batch.mutable_slices(0)->mutable_sampling()->set_top_k(40);
  auto a = run_chain(stages, batch);
  auto b = run_chain(stages, batch);  // start_pos 0 again: a fresh sampler
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens(0).id(), b->tokens(0).id());
}

// A stage over stories260K's plan whose backend is a recording fake.
std::unique_ptr<worker::Stage> fake_stage(worker::FakeBackend** backend) {
  const int n_layer = model_layers(stories_path());
  auto plan = worker::plan_shard(shard_request(stories_path(), 0, n_layer, n_layer));
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return nullptr;
  worker::FakeBackendOptions o;
  o.n_layer = n_layer;
  o.n_embd = plan->hp.n_embd;
  o.n_vocab = plan->info.n_vocab();
  o.range = {0, n_layer};
  o.max_batch = plan->info.max_batch_rows();
  o.record_calls = true;
  auto fake = std::make_unique<worker::FakeBackend>(o);
  *backend = fake.get();
  return worker::make_stage(*std::move(plan), std::move(fake), {});
}

// A greedy slice without penalties, grammar or log-probabilities asks the
// backend for its pick only (Logits::kArgmax: a cuda backend picks it on
// the device) and gets the token the logits path gives; a sampled slice of
// top_k 40 asks for its 40 candidates (kTopK) and draws the token a twin
// slice drawing from its logits row draws, step after step; penalised,
// logprob and top_k-less sampled slices ask for logits, a slice that does
// not sample for none.
TEST(StageSampling, SlicesAskTheBackendForWhatTheirSamplerReads) {
  SKIP_WITHOUT_STORIES();
  worker::FakeBackend* fake = nullptr;
  auto stage = fake_stage(&fake);
  ASSERT_NE(stage, nullptr);
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() = slice(1, 0, stories_prompt());                 // greedy
  v1::SequenceSlice logprobs = slice(2, 0, stories_prompt());
  logprobs.set_logprobs(true);
  *batch.add_slices() = logprobs;
  v1::SequenceSlice sampled = slice(3, 0, stories_prompt());
  sampled.mutable_sampling()->set_temperature(0.8f);
  sampled.mutable_sampling()->set_seed(7);
  *batch.add_slices() = sampled;
  v1::SequenceSlice penalised = slice(4, 0, stories_prompt());
  penalised.mutable_sampling()->set_repeat_penalty(1.1f);
  *batch.add_slices() = penalised;
  *batch.add_slices() = slice(5, 0, stories_prompt(), /*sample=*/false);
  v1::SequenceSlice top_k = slice(6, 0, stories_prompt());
  top_k.mutable_sampling()->set_temperature(1.5f);
  top_k.mutable_sampling()->set_seed(11);
  top_k.mutable_sampling()->set_top_k(40);
  top_k.mutable_sampling()->set_top_p(0.95f);
  *batch.add_slices() = top_k;
  v1::SequenceSlice twin = top_k;  // log-probabilities need the row
  twin.set_seq_id(7);
  twin.set_logprobs(true);
  *batch.add_slices() = twin;
  v1::MicroBatchResult result;
  ASSERT_TRUE(stage->run(batch, nullptr, &result).ok());
  ASSERT_EQ(fake->calls().size(), 1u);
  const std::vector<worker::ForwardSlice>& call = fake->calls()[0];
  ASSERT_EQ(call.size(), 7u);
  EXPECT_EQ(call[0].logits, worker::Logits::kArgmax);
  EXPECT_EQ(call[1].logits, worker::Logits::kLast);
  EXPECT_EQ(call[2].logits, worker::Logits::kLast);
  EXPECT_EQ(call[3].logits, worker::Logits::kLast);
  EXPECT_EQ(call[4].logits, worker::Logits::kNone);
  EXPECT_EQ(call[5].logits, worker::Logits::kTopK);
  EXPECT_EQ(call[5].top_k, 40);
  EXPECT_EQ(call[6].logits, worker::Logits::kLast);
  ASSERT_EQ(result.tokens_size(), 6);
  // Sequences 1 and 2 ran the same prompt: the fake's same logits, so the
  // pick equals the greedy sampler's token from the downloaded logits.
  EXPECT_EQ(result.tokens(0).id(), result.tokens(1).id());
  EXPECT_GE(result.tokens(0).id(), 0);
  // The next decode steps: the greedy sequence asks for its pick again;
  // the top-k one for its candidates, drawing its twin's tokens.
  int32_t greedy = result.tokens(0).id(), drawn = result.tokens(4).id();
  EXPECT_EQ(drawn, result.tokens(5).id());
  std::vector<int32_t> draws = {drawn};
  int pos = static_cast<int>(stories_prompt().size());
  for (int step = 0; step < 8; ++step, ++pos) {
    v1::MicroBatch next;
    next.set_shard_id(kShardId);
    *next.add_slices() = slice(1, pos, {greedy});
    v1::SequenceSlice a = slice(6, pos, {drawn});
    *next.add_slices() = a;
    v1::SequenceSlice b = slice(7, pos, {drawn});
    b.set_logprobs(true);
    *next.add_slices() = b;
    v1::MicroBatchResult r;
    ASSERT_TRUE(stage->run(next, nullptr, &r).ok());
    const std::vector<worker::ForwardSlice>& c = fake->calls().back();
    EXPECT_EQ(c[0].logits, worker::Logits::kArgmax);
    EXPECT_EQ(c[1].logits, worker::Logits::kTopK);
    EXPECT_EQ(c[2].logits, worker::Logits::kLast);
    ASSERT_EQ(r.tokens_size(), 3);
    EXPECT_EQ(r.tokens(1).id(), r.tokens(2).id()) << "step " << step;
    greedy = r.tokens(0).id();
    drawn = r.tokens(1).id();
    draws.push_back(drawn);
  }
  // The draws are draws: not one token over and over.
  std::sort(draws.begin(), draws.end());
  EXPECT_GT(std::unique(draws.begin(), draws.end()) - draws.begin(), 2);
}

TEST(StageTrace, SplitHashesEqualWholeModelHashes) {
  SKIP_WITHOUT_STORIES();
  auto whole = load_split(stories_path(), {}, /*trace=*/true);
  auto split = load_split(stories_path(), {2, 3}, /*trace=*/true);
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  batch.set_trace(true);
  *batch.add_slices() = slice(1, 0, stories_prompt());
  auto a = run_chain(whole, batch);
  ASSERT_TRUE(a.ok()) << a.status();
  // The split's traces: each stage's, collected by hand (a relay merges
  // them in pipeline order).
  std::vector<v1::BlockTrace> traces;
  v1::MicroBatch b = batch;
  for (size_t i = 0; i < split.size(); ++i) {
    v1::MicroBatch next;
    v1::MicroBatchResult r;
    ASSERT_TRUE(split[i]->run(b, &next, &r).ok());
    traces.insert(traces.end(), r.traces().begin(), r.traces().end());
    b = next;
  }
  const int rows = static_cast<int>(stories_prompt().size());
  ASSERT_EQ(a->traces_size(), 5 * rows);
  ASSERT_EQ(traces.size(), static_cast<size_t>(5 * rows));
  for (int i = 0; i < a->traces_size(); ++i) {
    EXPECT_EQ(a->traces(i).block(), traces[i].block());
    EXPECT_EQ(a->traces(i).pos(), traces[i].pos());
    EXPECT_EQ(a->traces(i).hash(), traces[i].hash()) << "trace " << i;
  }
  EXPECT_EQ(traces.front().worker(), "s0");
  EXPECT_EQ(traces.back().worker(), "s2");
  // Without the flag, no traces.
  batch.set_trace(false);
  auto c = run_chain(whole, batch);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->traces_size(), 0);
}

// --- Checks ------------------------------------------------------------

class StageChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(stories_path())) {
      GTEST_SKIP() << stories_path() << " absent (../shared/models)";
    }
    const int n = model_layers(stories_path());
    // A middle-to-last stage (takes hidden rows) and a first stage.
    v1::LoadShardRequest first = shard_request(stories_path(), 0, 2, n,
                                               /*n_ctx=*/32, 2, 16);
    v1::LoadShardRequest last =
        shard_request(stories_path(), 2, n, n, 32, 2, 16);
    auto a = worker::load_stage(first, 1, {"first"});
    auto b = worker::load_stage(last, 1, {"last"});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    first_ = std::move(*a);
    last_ = std::move(*b);
    // Sequence 1 lives with 5 positions on both.
    v1::MicroBatch batch = first_batch({slice(1, 0, stories_prompt())});
    v1::MicroBatch next;
    v1::MicroBatchResult r;
    ASSERT_TRUE(first_->run(batch, &next, &r).ok());
    ASSERT_TRUE(last_->run(next, &next_unused_, &r).ok());
  }

  static v1::MicroBatch first_batch(std::vector<v1::SequenceSlice> slices) {
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    b.set_batch_id(9);
    for (auto& s : slices) *b.add_slices() = s;
    return b;
  }
  // A micro-batch for the last stage with `rows` rows of hidden state.
  static v1::MicroBatch last_batch(std::vector<v1::SequenceSlice> slices,
                                   size_t rows) {
    v1::MicroBatch b = first_batch(std::move(slices));
    std::vector<float> h(rows * 64, 0.01f);
    b.set_hidden(std::string(reinterpret_cast<const char*>(h.data()),
                             h.size() * sizeof(float)));
    return b;
  }

  // `batch` fails on `stage` with `code` and a message that contains
  // `field`; the stage is unchanged: sequence 1 still continues at 5.
  void expect_rejected(worker::Stage& stage, const v1::MicroBatch& batch,
                       absl::StatusCode code, const std::string& field) {
    v1::MicroBatch next;
    v1::MicroBatchResult r;
    const int live = stage.live_sequences();
    absl::Status st = stage.run(batch, &next, &r);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(field), std::string::npos)
        << "expected \"" << field << "\" in: " << st.message();
    EXPECT_EQ(stage.live_sequences(), live);
    // Still works: sequence 1 continues at position 5.
    v1::MicroBatch ok = &stage == first_.get()
                            ? first_batch({slice(1, 5, {42}, false)})
                            : last_batch({slice(1, 5, {42}, false)}, 1);
    ASSERT_TRUE(stage.run(ok, &next, &r).ok());
    // Undo that step for the next check (restart sequence 1 at 5 positions).
    v1::MicroBatch restart =
        &stage == first_.get() ? first_batch({slice(1, 0, stories_prompt())})
                               : last_batch({slice(1, 0, stories_prompt())}, 5);
    ASSERT_TRUE(stage.run(restart, &next, &r).ok());
  }

  std::unique_ptr<worker::Stage> first_;
  std::unique_ptr<worker::Stage> last_;
  v1::MicroBatch next_unused_;
};

TEST_F(StageChecks, WrongShardId) {
  v1::MicroBatch b = first_batch({slice(2, 0, {1})});
  b.set_shard_id(5);
  expect_rejected(*first_, b, absl::StatusCode::kInvalidArgument,
                  "shard_id: 5");
}

TEST_F(StageChecks, NoSlicesOrTooMany) {
  expect_rejected(*first_, first_batch({}), absl::StatusCode::kInvalidArgument,
                  "slices: none");
  expect_rejected(
      *first_,
      first_batch({slice(2, 0, {1}), slice(3, 0, {1}), slice(4, 0, {1})}),
      absl::StatusCode::kInvalidArgument, "slices: 3 exceed max_sequences 2");
}

TEST_F(StageChecks, DuplicateSequenceIds) {
  expect_rejected(*first_, first_batch({slice(2, 0, {1}), slice(2, 0, {1})}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[1].seq_id: 2 repeats slices[0]");
}

TEST_F(StageChecks, RowCounts) {
  expect_rejected(*first_, first_batch({slice(2, 0, {})}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].tokens: empty");
  expect_rejected(*first_,
                  first_batch({slice(2, 0, std::vector<int32_t>(17, 1))}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].tokens: 17 rows exceed max_batch_rows 16");
  expect_rejected(*first_,
                  first_batch({slice(1, 5, std::vector<int32_t>(9, 1)),
                               slice(2, 0, std::vector<int32_t>(9, 1))}),
                  absl::StatusCode::kInvalidArgument,
                  "slices: 18 rows in all exceed max_batch_rows 16");
}

TEST_F(StageChecks, BadTokenIds) {
  expect_rejected(*first_, first_batch({slice(2, 0, {1, 512})}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].tokens[1]: id 512 is outside the vocabulary");
  expect_rejected(*last_, last_batch({slice(1, 5, {-3})}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].tokens[0]: id -3");
}

TEST_F(StageChecks, Positions) {
  expect_rejected(*first_, first_batch({slice(99, 4, {1})}),
                  absl::StatusCode::kNotFound, "slices[0].seq_id: sequence 99");
  expect_rejected(*first_, first_batch({slice(1, 7, {1})}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].start_pos: 7 is not where sequence 1 ends here");
  // The message names the slice's own numbers, never the sequence's length
  // (5): seq_id is the caller's claim and may be another client's.
  {
    v1::MicroBatch next;
    v1::MicroBatchResult r;
    const absl::Status st = first_->run(first_batch({slice(1, 7, {1})}), &next, &r);
    EXPECT_EQ(st.message().find('5'), std::string::npos) << st;
  }
  expect_rejected(*first_, first_batch({slice(1, -1, {1})}),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].start_pos: -1 is negative");
}

TEST_F(StageChecks, GeneratedFrom) {
  // Migration's replay mark: only on the slice that starts a sequence, and
  // within the context (n_ctx 32 here).
  v1::MicroBatch b = last_batch({slice(1, 5, {42})}, 1);
  b.mutable_slices(0)->set_generated_from(3);
  expect_rejected(*last_, b, absl::StatusCode::kInvalidArgument,
                  "slices[0].generated_from: 3 on a slice that does not start its sequence");
  v1::MicroBatch far = last_batch({slice(2, 0, {1, 2})}, 2);
  far.mutable_slices(0)->set_generated_from(33);
  expect_rejected(*last_, far, absl::StatusCode::kInvalidArgument,
                  "slices[0].generated_from: 33 is out of range [1, n_ctx 32]");
  far.mutable_slices(0)->set_generated_from(-1);
  expect_rejected(*last_, far, absl::StatusCode::kInvalidArgument,
                  "slices[0].generated_from: -1");
}

TEST_F(StageChecks, BeyondTheContext) {
  // Fill sequence 1 to 29 positions, then 4 more rows pass n_ctx 32.
  v1::MicroBatch next;
  v1::MicroBatchResult r;
  ASSERT_TRUE(
      first_
          ->run(first_batch({slice(1, 5, std::vector<int32_t>(16, 7), false)}),
                &next, &r)
          .ok());
  ASSERT_TRUE(
      first_
          ->run(first_batch({slice(1, 21, std::vector<int32_t>(8, 7), false)}),
                &next, &r)
          .ok());
  v1::MicroBatch b = first_batch({slice(1, 29, {1, 2, 3, 4})});
  absl::Status st = first_->run(b, &next, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  EXPECT_NE(
      st.message().find("slices[0]: start_pos 29 + 4 rows exceed n_ctx 32"),
      std::string::npos)
      << st;
  // Huge declared position: no overflow, still the right error.
  b = first_batch({slice(1, std::numeric_limits<int32_t>::max(), {1})});
  st = first_->run(b, &next, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(
      first_->run(first_batch({slice(1, 29, {1, 2, 3})}), &next, &r).ok());
}

TEST_F(StageChecks, HiddenSize) {
  // Wrong row count: 2 rows of hidden for 1 token.
  expect_rejected(*last_, last_batch({slice(1, 5, {42})}, 2),
                  absl::StatusCode::kInvalidArgument,
                  "hidden: 512 bytes, expected 256 (1 rows x n_embd 64");
  // Truncated payload.
  v1::MicroBatch b = last_batch({slice(1, 5, {42})}, 1);
  b.mutable_hidden()->resize(b.hidden().size() - 3);
  expect_rejected(*last_, b, absl::StatusCode::kInvalidArgument,
                  "hidden: 253 bytes");
  // Hidden on the first stage.
  expect_rejected(*first_, last_batch({slice(2, 0, {42})}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "hidden: 256 bytes on the first stage");
  // Missing on a later stage.
  expect_rejected(*last_, first_batch({slice(1, 5, {42})}),
                  absl::StatusCode::kInvalidArgument, "hidden: 0 bytes");
  // Not finite.
  b = last_batch({slice(1, 5, {42})}, 1);
  const float nan = std::nanf("");
  std::memcpy(b.mutable_hidden()->data() + 4 * 10, &nan, 4);
  expect_rejected(*last_, b, absl::StatusCode::kInvalidArgument,
                  "hidden: row 0 column 10 is not finite");
}

TEST_F(StageChecks, SamplingAndLogprobs) {
  v1::SequenceSlice s = slice(2, 0, {1});
  s.mutable_sampling()->set_top_p(0.0f);
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].sampling.top_p: 0 is out of range (0, 1]");
  s = slice(2, 0, {1});
  s.mutable_sampling()->set_repeat_last_n(5000);
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].sampling.repeat_last_n: 5000 is out of range [0, 4096]");
  s = slice(2, 0, {1});
  s.mutable_sampling()->add_logit_bias_ids(1 << 20);
  s.mutable_sampling()->add_logit_bias_values(-100.0f);
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].sampling.logit_bias: token id 1048576 is out of range [0, ");
  s = slice(2, 0, {1});
  s.mutable_sampling()->set_top_k(100000000);  // printed as an integer, not 1e+08
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].sampling.top_k: 100000000 is out of range");
  s = slice(2, 0, {1});
  s.mutable_sampling()->set_temperature(std::numeric_limits<float>::infinity());
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].sampling.temperature");
  s = slice(2, 0, {1});
  s.set_top_logprobs(21);
  expect_rejected(*last_, last_batch({s}, 1),
                  absl::StatusCode::kInvalidArgument,
                  "slices[0].top_logprobs: 21 is out of range [0, 20]");
}

TEST_F(StageChecks, FullSlotsRefuseNewSequencesAndKeepLiveOnes) {
  // max_sequences 2: sequence 2 takes the last slot.
  v1::MicroBatch next;
  v1::MicroBatchResult r;
  ASSERT_TRUE(first_->run(first_batch({slice(2, 0, {3, 4})}), &next, &r).ok());
  ASSERT_EQ(first_->live_sequences(), 2);
  // A micro-batch with a new sequence is refused as a whole, even beside a
  // live one's decode step, and nothing of it stays.
  absl::Status st =
      first_->run(first_batch({slice(1, 5, {42}, false), slice(3, 0, {1})}), &next, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(st.message(), "slices: 1 new sequences with 2 live exceed max_sequences 2");
  EXPECT_EQ(first_->live_sequences(), 2);
  st = first_->run(first_batch({slice(3, 1, {1})}), &next, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  // The live ones go on where they were.
  st = first_->run(first_batch({slice(1, 5, {42}, false), slice(2, 2, {5}, false)}), &next, &r);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(first_->live_sequences(), 2);
}

TEST_F(StageChecks, TooManySequences) {
  // max_sequences 2; sequence 1 lives; two new ones is one too many.
  expect_rejected(*first_, first_batch({slice(2, 0, {1}), slice(3, 0, {1})}),
                  absl::StatusCode::kResourceExhausted,
                  "2 new sequences with 1 live exceed max_sequences 2");
}

// --- In-process chain --------------------------------------------------

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::MicroBatchResult> results;

  worker::ActivationLink::ResultCallback callback() {
    return [this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(r));
      cv.notify_all();
    };
  }
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30),
                       [&] { return results.size() >= n; });
  }
};

TEST(InProcessChain, PipelinedMicroBatchesComeBackInOrder) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {1, 3});
  std::vector<worker::Stage*> raw;
  for (auto& s : stages) raw.push_back(s.get());
  Collector c;
  auto link = worker::make_in_process_chain(raw, c.callback());
  EXPECT_TRUE(link->healthy());
  // Eight sequences' prompts as eight micro-batches in flight at once, and
  // a bad one in the middle.
  for (uint64_t i = 0; i < 8; ++i) {
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    b.set_batch_id(100 + i);
    *b.add_slices() = slice(i, 0, stories_prompt());
    if (i == 4) b.mutable_slices(0)->set_start_pos(3);  // unknown sequence
    ASSERT_TRUE(link->send(std::move(b)).ok());
  }
  ASSERT_TRUE(c.wait_for(8));
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), 1);
  for (int i = 0; i < 8; ++i) {
    const v1::MicroBatchResult& r = c.results[i];
    EXPECT_EQ(r.batch_id(), 100u + i);
    if (i == 4) {
      EXPECT_EQ(r.error_code(), static_cast<int>(absl::StatusCode::kNotFound));
      EXPECT_NE(r.error_message().find("stage 0: slices[0].seq_id"),
                std::string::npos)
          << r.error_message();
      continue;
    }
    ASSERT_EQ(r.error_code(), 0) << r.error_message();
    ASSERT_EQ(r.tokens_size(), 1);
    EXPECT_EQ(r.tokens(0).id(), expected[0]);
  }
  link->close(worker::kLinkClosed);
  EXPECT_FALSE(link->healthy());
  EXPECT_EQ(link->send(v1::MicroBatch()).code(),
            absl::StatusCode::kUnavailable);
}

TEST(InProcessChain, ErrorsOfLaterStagesNameThem) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  std::vector<worker::Stage*> raw = {stages[0].get(), stages[1].get()};
  Collector c;
  auto link = worker::make_in_process_chain(raw, c.callback());
  // Sequence 1 exists on stage 1 only: stage 0 accepts, stage 1 rejects.
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  *b.add_slices() = slice(1, 0, stories_prompt());
  v1::MicroBatch next;
  v1::MicroBatchResult r;
  ASSERT_TRUE(stages[0]->run(b, &next, &r).ok());  // 5 positions on stage 0
  b.clear_slices();
  *b.add_slices() = slice(1, 5, {3});
  ASSERT_TRUE(link->send(b).ok());
  ASSERT_TRUE(c.wait_for(1));
  EXPECT_EQ(c.results[0].error_code(),
            static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(c.results[0].error_message().find("stage 1: "), std::string::npos)
      << c.results[0].error_message();
}

}  // namespace
}  // namespace strata::worker_test

namespace strata::worker_test {
namespace {

// A worker configured with `backend: cuda` loads its shard through
// make_cuda_backend, which says why it cannot run on a machine without a
// GPU (a build without CUDA, no device): no Stage is made.
TEST(StageLoad, CudaBackendFailsSayingWhy) {
  SKIP_WITHOUT_STORIES();
  if (worker::list_cuda_devices().ok()) GTEST_SKIP() << "this machine has a CUDA device";
  const int n_layer = model_layers(stories_path());
  auto plan = worker::plan_shard(shard_request(stories_path(), 0, n_layer, n_layer, 256, 8));
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto stage = worker::load_planned_stage(std::move(*plan), 1, worker::StageOptions{}, "cuda:0");
  ASSERT_FALSE(stage.ok());
  const std::string msg(stage.status().message());
  EXPECT_TRUE(msg.find("strata was built without CUDA") == 0 ||
              msg.find("cuda:0: no CUDA device: ") == 0)
      << stage.status();
}

}  // namespace
}  // namespace strata::worker_test
