// The scheduler's core driven step by step, with no thread and no link:
// schedule() is called, its micro-batches answered by hand with
// update_from_output(), and every row, position and event checked.
#include "coordinator/step_scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/coordinator/step_scheduler_test_util.h"

namespace strata::coordinator {
namespace {

using namespace step_test;  // NOLINT: the tests' own helpers

TEST(StepScheduler, DecodesFirstThenPromptChunksWithinTheTokenBudget) {
  Core c(options(/*max_sequences=*/4, /*prefill_chunk=*/8,
                 /*max_batch_rows=*/10, /*max_in_flight=*/1));
  auto h1 = c.add(1, {11});
  auto h2 = c.add(2, {12});
  auto h3 = c.add(3, {13}, /*max_tokens=*/2);
  v1::MicroBatch b1 = c.schedule();
  ASSERT_EQ(b1.slices_size(), 3);
  EXPECT_EQ(rows(b1), 3);
  ASSERT_TRUE(c.answer(b1, {21, 22, 23}).ok());
  // Three decode rows first; the 8-row chunk of a new prompt would make 11
  // rows, over the budget of 10: it waits (whole, not cut shorter).
  c.add(4, std::vector<int32_t>(20, 9));
  v1::MicroBatch b2 = c.schedule();
  ASSERT_EQ(b2.slices_size(), 3);
  EXPECT_EQ(rows(b2), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b2.slices(i).seq_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(b2.slices(i).start_pos(), 1);
    EXPECT_EQ(tokens(b2.slices(i)), std::vector<int32_t>({21 + i}));
    EXPECT_TRUE(b2.slices(i).sample());
  }
  EXPECT_FALSE(c.s.schedule().has_value());  // one micro-batch in flight
  // Sequence 3 reaches max_tokens: two decodes and the chunk fill 10 rows.
  ASSERT_TRUE(c.answer(b2, {31, 32, 33}).ok());
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({3}));
  v1::MicroBatch b3 = c.schedule();
  ASSERT_EQ(b3.slices_size(), 3);
  EXPECT_EQ(rows(b3), 10);
  EXPECT_EQ(b3.slices(0).seq_id(), 1u);
  EXPECT_EQ(b3.slices(0).start_pos(), 2);
  EXPECT_EQ(tokens(b3.slices(0)), std::vector<int32_t>({31}));
  EXPECT_EQ(b3.slices(1).seq_id(), 2u);
  EXPECT_EQ(tokens(b3.slices(1)), std::vector<int32_t>({32}));
  EXPECT_EQ(b3.slices(2).seq_id(), 4u);
  EXPECT_EQ(b3.slices(2).start_pos(), 0);
  EXPECT_EQ(b3.slices(2).tokens_size(), 8);
  EXPECT_FALSE(b3.slices(2).sample());
  EXPECT_TRUE(b3.slices(2).has_sampling());
  // Sequence 3's events: two deltas, then done with both ids.
  std::vector<SequenceEvent> e3 = events(*h3);
  ASSERT_EQ(e3.size(), 3u);
  EXPECT_EQ(e3[0].ids, std::vector<int32_t>({23}));
  EXPECT_EQ(e3[1].ids, std::vector<int32_t>({33}));
  EXPECT_EQ(e3[2].kind, SequenceEvent::Kind::kDone);
  EXPECT_EQ(e3[2].all_ids, std::vector<int32_t>({23, 33}));
  EXPECT_EQ(e3[2].all_text, "<23><33>");
  EXPECT_EQ(e3[2].finish, FinishReason::kLength);
  EXPECT_EQ(e3[2].timings.decode_steps, 1);
  EXPECT_EQ(events(*h1).size(), 2u);  // deltas only: still running
  EXPECT_EQ(c.s.served(), 1u);
}

TEST(StepScheduler, LongPromptFollowsInChunksWhileEarlierOnesAreInFlight) {
  Core c(options(8, /*prefill_chunk=*/512, /*max_batch_rows=*/0,
                 /*max_in_flight=*/3));
  std::vector<int32_t> prompt(1300);
  for (int i = 0; i < 1300; ++i) prompt[i] = 3 + i;
  auto h = c.add(7, prompt);
  // Three chunks in consecutive calls, no result back yet.
  v1::MicroBatch b[3];
  for (auto& batch : b) batch = c.schedule();
  EXPECT_EQ(c.s.in_flight(), 3);
  EXPECT_FALSE(c.s.schedule().has_value());
  const int starts[] = {0, 512, 1024};
  const int sizes[] = {512, 512, 276};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(b[i].slices_size(), 1);
    const v1::SequenceSlice& slice = b[i].slices(0);
    EXPECT_EQ(slice.seq_id(), 7u);
    EXPECT_EQ(slice.start_pos(), starts[i]);
    ASSERT_EQ(slice.tokens_size(), sizes[i]);
    EXPECT_EQ(slice.tokens(0), prompt[starts[i]]);
    EXPECT_EQ(slice.tokens(sizes[i] - 1), prompt[starts[i] + sizes[i] - 1]);
    EXPECT_EQ(slice.sample(), i == 2);
    EXPECT_EQ(slice.has_sampling(), i == 0);
  }
  EXPECT_LT(b[0].batch_id(), b[1].batch_id());
  EXPECT_LT(b[1].batch_id(), b[2].batch_id());
  ASSERT_TRUE(c.answer(b[0], {}).ok());
  ASSERT_TRUE(c.answer(b[1], {}).ok());
  EXPECT_TRUE(events(*h).empty());
  EXPECT_FALSE(c.s.schedule().has_value());  // waits for its token
  ASSERT_TRUE(c.answer(b[2], {77}).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].ids, std::vector<int32_t>({77}));
  EXPECT_EQ(e[0].text, "<77>");
  v1::MicroBatch d = c.schedule();
  ASSERT_EQ(d.slices_size(), 1);
  EXPECT_EQ(d.slices(0).start_pos(), 1300);
  EXPECT_EQ(tokens(d.slices(0)), std::vector<int32_t>({77}));
}

