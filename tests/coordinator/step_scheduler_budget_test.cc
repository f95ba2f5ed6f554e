// The scheduler's core (step_scheduler.h) while sequences decode: prompt
// chunks beside decode steps stay within prefill_chunk_beside_decode rows,
// oldest prompt first, and a whole-chunk budget cuts prompts where they
// always are. Driven step by step as in step_scheduler_test.cc.
#include <cstdint>
#include <vector>

#include "coordinator/step_scheduler.h"
#include "gtest/gtest.h"
#include "tests/coordinator/step_scheduler_test_util.h"

namespace strata::coordinator {
namespace {

using namespace step_test;  // NOLINT: the tests' own helpers

// While a sequence decodes, the prompt chunks of a micro-batch hold at most
// prefill_chunk_beside_decode rows in all (oldest prompt first, the next
// taking what is left); with nothing decoding, prompts go prefill_chunk
// rows at a time again.
TEST(StepSchedulerBudget, PromptRowsBesideDecodesStayWithinTheirBudget) {
  SchedulerOptions o = options(/*max_sequences=*/4, /*prefill_chunk=*/16,
                               /*max_batch_rows=*/0, /*max_in_flight=*/1);
  o.prefill_chunk_beside_decode = 5;
  Core c(o);
  // Nothing decodes yet: sequence 1's one-row prompt and a whole 16-row
  // chunk of sequence 2's 40.
  auto h1 = c.add(1, {11}, /*max_tokens=*/4);
  auto h2 = c.add(2, seq_tokens(100, 40));
  v1::MicroBatch b1 = c.schedule();
  ASSERT_EQ(b1.slices_size(), 2);
  EXPECT_EQ(b1.slices(1).seq_id(), 2u);
  EXPECT_EQ(b1.slices(1).tokens_size(), 16);
  ASSERT_TRUE(c.answer(b1, {21}).ok());
  // Sequence 1 decodes: 5 prompt rows a micro-batch, a new prompt taking
  // what the older one leaves.
  auto h3 = c.add(3, seq_tokens(200, 4));
  v1::MicroBatch b2 = c.schedule();
  ASSERT_EQ(b2.slices_size(), 2);
  EXPECT_EQ(b2.slices(0).seq_id(), 1u);
  EXPECT_EQ(b2.slices(0).tokens_size(), 1);
  EXPECT_EQ(b2.slices(1).seq_id(), 2u);
  EXPECT_EQ(b2.slices(1).start_pos(), 16);
  EXPECT_EQ(tokens(b2.slices(1)), seq_tokens(116, 5));
  EXPECT_FALSE(b2.slices(1).sample());
  ASSERT_TRUE(c.answer(b2, {22}).ok());
  int sent2 = 21;
  for (int k = 0; k < 2; ++k) {  // positions 21 .. 30 of sequence 2
    v1::MicroBatch b = c.schedule();
    ASSERT_EQ(b.slices_size(), 2) << k;
    EXPECT_EQ(b.slices(1).seq_id(), 2u);
    EXPECT_EQ(b.slices(1).start_pos(), sent2);
    EXPECT_EQ(b.slices(1).tokens_size(), 5);
    sent2 += 5;
    // Sequence 1's 4th token ends it after the second of these.
    ASSERT_TRUE(c.answer(b, {23 + k}).ok()) << k;
    if (k == 1) {
      EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({1}));
    }
  }
  EXPECT_EQ(events(*h1).back().kind, SequenceEvent::Kind::kDone);
  // Sequence 1 is done, nothing decodes: sequence 2's last 9 rows (and its
  // token) and sequence 3's whole prompt go together.
  v1::MicroBatch b6 = c.schedule();
  ASSERT_EQ(b6.slices_size(), 2);
  EXPECT_EQ(b6.slices(0).seq_id(), 2u);
  EXPECT_EQ(b6.slices(0).start_pos(), sent2);
  EXPECT_EQ(tokens(b6.slices(0)), seq_tokens(100 + sent2, 40 - sent2));
  EXPECT_TRUE(b6.slices(0).sample());
  EXPECT_EQ(b6.slices(1).seq_id(), 3u);
  EXPECT_EQ(tokens(b6.slices(1)), seq_tokens(200, 4));
  ASSERT_TRUE(c.answer(b6, {40, 41}).ok());
  // Both decode now; a third prompt gets 5 rows beside them.
  c.add(4, seq_tokens(300, 12));
  v1::MicroBatch b7 = c.schedule();
  ASSERT_EQ(b7.slices_size(), 3);
  EXPECT_EQ(b7.slices(2).seq_id(), 4u);
  EXPECT_EQ(b7.slices(2).tokens_size(), 5);
  EXPECT_EQ(rows(b7), 7);
  EXPECT_EQ(events(*h2).front().ids, std::vector<int32_t>({40}));
  EXPECT_EQ(events(*h3).front().ids, std::vector<int32_t>({41}));
}

// Prompts go oldest first, in the order they were added, whatever their
// sequence ids (random in a Scheduler): the first takes the budget beside
// the decodes, the next what it leaves.
TEST(StepSchedulerBudget, PromptChunksGoInTheOrderTheRequestsCame) {
  SchedulerOptions o = options(4, /*prefill_chunk=*/16, 0, 1);
  o.prefill_chunk_beside_decode = 6;
  Core c(o);
  c.add(50, {11});
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(c.answer(b1, {21}).ok());
  c.add(9, seq_tokens(100, 4));
  c.add(3, seq_tokens(200, 30));
  c.add(7, seq_tokens(300, 30));
  v1::MicroBatch b2 = c.schedule();
  ASSERT_EQ(b2.slices_size(), 3);
  EXPECT_EQ(b2.slices(0).seq_id(), 50u);  // the decode
  EXPECT_EQ(b2.slices(1).seq_id(), 9u);
  EXPECT_EQ(b2.slices(1).tokens_size(), 4);
  EXPECT_EQ(b2.slices(2).seq_id(), 3u);
  EXPECT_EQ(b2.slices(2).tokens_size(), 2);
  ASSERT_TRUE(c.answer(b2, {22, 23}).ok());
  v1::MicroBatch b3 = c.schedule();  // 50 and 9 decode; 3 goes on, 7 waits
  ASSERT_EQ(b3.slices_size(), 3);
  EXPECT_EQ(b3.slices(2).seq_id(), 3u);
  EXPECT_EQ(b3.slices(2).start_pos(), 2);
  EXPECT_EQ(b3.slices(2).tokens_size(), 6);
}

// With a budget of the whole chunk a prompt that does not fit beside an
// older one's chunk waits whole, as without a budget: every prompt is cut
// at multiples of the chunk whatever the load.
TEST(StepSchedulerBudget, AWholeChunkBudgetCutsPromptsWhereTheyAlwaysAre) {
  SchedulerOptions o = options(4, /*prefill_chunk=*/16, 0, 1);
  o.prefill_chunk_beside_decode = 0;
  Core c(o);
  c.add(1, {11});
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(c.answer(b1, {21}).ok());
  c.add(2, seq_tokens(100, 10));
  c.add(3, seq_tokens(200, 30));
  v1::MicroBatch b2 = c.schedule();  // 1 + 10 rows; 3's 16 would make 27 > 20
  ASSERT_EQ(b2.slices_size(), 2);
  EXPECT_EQ(b2.slices(1).seq_id(), 2u);
  ASSERT_TRUE(c.answer(b2, {22, 23}).ok());
  v1::MicroBatch b3 = c.schedule();
  ASSERT_EQ(b3.slices_size(), 3);
  EXPECT_EQ(b3.slices(2).seq_id(), 3u);
  EXPECT_EQ(b3.slices(2).start_pos(), 0);
  EXPECT_EQ(b3.slices(2).tokens_size(), 16);
}

// A micro-batch with no decode row is still held to the budget while a
// sequence decodes in another one (its token is in flight): in a pipeline,
// that decode step waits behind it at every stage.
TEST(StepSchedulerBudget, TheBudgetHoldsWhileADecodeIsInFlightElsewhere) {
  SchedulerOptions o = options(4, /*prefill_chunk=*/16, 0, /*max_in_flight=*/2);
  o.prefill_chunk_beside_decode = 6;
  Core c(o);
  c.add(1, {11});
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(c.answer(b1, {21}).ok());
  v1::MicroBatch d = c.schedule();  // sequence 1's decode, in flight
  ASSERT_EQ(rows(d), 1);
  c.add(2, seq_tokens(100, 30));
  v1::MicroBatch p = c.schedule();
  ASSERT_EQ(p.slices_size(), 1);
  EXPECT_EQ(p.slices(0).seq_id(), 2u);
  EXPECT_EQ(p.slices(0).tokens_size(), 6);
}

TEST(StepSchedulerBudget, ABudgetOfZeroOrAboveTheChunkIsTheChunk) {
  for (int budget : {0, -1, 16, 17, 1000}) {
    SchedulerOptions o = options(4, /*prefill_chunk=*/16, 0, 1);
    o.prefill_chunk_beside_decode = budget;
    Core c(o);
    c.add(1, {11});
    v1::MicroBatch b1 = c.schedule();
    ASSERT_TRUE(c.answer(b1, {21}).ok());
    c.add(2, seq_tokens(100, 30));
    v1::MicroBatch b2 = c.schedule();
    ASSERT_EQ(b2.slices_size(), 2) << budget;
    EXPECT_EQ(b2.slices(1).tokens_size(), 16) << budget;
    EXPECT_EQ(c.s.prefill_chunk_beside_decode(), 16) << budget;
  }
}

// The budget set after construction (Scheduler::
// set_prefill_chunk_beside_decode, at each new pipeline) holds from the
// next micro-batch; 0 is the chunk again.
TEST(StepSchedulerBudget, TheBudgetCanBeSetForTheNextMicroBatches) {
  Core c(options(4, /*prefill_chunk=*/16, 0, 1));
  c.add(1, {11});
  v1::MicroBatch b1 = c.schedule();
  ASSERT_TRUE(c.answer(b1, {21}).ok());
  c.add(2, seq_tokens(100, 40));
  c.s.set_prefill_chunk_beside_decode(3);
  EXPECT_EQ(c.s.prefill_chunk_beside_decode(), 3);
  v1::MicroBatch b2 = c.schedule();
  ASSERT_EQ(b2.slices_size(), 2);
  EXPECT_EQ(b2.slices(1).tokens_size(), 3);
  ASSERT_TRUE(c.answer(b2, {22}).ok());
  c.s.set_prefill_chunk_beside_decode(0);
  v1::MicroBatch b3 = c.schedule();
  ASSERT_EQ(b3.slices_size(), 2);
  EXPECT_EQ(b3.slices(1).start_pos(), 3);
  EXPECT_EQ(b3.slices(1).tokens_size(), 16);
}

}  // namespace
}  // namespace strata::coordinator
