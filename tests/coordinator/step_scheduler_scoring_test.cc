// Scored prompts (SequenceRequest.prompt_logprobs) in the scheduler's
// core: their chunks, the prefix cache, and the scores taken position by
// position.
#include <memory>
#include <optional>
#include <vector>

#include "coordinator/step_scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/step_scheduler_test_util.h"

namespace strata::coordinator {
namespace {

using namespace step_test;  // NOLINT: the tests' own helpers

// A scored prompt (prompt_logprobs) goes in chunks of kScoredChunkRows,
// each asking the last stage to score it with the token after it; it
// restores nothing from the prefix cache, which holds its blocks (restored
// rows have no logits); the scores come back position by position, each taken once,
// and ride on the first event after the first token.
TEST(StepSchedulerPrefix, AScoredPromptIsSentInShortChunksAndScoredOnce) {
  Core c(cached(64, /*prefill_chunk=*/512));
  const std::vector<int32_t> prompt = seq_tokens(1000, 80);
  run_one(c, 1, prompt);  // its blocks are in the cache now
  auto h = std::make_shared<SequenceHandle>(2);
  SequenceRequest r;
  r.prompt = prompt;
  r.params.max_tokens = 2;
  r.prompt_logprobs = 1;
  c.s.add(h, std::move(r));
  // The last stage's answers: position p scored with logprob -p / 1000.
  // The sampling chunk's answer also scores positions 1..10 again, 0.5
  // higher (as a re-sent chunk would): taken once, those are ignored.
  auto answer = [&](const v1::MicroBatch& b, int first_pos, int n, bool sample) {
    v1::MicroBatchResult res;
    res.set_batch_id(b.batch_id());
    auto score = [&](int from, int count, float shift) {
      v1::PromptLogprobs* lp = res.add_prompt_logprobs();
      lp->set_seq_id(2);
      lp->set_pos(from);
      for (int p = from; p < from + count && p < static_cast<int>(prompt.size()); ++p) {
        v1::TokenChoice* t = lp->add_tokens();
        t->set_id(prompt[static_cast<size_t>(p)]);
        t->set_logprob(-p / 1000.0f + shift);
      }
    };
    score(first_pos, n, 0.0f);
    if (sample) score(1, 10, 0.5f);
    if (sample) {
      v1::SampledToken* t = res.add_tokens();
      t->set_seq_id(2);
      t->set_id(7);
    }
    return c.s.update_from_output(std::move(res));
  };
  std::vector<v1::SequenceSlice> chunks;
  while (std::optional<v1::MicroBatch> b = c.s.schedule()) {
    ASSERT_EQ(b->slices_size(), 1);
    const v1::SequenceSlice& s = b->slices(0);
    chunks.push_back(s);
    EXPECT_TRUE(events(*h).empty());
    ASSERT_TRUE(answer(*b, s.start_pos() + 1, s.tokens_size(), s.sample()).ok());
    if (s.sample()) break;
  }
  ASSERT_EQ(chunks.size(), 3u);  // 32 + 32 + 16 rows
  for (size_t k = 0; k < chunks.size(); ++k) {
    const v1::SequenceSlice& s = chunks[k];
    EXPECT_EQ(s.start_pos(), static_cast<int>(32 * k));
    EXPECT_EQ(s.tokens_size(), k < 2 ? 32 : 16);
    EXPECT_EQ(restored(s).size(), 0u);
    EXPECT_TRUE(s.has_prompt_logprobs());
    EXPECT_EQ(s.prompt_logprobs(), 1);
    if (k < 2) {
      EXPECT_EQ(s.next_token(), prompt[32 * (k + 1)]);
    } else {
      EXPECT_FALSE(s.has_next_token());
    }
  }
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, SequenceEvent::Kind::kDelta);
  EXPECT_TRUE(e[0].scored);
  ASSERT_EQ(e[0].prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i < e[0].prompt_logprobs.size(); ++i) {
    EXPECT_EQ(e[0].prompt_logprobs[i].id(), prompt[i + 1]);
    EXPECT_FLOAT_EQ(e[0].prompt_logprobs[i].logprob(), -static_cast<float>(i + 1) / 1000.0f);
  }
  // The next step's event carries none.
  v1::MicroBatch decode = c.schedule();
  ASSERT_TRUE(c.answer(decode, {8}).ok());
  e = events(*h);
  ASSERT_FALSE(e.empty());
  EXPECT_FALSE(e[0].scored);
  EXPECT_TRUE(e[0].prompt_logprobs.empty());
}

// Scored chunks of several prompts share kScoredChunkRows rows a
// micro-batch (the last stage holds logits for every one of their rows);
// an unscored prompt beside them takes its whole chunk.
TEST(StepSchedulerPrefix, ScoredRowsAreBoundedPerMicroBatch) {
  Core c(options(/*max_sequences=*/8, /*prefill_chunk=*/512, 0, /*max_in_flight=*/1));
  for (uint64_t id = 1; id <= 3; ++id) {
    auto h = std::make_shared<SequenceHandle>(id);
    SequenceRequest r;
    r.prompt = seq_tokens(static_cast<int>(100 * id), 20);
    r.params.max_tokens = 1;
    r.prompt_logprobs = 0;
    c.s.add(h, std::move(r));
  }
  c.add(4, seq_tokens(900, 100));
  v1::MicroBatch b = c.schedule();
  int scored = 0, plain = 0;
  for (const v1::SequenceSlice& s : b.slices()) {
    (s.has_prompt_logprobs() ? scored : plain) += s.tokens_size();
  }
  EXPECT_EQ(scored, kScoredChunkRows);  // 20 + 12 of the 60
  EXPECT_EQ(plain, 100);
}

// A position the last stage never scored fails the request, naming how
// many came back, rather than answer with a hole.
TEST(StepSchedulerPrefix, AScoredPromptMissingAPositionFails) {
  Core c(options(4, 512, 0, 1));
  auto h = std::make_shared<SequenceHandle>(1);
  SequenceRequest r;
  r.prompt = seq_tokens(10, 5);
  r.params.max_tokens = 1;
  r.prompt_logprobs = 0;
  c.s.add(h, std::move(r));
  v1::MicroBatch b = c.schedule();
  ASSERT_TRUE(c.answer(b, {3}).ok());  // tokens, no PromptLogprobs
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, SequenceEvent::Kind::kError);
  EXPECT_EQ(e[0].error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(e[0].error.message().find("scored 0 of the prompt's 4 positions"), std::string::npos)
      << e[0].error;
}
}  // namespace
}  // namespace strata::coordinator