TEST(StepScheduler, MaxInFlightIsRespected) {
  // A budget of 4 rows: one 4-token prompt per micro-batch.
  Core c(options(8, /*prefill_chunk=*/4, /*max_batch_rows=*/4,
                 /*max_in_flight=*/2));
  c.add(1, {1, 2, 3, 4});
  c.add(2, {1, 2, 3, 4});
  c.add(3, {1, 2, 3, 4});
  EXPECT_EQ(c.s.waiting(), 3);
  v1::MicroBatch b1 = c.schedule();
  v1::MicroBatch b2 = c.schedule();
  EXPECT_EQ(c.s.active(), 3);  // admitted even though one waits to be sent
  EXPECT_EQ(c.s.waiting(), 0);
  EXPECT_EQ(b1.slices(0).seq_id(), 1u);
  EXPECT_EQ(b2.slices(0).seq_id(), 2u);
  EXPECT_EQ(c.s.in_flight(), 2);
  EXPECT_FALSE(c.s.schedule().has_value());  // sequence 3 must wait
  ASSERT_TRUE(c.answer(b2, {50}).ok());
  EXPECT_EQ(c.s.in_flight(), 1);
  v1::MicroBatch b3 = c.schedule();
  // The decode row of sequence 2 leaves 3 rows: sequence 3's chunk waits.
  ASSERT_EQ(b3.slices_size(), 1);
  EXPECT_EQ(b3.slices(0).seq_id(), 2u);
  EXPECT_EQ(b3.slices(0).start_pos(), 4);
  EXPECT_FALSE(c.s.schedule().has_value());
  EXPECT_EQ(c.s.in_flight(), 2);
}

TEST(StepScheduler, DecodingSequencesAreSpreadOverMicroBatchesInFlight) {
  Core c(options(8, 512, 0, /*max_in_flight=*/2));
  for (uint64_t id = 1; id <= 4; ++id) c.add(id, {static_cast<int32_t>(id)});
  v1::MicroBatch p = c.schedule();
  ASSERT_EQ(p.slices_size(), 4);  // every prompt in one micro-batch
  EXPECT_FALSE(c.s.schedule().has_value());
  ASSERT_TRUE(c.answer(p, {41, 42, 43, 44}).ok());
  // Four decoding over two micro-batches in flight: two rows each.
  v1::MicroBatch d1 = c.schedule();
  v1::MicroBatch d2 = c.schedule();
  EXPECT_FALSE(c.s.schedule().has_value());
  ASSERT_EQ(d1.slices_size(), 2);
  ASSERT_EQ(d2.slices_size(), 2);
  const v1::MicroBatch* d[] = {&d1, &d1, &d2, &d2};
  for (int i = 0; i < 4; ++i) {
    const v1::SequenceSlice& slice = d[i]->slices(i % 2);
    EXPECT_EQ(slice.seq_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(slice.start_pos(), 1);
    EXPECT_EQ(tokens(slice), std::vector<int32_t>({41 + i}));
  }
}

TEST(StepScheduler, SampledTokenFeedsTheNextDecodeUntilMaxTokens) {
  Core c(options(8, 512, 0, 1));
  auto h = c.add(5, {1, 2, 3}, /*max_tokens=*/3);
  v1::MicroBatch p = c.schedule();
  ASSERT_EQ(p.slices_size(), 1);
  EXPECT_EQ(p.slices(0).start_pos(), 0);
  EXPECT_EQ(tokens(p.slices(0)), std::vector<int32_t>({1, 2, 3}));
  EXPECT_TRUE(p.slices(0).sample());
  ASSERT_TRUE(c.answer(p, {42}).ok());
  v1::MicroBatch d1 = c.schedule();
  ASSERT_EQ(d1.slices_size(), 1);
  EXPECT_EQ(d1.slices(0).start_pos(), 3);
  EXPECT_EQ(tokens(d1.slices(0)), std::vector<int32_t>({42}));
  EXPECT_FALSE(d1.slices(0).has_sampling());
  ASSERT_TRUE(c.answer(d1, {43}).ok());
  v1::MicroBatch d2 = c.schedule();
  EXPECT_EQ(d2.slices(0).start_pos(), 4);
  EXPECT_EQ(tokens(d2.slices(0)), std::vector<int32_t>({43}));
  EXPECT_TRUE(c.s.take_finished().empty());
  ASSERT_TRUE(c.answer(d2, {44}).ok());
  // The third token ends it: freed, its slot empty, nothing more to send.
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({5}));
  EXPECT_EQ(c.s.active(), 0);
  EXPECT_EQ(c.s.served(), 1u);
  EXPECT_FALSE(c.s.schedule().has_value());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[2].ids, std::vector<int32_t>({44}));
  EXPECT_EQ(e[3].kind, SequenceEvent::Kind::kDone);
  EXPECT_EQ(e[3].all_ids, std::vector<int32_t>({42, 43, 44}));
  EXPECT_EQ(e[3].finish, FinishReason::kLength);
  EXPECT_EQ(e[3].timings.decode_steps, 2);
}

