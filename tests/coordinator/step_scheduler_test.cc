// The scheduler's core driven step by step, with no thread and no link:
// schedule() is called, its micro-batches answered by hand with
// update_from_output(), and every row, position and event checked.
#include "coordinator/step_scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::coordinator {
namespace {

// Id i reads as "<i>"; id 0 ends a turn.
class CountingDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override {
    return "<" + std::to_string(id) + ">";
  }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == 0; }
};

SchedulerOptions options(int max_sequences, int prefill_chunk,
                         int max_batch_rows, int max_in_flight) {
  SchedulerOptions o;
  o.n_ctx = 4096;
  o.max_sequences = max_sequences;
  o.prefill_chunk = prefill_chunk;
  o.max_batch_rows = max_batch_rows;
  o.max_in_flight = max_in_flight;
  return o;
}

class Core {
 public:
  explicit Core(const SchedulerOptions& o)
      : s(o, [] { return std::make_unique<CountingDetokenizer>(); }) {}

  std::shared_ptr<SequenceHandle> add(uint64_t id, std::vector<int32_t> prompt,
                                      int max_tokens = 100) {
    auto h = std::make_shared<SequenceHandle>(id);
    SequenceRequest r;
    r.prompt = std::move(prompt);
    r.params.max_tokens = max_tokens;
    s.add(h, std::move(r));
    return h;
  }
  v1::MicroBatch schedule() {
    std::optional<v1::MicroBatch> b = s.schedule();
    EXPECT_TRUE(b.has_value()) << "nothing scheduled";
    return b ? *b : v1::MicroBatch();
  }
  // Answers `batch`: `ids[k]` for its k-th sampling slice.
  absl::Status answer(const v1::MicroBatch& batch, std::vector<int32_t> ids) {
    v1::MicroBatchResult r;
    r.set_batch_id(batch.batch_id());
    size_t k = 0;
    for (const v1::SequenceSlice& slice : batch.slices()) {
      if (!slice.sample()) continue;
      v1::SampledToken* t = r.add_tokens();
      t->set_seq_id(slice.seq_id());
      t->set_id(k < ids.size() ? ids[k] : 0);
      ++k;
    }
    EXPECT_EQ(k, ids.size()) << "sampling slices of batch " << batch.batch_id();
    return s.update_from_output(std::move(r));
  }
  absl::Status fail(const v1::MicroBatch& batch, absl::StatusCode code,
                    std::string message) {
    v1::MicroBatchResult r;
    r.set_batch_id(batch.batch_id());
    r.set_error_code(static_cast<int>(code));
    r.set_error_message(std::move(message));
    return s.update_from_output(std::move(r));
  }

  StepScheduler s;
};

// The events a handle holds now (no waiting: the core has no thread).
std::vector<SequenceEvent> events(SequenceHandle& h) {
  std::vector<SequenceEvent> out;
  while (auto e = h.next(absl::ZeroDuration())) out.push_back(std::move(*e));
  return out;
}

int rows(const v1::MicroBatch& b) {
  int n = 0;
  for (const v1::SequenceSlice& slice : b.slices()) n += slice.tokens_size();
  return n;
}

std::vector<int32_t> tokens(const v1::SequenceSlice& slice) {
  return {slice.tokens().begin(), slice.tokens().end()};
}

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

}  // namespace
}  // namespace strata::coordinator
