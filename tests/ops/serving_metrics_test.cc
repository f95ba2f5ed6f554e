// The scheduler's core feeding ServingMetrics, step by step (no thread, no
// link): a cancelled request counts as an abort, a failed one as an error,
// a finished one by its reason; tokens and latencies as they come. And
// logging's level from the flag or STRATA_LOG_LEVEL.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/metrics.h"
#include "coordinator/step_scheduler.h"
#include "gtest/gtest.h"
#include "model/log.h"
#include "spdlog/spdlog.h"

namespace strata::coordinator {
namespace {

class IdDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override { return std::to_string(id); }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == 0; }
};

struct Core {
  explicit Core(ServingMetrics* m)
      : s(opts(m), [] { return std::make_unique<IdDetokenizer>(); }) {}
  static SchedulerOptions opts(ServingMetrics* m) {
    SchedulerOptions o;
    o.max_sequences = 1;  // a second request waits
    o.n_ctx = 64;
    o.metrics = m;
    return o;
  }
  std::shared_ptr<SequenceHandle> add(uint64_t id, int prompt) {
    auto h = std::make_shared<SequenceHandle>(id);
    SequenceRequest r;
    r.prompt.assign(prompt, 5);
    r.params.max_tokens = 8;
    s.add(h, std::move(r));
    return h;
  }
  // Answers `batch`'s sampling slices with `token`.
  void answer(const v1::MicroBatch& batch, int32_t token) {
    v1::MicroBatchResult r;
    r.set_batch_id(batch.batch_id());
    for (const auto& slice : batch.slices()) {
      if (!slice.sample()) continue;
      auto* t = r.add_tokens();
      t->set_seq_id(slice.seq_id());
      t->set_id(token);
    }
    ASSERT_TRUE(s.update_from_output(std::move(r)).ok());
  }
  StepScheduler s;
};

TEST(ServingMetricsFeed, EndsAreCountedByReason) {
  ServingMetrics m;
  Core core(&m);
  core.add(1, 3);
  core.add(2, 4);
  auto batch = core.s.schedule();  // admits 1; 2 waits
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(core.s.active(), 1);
  EXPECT_EQ(core.s.waiting(), 1);
  EXPECT_EQ(core.s.kv_positions(), 3);
  core.answer(*batch, 9);  // first token of 1
  EXPECT_EQ(m.prompt_tokens.value(), 3);
  EXPECT_EQ(m.time_to_first_token.cumulative().back(), 1u);
  core.s.cancel(1);  // the client went away
  EXPECT_EQ(m.request_failure.with({"abort"}).value(), 1);
  core.s.take_finished();
  batch = core.s.schedule();  // admits 2
  ASSERT_TRUE(batch.has_value());
  core.answer(*batch, 9);
  batch = core.s.schedule();
  ASSERT_TRUE(batch.has_value());
  core.answer(*batch, 0);  // end of generation: "stop"
  EXPECT_EQ(m.request_success.with({"stop"}).value(), 1);
  EXPECT_EQ(m.generation_tokens.value(), 3);  // 9; 9 and the end token
  // Rows per micro-batch: 3 (prompt 1), 4 (prompt 2), 1 (its decode).
  EXPECT_EQ(m.iteration_tokens.sum(), 3 + 4 + 1);
  const std::vector<uint64_t> rows = m.iteration_tokens.cumulative();
  EXPECT_EQ(rows[0], 1u);       // le 1
  EXPECT_EQ(rows[1], 3u);       // le 8
  EXPECT_EQ(rows.back(), 3u);   // +Inf
  EXPECT_EQ(m.inter_token_latency.cumulative().back(), 1u);
  EXPECT_EQ(m.e2e_request_latency.cumulative().back(), 1u);
  EXPECT_EQ(m.request_generation_tokens.sum(),
            2);  // 2 sampled, cancelled 1 not counted
  core.s.take_finished();
  core.add(3, 2);
  core.s.fail_all(absl::UnavailableError("worker w1 is unreachable"));
  EXPECT_EQ(m.request_failure.with({"error"}).value(), 1);
  EXPECT_EQ(m.request_failure.with({"abort"}).value(), 1);
}

// Two prompts sharing 32 tokens (two 16-token blocks) with the prefix
// cache on: the second's hits are its restored rows.
TEST(ServingMetricsFeed, PrefixCacheQueriesAndHits) {
  ServingMetrics m;
  SchedulerOptions o = Core::opts(&m);
  o.max_sequences = 4;
  o.n_ctx = 128;
  o.prefix_cache_blocks = 8;
  o.prefix_block_tokens = 16;
  StepScheduler s(o, [] { return std::make_unique<IdDetokenizer>(); });
  auto run = [&](uint64_t id, std::vector<int32_t> prompt) {
    auto h = std::make_shared<SequenceHandle>(id);
    SequenceRequest r;
    r.prompt = std::move(prompt);
    r.params.max_tokens = 1;
    s.add(h, std::move(r));
    while (std::optional<v1::MicroBatch> b = s.schedule()) {
      v1::MicroBatchResult res;
      res.set_batch_id(b->batch_id());
      for (const auto& slice : b->slices()) {
        if (!slice.sample()) continue;
        auto* t = res.add_tokens();
        t->set_seq_id(slice.seq_id());
        t->set_id(9);
      }
      EXPECT_TRUE(s.update_from_output(std::move(res)).ok());
    }
    s.take_finished();
    int cached = -1;
    while (auto e = h->next(absl::ZeroDuration())) {
      if (e->kind == SequenceEvent::Kind::kDone) cached = e->cached_tokens;
    }
    return cached;
  };
  std::vector<int32_t> shared(40);
  for (int i = 0; i < 40; ++i) shared[i] = 100 + i;
  std::vector<int32_t> a = shared, b = shared;
  a.insert(a.end(), {1, 2, 3});
  b.insert(b.end(), {4, 5, 6, 7});
  EXPECT_EQ(run(1, a), 0);
  EXPECT_EQ(run(2, b), 32);
  EXPECT_EQ(m.prefix_cache_queries.value(), 43 + 44);
  EXPECT_EQ(m.prefix_cache_hits.value(), 32);
  EXPECT_EQ(m.prompt_tokens.value(), 43 + 44);
}

TEST(Logging, LevelFromFlagThenEnvironment) {
  ASSERT_EQ(setenv("STRATA_LOG_LEVEL", "debug", 1), 0);
  EXPECT_TRUE(init_logging("test", "").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  EXPECT_TRUE(init_logging("test", "warn").ok());  // the flag wins
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);
  ASSERT_EQ(setenv("STRATA_LOG_LEVEL", "loud", 1), 0);
  absl::Status st = init_logging("test", "");
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_NE(st.message().find("STRATA_LOG_LEVEL: 'loud' is not a level"),
            absl::string_view::npos)
      << st;
  st = init_logging("test", "verbose");
  EXPECT_NE(st.message().find("--log-level: 'verbose'"),
            absl::string_view::npos)
      << st;
  ASSERT_EQ(unsetenv("STRATA_LOG_LEVEL"), 0);
  EXPECT_TRUE(init_logging("test", "").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::info);
  EXPECT_TRUE(is_log_level("warning"));
  EXPECT_FALSE(is_log_level("INFO"));
}

}  // namespace
}  // namespace strata::coordinator