TEST(StepScheduler, CancelFreesOnceItsMicroBatchesCameBack) {
  Core c(options(/*max_sequences=*/1, 512, 0, /*max_in_flight=*/3));
  auto h = c.add(1, std::vector<int32_t>(1300, 9));
  auto queued = c.add(2, {1, 2});
  v1::MicroBatch b[3];
  for (auto& batch : b) batch = c.schedule();
  EXPECT_EQ(c.s.waiting(), 1);  // one slot
  c.s.cancel(1);
  c.s.cancel(2);
  c.s.cancel(99);  // unknown: ignored
  for (auto* handle : {&h, &queued}) {
    std::vector<SequenceEvent> e = events(**handle);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].kind, SequenceEvent::Kind::kError);
    EXPECT_EQ(e[0].error, absl::CancelledError("cancelled by the client"));
  }
  EXPECT_EQ(c.s.waiting(), 0);
  // Freed only when its last micro-batch came back; the sampled token of a
  // cancelled sequence is dropped.
  ASSERT_TRUE(c.answer(b[0], {}).ok());
  ASSERT_TRUE(c.answer(b[1], {}).ok());
  EXPECT_TRUE(c.s.take_finished().empty());
  ASSERT_TRUE(c.answer(b[2], {5}).ok());
  EXPECT_TRUE(events(*h).empty());
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({1}));
  EXPECT_EQ(c.s.active(), 0);
  EXPECT_EQ(c.s.served(), 0u);
}

TEST(StepScheduler, UnavailableResultFailsEveryRequest) {
  Core c(options(/*max_sequences=*/2, 512, 0, /*max_in_flight=*/2));
  int broken = 0;
  int traces = 0;
  StepScheduler::Hooks hooks;
  hooks.broken = [&](const absl::Status& st) {
    ++broken;
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  };
  hooks.trace = [&](const v1::BlockTrace&) { ++traces; };
  c.s.set_hooks(hooks);
  std::vector<std::shared_ptr<SequenceHandle>> h = {
      c.add(1, {1}), c.add(2, {1}), c.add(3, {1})};  // the third waits
  v1::MicroBatch p = c.schedule();
  ASSERT_TRUE(c.answer(p, {7, 8}).ok());
  v1::MicroBatch d1 = c.schedule();
  v1::MicroBatch d2 = c.schedule();
  v1::MicroBatchResult dead;
  dead.set_batch_id(d1.batch_id());
  dead.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
  dead.set_error_message("worker w1 (127.0.0.1:1): connection lost");
  dead.add_traces();
  const absl::Status st = c.s.update_from_output(dead);
  EXPECT_EQ(st,
            absl::UnavailableError("worker w1 (127.0.0.1:1): connection lost"));
  EXPECT_EQ(broken, 1);
  EXPECT_EQ(traces, 1);
  for (size_t i = 0; i < h.size(); ++i) {
    std::vector<SequenceEvent> e = events(*h[i]);
    ASSERT_FALSE(e.empty()) << i;
    EXPECT_EQ(e.back().kind, SequenceEvent::Kind::kError);
    EXPECT_EQ(e.back().error, st);
  }
  EXPECT_EQ(c.s.active(), 0);
  EXPECT_EQ(c.s.waiting(), 0);
  EXPECT_EQ(c.s.in_flight(), 0);
  EXPECT_TRUE(c.s.take_finished().empty());  // the workers lost them anyway
  // The other micro-batch's result, when it comes, is ignored.
  EXPECT_TRUE(c.answer(d2, {9}).ok());
  EXPECT_FALSE(c.s.schedule().has_value());
}

