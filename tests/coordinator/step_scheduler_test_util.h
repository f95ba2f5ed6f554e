// Helpers of the step scheduler's tests (step_scheduler_test.cc,
// step_scheduler_scoring_test.cc): a core driven by hand, its micro-batches
// answered with update_from_output(), and what its slices and handles hold.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/step_scheduler.h"
#include "gtest/gtest.h"

namespace strata::coordinator::step_test {

// Id i reads as "<i>"; id 0 ends a turn.
class CountingDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override {
    return "<" + std::to_string(id) + ">";
  }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == 0; }
};

inline SchedulerOptions options(int max_sequences, int prefill_chunk, int max_batch_rows,
                                int max_in_flight) {
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
inline std::vector<SequenceEvent> events(SequenceHandle& h) {
  std::vector<SequenceEvent> out;
  while (auto e = h.next(absl::ZeroDuration())) out.push_back(std::move(*e));
  return out;
}

inline int rows(const v1::MicroBatch& b) {
  int n = 0;
  for (const v1::SequenceSlice& slice : b.slices()) n += slice.tokens_size();
  return n;
}

inline std::vector<int32_t> tokens(const v1::SequenceSlice& slice) {
  return {slice.tokens().begin(), slice.tokens().end()};
}

// --- Prefix caching ----------------------------------------------------

inline std::vector<int32_t> seq_tokens(int first, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::vector<uint32_t> restored(const v1::SequenceSlice& s) {
  return {s.restore_blocks().begin(), s.restore_blocks().end()};
}
inline std::vector<uint32_t> saved(const v1::SequenceSlice& s) {
  return {s.save_blocks().begin(), s.save_blocks().end()};
}
inline std::vector<int32_t> saved_index(const v1::SequenceSlice& s) {
  return {s.save_block_index().begin(), s.save_block_index().end()};
}

inline SchedulerOptions cached(int blocks, int prefill_chunk = 512) {
  SchedulerOptions o = options(8, prefill_chunk, 0, 1);
  o.prefix_cache_blocks = blocks;
  o.prefix_block_tokens = 16;
  return o;
}

// Runs sequence `id` (prompt, one token) to its end; its kDone event.
inline SequenceEvent run_one(Core& c, uint64_t id, std::vector<int32_t> prompt,
                      std::vector<v1::SequenceSlice>* slices = nullptr) {
  auto h = c.add(id, std::move(prompt), /*max_tokens=*/1);
  for (;;) {
    std::optional<v1::MicroBatch> b = c.s.schedule();
    if (!b) break;
    std::vector<int32_t> ids;
    for (const v1::SequenceSlice& s : b->slices()) {
      if (slices) slices->push_back(s);
      if (s.sample()) ids.push_back(5);
    }
    EXPECT_TRUE(c.answer(*b, ids).ok());
  }
  c.s.take_finished();
  std::vector<SequenceEvent> e = events(*h);
  EXPECT_FALSE(e.empty());
  return e.empty() ? SequenceEvent() : e.back();
}

}  // namespace strata::coordinator::step_test