TEST(StepScheduler, SuspendKeepsEachSequenceAndResumesItWithItsTokens) {
  SchedulerOptions o = options(/*max_sequences=*/3, /*prefill_chunk=*/3,
                               /*max_batch_rows=*/4, /*max_in_flight=*/1);
  o.max_migrations = 1;
  Core c(o);
  int broken = 0;
  StepScheduler::Hooks hooks;
  hooks.broken = [&](const absl::Status&) { ++broken; };
  c.s.set_hooks(hooks);
  // a decodes; b has half of its 6-row prompt in flight.
  std::shared_ptr<SequenceHandle> a = c.add(1, {5, 6, 7});
  v1::MicroBatch p = c.schedule();
  ASSERT_TRUE(c.answer(p, {42}).ok());
  v1::MicroBatch d = c.schedule();  // decode of 42 at position 3
  ASSERT_TRUE(c.answer(d, {43}).ok());
  std::shared_ptr<SequenceHandle> b = c.add(2, {9, 9, 9, 9, 9, 9});
  v1::MicroBatch mixed = c.schedule();  // decode of 43 + b's first chunk
  ASSERT_EQ(mixed.slices_size(), 2);
  EXPECT_EQ(mixed.slices(1).tokens_size(), 3);
  // The stage dies with that micro-batch in flight.
  v1::MicroBatchResult dead;
  dead.set_batch_id(mixed.batch_id());
  dead.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
  dead.set_error_message("worker w1: gone");
  EXPECT_EQ(c.s.update_from_output(dead).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(broken, 1);
  EXPECT_EQ(c.s.active(), 2);  // kept, not failed
  EXPECT_EQ(c.s.in_flight(), 0);
  EXPECT_EQ(c.s.migrated(), 2u);
  for (const SequenceEvent& e : events(*a)) {
    EXPECT_EQ(e.kind, SequenceEvent::Kind::kDelta);  // 42, 43; no end
  }
  EXPECT_TRUE(events(*b).empty());
  // The new pipeline: a starts again with its prompt and both of its
  // tokens (generated from position 3), in chunks, with its sampling
  // parameters on the first.
  v1::MicroBatch r1 = c.schedule();
  ASSERT_EQ(r1.slices_size(), 1);
  EXPECT_EQ(r1.slices(0).seq_id(), 1u);
  EXPECT_EQ(r1.slices(0).start_pos(), 0);
  EXPECT_EQ(tokens(r1.slices(0)), std::vector<int32_t>({5, 6, 7}));
  EXPECT_EQ(r1.slices(0).generated_from(), 3);
  EXPECT_TRUE(r1.slices(0).has_sampling());
  EXPECT_FALSE(r1.slices(0).sample());
  ASSERT_TRUE(c.answer(r1, {}).ok());
  v1::MicroBatch r2 = c.schedule();
  ASSERT_EQ(r2.slices_size(), 1);
  EXPECT_EQ(tokens(r2.slices(0)), std::vector<int32_t>({42, 43}));
  EXPECT_EQ(r2.slices(0).start_pos(), 3);
  EXPECT_TRUE(r2.slices(0).sample());
  // A token for another position than the one sent (a stale answer) is
  // never delivered: the sequence ends with an error instead.
  v1::MicroBatchResult stale;
  stale.set_batch_id(r2.batch_id());
  v1::SampledToken* t = stale.add_tokens();
  t->set_seq_id(1);
  t->set_id(99);
  t->set_pos(4);  // rows 3 and 4 make the token of position 5
  ASSERT_TRUE(c.s.update_from_output(stale).ok());
  std::vector<SequenceEvent> ea = events(*a);
  ASSERT_EQ(ea.size(), 1u);
  EXPECT_EQ(ea[0].kind, SequenceEvent::Kind::kError);
  EXPECT_EQ(ea[0].error.code(), absl::StatusCode::kInternal);
  // b starts again from its prompt (nothing generated: a plain restart).
  v1::MicroBatch r3 = c.schedule();
  ASSERT_EQ(r3.slices_size(), 1);
  EXPECT_EQ(r3.slices(0).seq_id(), 2u);
  EXPECT_EQ(r3.slices(0).start_pos(), 0);
  EXPECT_EQ(r3.slices(0).generated_from(), 0);
  EXPECT_EQ(tokens(r3.slices(0)), std::vector<int32_t>({9, 9, 9}));
  // A second break: b moved once already (max_migrations 1) and ends.
  const absl::Status gone = absl::UnavailableError("worker w2: gone");
  EXPECT_EQ(c.s.suspend(gone, 1), 0);
  std::vector<SequenceEvent> eb = events(*b);
  ASSERT_EQ(eb.size(), 1u);
  EXPECT_EQ(eb[0].kind, SequenceEvent::Kind::kError);
  EXPECT_EQ(eb[0].error, gone);
  EXPECT_EQ(c.s.active(), 0);
}

TEST(StepScheduler, ErrorWithAnotherCodeFailsOnlyThatMicroBatch) {
  Core c(options(8, /*prefill_chunk=*/4, /*max_batch_rows=*/4,
                 /*max_in_flight=*/2));
  auto h1 = c.add(1, {1, 2, 3, 4});
  auto h2 = c.add(2, {1, 2, 3, 4});
  v1::MicroBatch b1 = c.schedule();
  v1::MicroBatch b2 = c.schedule();
  ASSERT_TRUE(c.fail(b1, absl::StatusCode::kInvalidArgument, "").ok());
  std::vector<SequenceEvent> e1 = events(*h1);
  ASSERT_EQ(e1.size(), 1u);
  EXPECT_EQ(e1[0].error,
            absl::InvalidArgumentError(
                "micro-batch " + std::to_string(b1.batch_id()) + " failed"));
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({1}));
  EXPECT_TRUE(events(*h2).empty());
  ASSERT_TRUE(c.answer(b2, {61}).ok());
  std::vector<SequenceEvent> e2 = events(*h2);
  ASSERT_EQ(e2.size(), 1u);
  EXPECT_EQ(e2[0].ids, std::vector<int32_t>({61}));
  v1::MicroBatch d = c.schedule();
  EXPECT_EQ(d.slices(0).seq_id(), 2u);
  EXPECT_EQ(d.slices(0).start_pos(), 4);
}

TEST(StepScheduler, TokensThatDoNotMatchTheSampledSlicesFailTheMicroBatch) {
  Core c(options(8, 512, 0, 1));
  auto h = c.add(1, {1, 2});
  v1::MicroBatch p = c.schedule();
  v1::MicroBatchResult r;
  r.set_batch_id(p.batch_id());
  r.add_tokens()->set_seq_id(2);  // another sequence
  EXPECT_TRUE(c.s.update_from_output(r).ok());
  std::vector<SequenceEvent> e = events(*h);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(c.s.take_finished(), std::vector<uint64_t>({1}));
}


// --- Prefix caching ----------------------------------------------------

TEST(PrefixIndex, KeysChainTheWholePrefix) {
  PrefixIndex index(8, 4);
  const std::vector<int32_t> a = seq_tokens(1, 13);
  std::vector<int32_t> b = a;
  b[1] = 99;  // differs in block 0 only
  const std::vector<uint64_t> ka = index.block_keys(a);
  const std::vector<uint64_t> kb = index.block_keys(b);
  ASSERT_EQ(ka.size(), 3u);  // full blocks only
  for (int i = 0; i < 3; ++i) EXPECT_NE(ka[i], kb[i]) << i;  // block 0 changes all
  std::vector<int32_t> c = a;
  c[12] = 7;  // in the partial block: no key changes
  EXPECT_EQ(index.block_keys(c), ka);
  std::vector<int32_t> d = a;
  d[9] = 0;  // block 2: blocks 0, 1 keep their keys
  const std::vector<uint64_t> kd = index.block_keys(d);
  EXPECT_EQ(kd[0], ka[0]);
  EXPECT_EQ(kd[1], ka[1]);
  EXPECT_NE(kd[2], ka[2]);
}

// A cache salt roots every key elsewhere: blocks cached under one salt
// match only requests of that salt, never the shared cache's or another's.
TEST(PrefixIndex, ASaltedPrefixMatchesOnlyItsOwnSalt) {
  PrefixIndex index(8, 4);
  const std::vector<int32_t> a = seq_tokens(1, 12);
  const uint64_t shared = PrefixIndex::root_key();
  const uint64_t alice = PrefixIndex::root_key("alice");
  const uint64_t bob = PrefixIndex::root_key("bob");
  EXPECT_EQ(shared, PrefixIndex::kSharedRoot);
  EXPECT_EQ(PrefixIndex::root_key(""), shared);
  EXPECT_NE(alice, shared);
  EXPECT_NE(alice, bob);
  EXPECT_NE(PrefixIndex::root_key("alic"), alice);
  const std::vector<uint64_t> ka = index.block_keys(a, alice);
  const std::vector<uint64_t> ks = index.block_keys(a);
  const std::vector<uint64_t> kb = index.block_keys(a, bob);
  for (size_t i = 0; i < ka.size(); ++i) {
    EXPECT_NE(ka[i], ks[i]) << i;
    EXPECT_NE(ka[i], kb[i]) << i;
  }
  for (int b = 0; b < 3; ++b) ASSERT_TRUE(index.insert(a, ka, b, alice).has_value()) << b;
  EXPECT_EQ(index.match(a, ka, 3, alice).size(), 3u);
  EXPECT_TRUE(index.match(a, ks, 3).empty());
  EXPECT_TRUE(index.match(a, kb, 3, bob).empty());
  // Alice's keys presented with another root: the first block's parent
  // differs, so nothing matches even with her keys.
  EXPECT_TRUE(index.match(a, ka, 3, bob).empty());
  EXPECT_TRUE(index.match(a, ka, 3).empty());
}

TEST(PrefixIndex, MatchesTheLongestCachedRunAndEvictsLeastRecentlyUsed) {
  PrefixIndex index(3, 4);
  const std::vector<int32_t> a = seq_tokens(1, 12);
  const std::vector<uint64_t> ka = index.block_keys(a);
  EXPECT_TRUE(index.match(a, ka, 3).empty());
  std::optional<uint32_t> s0 = index.insert(a, ka, 0);
  std::optional<uint32_t> s1 = index.insert(a, ka, 1);
  ASSERT_TRUE(s0 && s1);
  EXPECT_FALSE(index.insert(a, ka, 0).has_value());  // already there
  std::vector<PrefixBlock> hits = index.match(a, ka, 3);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].slot, *s0);
  EXPECT_EQ(hits[0].key, ka[0]);
  EXPECT_EQ(hits[1].slot, *s1);
  EXPECT_EQ(index.match(a, ka, 1).size(), 1u);  // at most max_blocks
  // Another prompt: its block fills the last slot, then evicts the least
  // recently used (a's block 1: the match made block 0 the most recent).
  const std::vector<int32_t> b = seq_tokens(100, 8);
  const std::vector<uint64_t> kb = index.block_keys(b);
  ASSERT_TRUE(index.insert(b, kb, 0).has_value());
  std::optional<uint32_t> reused = index.insert(b, kb, 1);
  ASSERT_TRUE(reused.has_value());
  EXPECT_EQ(*reused, *s1);
  EXPECT_EQ(index.match(a, ka, 3).size(), 1u);  // block 0 only now
  EXPECT_EQ(index.used(), 3);
  index.erase(*s0, ka[1]);  // another key: nothing
  EXPECT_EQ(index.used(), 3);
  index.erase(*s0, ka[0]);
  EXPECT_TRUE(index.match(a, ka, 3).empty());
  index.clear();
  EXPECT_EQ(index.used(), 0);
  EXPECT_TRUE(index.match(b, kb, 2).empty());
  PrefixIndex off(0, 4);
  EXPECT_FALSE(off.insert(a, ka, 0).has_value());
}

TEST(StepSchedulerPrefix, ASharedPrefixIsRestoredAndNotPrefilled) {
  Core c(cached(64));
  const std::vector<int32_t> system = seq_tokens(1000, 40);  // 2 full blocks + 8
  std::vector<v1::SequenceSlice> s1;
  SequenceEvent d1 = run_one(c, 1, concat(system, {7, 8, 9}), &s1);
  EXPECT_EQ(d1.kind, SequenceEvent::Kind::kDone);
  EXPECT_EQ(d1.cached_tokens, 0);
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].start_pos(), 0);
  EXPECT_TRUE(restored(s1[0]).empty());
  EXPECT_EQ(saved(s1[0]).size(), 2u);  // blocks 0, 1 (43 tokens)
  EXPECT_EQ(saved_index(s1[0]), std::vector<int32_t>({0, 1}));
  // The same system prompt, another question: 32 rows restored.
  std::vector<v1::SequenceSlice> s2;
  SequenceEvent d2 = run_one(c, 2, concat(system, seq_tokens(50, 30)), &s2);
  EXPECT_EQ(d2.cached_tokens, 32);
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(s2[0].start_pos(), 32);
  EXPECT_EQ(s2[0].tokens_size(), 70 - 32);
  EXPECT_EQ(restored(s2[0]), saved(s1[0]));
  EXPECT_EQ(s2[0].restore_keys_size(), 2);
  EXPECT_EQ(s2[0].restore_keys(0), s1[0].save_keys(0));
  EXPECT_TRUE(s2[0].has_sampling());  // the first slice makes the sampler
  // It saves its own blocks 2, 3 (64 of 70 tokens), not 0, 1 again.
  EXPECT_EQ(saved_index(s2[0]), std::vector<int32_t>({2, 3}));
  // The first 16 tokens only: a partial match of one block.
  std::vector<v1::SequenceSlice> s3;
  SequenceEvent d3 = run_one(c, 3, concat(seq_tokens(1000, 16), seq_tokens(5, 20)), &s3);
  EXPECT_EQ(d3.cached_tokens, 16);
  EXPECT_EQ(s3[0].start_pos(), 16);
  EXPECT_EQ(restored(s3[0]), std::vector<uint32_t>({saved(s1[0])[0]}));
}

TEST(StepSchedulerPrefix, TheLastBlockOfAPromptIsAlwaysPrefilled) {
  Core c(cached(64));
  const std::vector<int32_t> p = seq_tokens(1, 32);  // exactly 2 blocks
  run_one(c, 1, p);
  std::vector<v1::SequenceSlice> s;
  SequenceEvent d = run_one(c, 2, p, &s);
  EXPECT_EQ(d.cached_tokens, 16);  // block 1 is prefilled for the logits
  EXPECT_EQ(s[0].start_pos(), 16);
  EXPECT_EQ(s[0].tokens_size(), 16);
  EXPECT_TRUE(saved(s[0]).empty());  // block 1 is cached already
}

TEST(StepSchedulerPrefix, ChunksSaveTheBlocksTheyComplete) {
  Core c(cached(64, /*prefill_chunk=*/20));
  std::vector<v1::SequenceSlice> s;
  run_one(c, 1, seq_tokens(1, 50), &s);
  ASSERT_EQ(s.size(), 3u);  // 20 + 20 + 10 rows
  EXPECT_EQ(saved_index(s[0]), std::vector<int32_t>({0}));     // rows 0..19
  EXPECT_EQ(saved_index(s[1]), std::vector<int32_t>({1}));     // 20..39
  EXPECT_EQ(saved_index(s[2]), std::vector<int32_t>({2}));     // 40..49
  EXPECT_FALSE(s[1].has_sampling());
  std::vector<v1::SequenceSlice> t;
  SequenceEvent d = run_one(c, 2, seq_tokens(1, 60), &t);
  EXPECT_EQ(d.cached_tokens, 48);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].start_pos(), 48);
}

TEST(StepSchedulerPrefix, LruEvictionUnderTheBlockBudget) {
  Core c(cached(/*blocks=*/2));
  const std::vector<int32_t> a = seq_tokens(1, 33);    // blocks a0, a1
  const std::vector<int32_t> b = seq_tokens(500, 17);  // block b0
  run_one(c, 1, a);
  EXPECT_EQ(run_one(c, 2, a).cached_tokens, 32);  // a0 most recent, then a1
  run_one(c, 3, b);                                // evicts a1
  EXPECT_EQ(c.s.prefix_index().used(), 2);
  EXPECT_EQ(run_one(c, 4, a).cached_tokens, 16);   // a0 only; saves a1 (evicts b0)
  EXPECT_EQ(run_one(c, 5, b).cached_tokens, 0);
}

TEST(StepSchedulerPrefix, TwoSequencesSharingAPrefix) {
  Core c(cached(64));
  const std::vector<int32_t> system = seq_tokens(1, 48);
  // Together in one micro-batch: the second cannot restore what the first
  // saves in that same micro-batch (restores run before saves).
  auto h1 = c.add(1, concat(system, {1}), 1);
  auto h2 = c.add(2, concat(system, {2}), 1);
  v1::MicroBatch b = c.schedule();
  ASSERT_EQ(b.slices_size(), 2);
  EXPECT_EQ(saved_index(b.slices(0)), std::vector<int32_t>({0, 1, 2}));
  EXPECT_TRUE(restored(b.slices(1)).empty());
  EXPECT_TRUE(saved(b.slices(1)).empty());  // already indexed by the first
  ASSERT_TRUE(c.answer(b, {5, 5}).ok());
  c.s.take_finished();
  // Later, two at once both restore the same blocks.
  auto h3 = c.add(3, concat(system, {3}), 1);
  auto h4 = c.add(4, concat(system, {4, 4}), 1);
  v1::MicroBatch b2 = c.schedule();
  ASSERT_EQ(b2.slices_size(), 2);
  EXPECT_EQ(restored(b2.slices(0)), restored(b2.slices(1)));
  EXPECT_EQ(b2.slices(0).start_pos(), 48);
  EXPECT_EQ(b2.slices(1).start_pos(), 48);
  ASSERT_TRUE(c.answer(b2, {5, 5}).ok());
  EXPECT_EQ(events(*h3).back().cached_tokens, 48);
  EXPECT_EQ(events(*h4).back().cached_tokens, 48);
}

TEST(StepSchedulerPrefix, AFailedMicroBatchForgetsItsBlocks) {
  Core c(cached(64));
  const std::vector<int32_t> p = seq_tokens(1, 40);
  auto h = c.add(1, p, 1);
  v1::MicroBatch b = c.schedule();
  EXPECT_EQ(saved(b.slices(0)).size(), 2u);
  ASSERT_TRUE(c.fail(b, absl::StatusCode::kInvalidArgument, "bad").ok());
  c.s.take_finished();
  EXPECT_EQ(c.s.prefix_index().used(), 0);
  run_one(c, 2, p);
  std::vector<v1::SequenceSlice> s;
  EXPECT_EQ(run_one(c, 3, p, &s).cached_tokens, 32);
  // A failed restore clears the whole index (a stage lost its store).
  auto h4 = c.add(4, p, 1);
  v1::MicroBatch b4 = c.schedule();
  ASSERT_EQ(b4.slices(0).restore_blocks_size(), 2);
  ASSERT_TRUE(c.fail(b4, absl::StatusCode::kInvalidArgument,
                     "slices[0].restore_blocks[0]: block 0 is empty on this stage").ok());
  c.s.take_finished();
  EXPECT_EQ(c.s.prefix_index().used(), 0);
  c.s.reset_prefix_cache();
  EXPECT_EQ(run_one(c, 5, p).cached_tokens, 0);
}

TEST(StepSchedulerPrefix, DecodedBlocksAreSavedForTheNextTurn) {
  Core c(cached(64));
  const std::vector<int32_t> turn1 = seq_tokens(1, 20);
  auto h = c.add(1, turn1, /*max_tokens=*/30);
  std::vector<int32_t> saved_blocks;
  for (int32_t next = 100;; ++next) {
    std::optional<v1::MicroBatch> b = c.s.schedule();
    if (!b) break;
    for (const v1::SequenceSlice& s : b->slices()) {
      for (int32_t i : saved_index(s)) saved_blocks.push_back(i);
    }
    ASSERT_TRUE(c.answer(*b, {next}).ok());
  }
  c.s.take_finished();
  // 20 prompt rows and 29 of the 30 sampled ids went to the stages (the
  // last one was never sent): blocks 0 (prompt), 1 and 2 (decoded rows).
  EXPECT_EQ(saved_blocks, std::vector<int32_t>({0, 1, 2}));
  const SequenceEvent done = events(*h).back();
  ASSERT_EQ(done.all_ids.size(), 30u);
  // The next turn: the first turn, its answer, a new message.
  std::vector<int32_t> turn2 = concat(turn1, done.all_ids);
  turn2 = concat(turn2, {7, 7, 7});
  std::vector<v1::SequenceSlice> s;
  EXPECT_EQ(run_one(c, 2, turn2, &s).cached_tokens, 48);
  EXPECT_EQ(s[0].start_pos(), 48);
  // An answer that differs in block 2 reuses blocks 0 and 1 only.
  turn2[45] = 9999;
  EXPECT_EQ(run_one(c, 3, turn2).cached_tokens, 32);
}

TEST(StepSchedulerPrefix, ResetTakesTheStagesCapacity) {
  Core c(cached(64));
  const std::vector<int32_t> p = seq_tokens(1, 40);
  run_one(c, 1, p);
  c.s.reset_prefix_cache(0);  // a stage holds no store: off
  EXPECT_EQ(c.s.prefix_index().capacity(), 0);
  std::vector<v1::SequenceSlice> s;
  EXPECT_EQ(run_one(c, 2, p, &s).cached_tokens, 0);
  EXPECT_TRUE(saved(s[0]).empty());
  c.s.reset_prefix_cache(1000);  // never above the configured 64
  EXPECT_EQ(c.s.prefix_index().capacity(), 64);
  run_one(c, 3, p);
  EXPECT_EQ(run_one(c, 4, p).cached_tokens, 32);
  c.s.reset_prefix_cache();  // same capacity, emptied
  EXPECT_EQ(c.s.prefix_index().used(), 0);
}


TEST(StepSchedulerPrefix, OffByDefault) {
  Core c(options(8, 512, 0, 1));
  std::vector<v1::SequenceSlice> s;
  run_one(c, 1, seq_tokens(1, 40));
  EXPECT_EQ(run_one(c, 2, seq_tokens(1, 40), &s).cached_tokens, 0);
  EXPECT_TRUE(saved(s[0]).empty());
  EXPECT_TRUE(restored(s[0]).empty());
}

}  // namespace
}  // namespace strata::coordinator
