// The scheduler over a real in-process pipeline (single-node mode on
// ../shared/models/stories260K.gguf): the same tokens as the one-process
// generation loop for 1, 2 and 3 stages and uneven splits, prompts longer
// than a chunk, seeded sampling, many sequences at once. And over a fake
// link: a broken pipeline ends every request with UNAVAILABLE and a new
// link serves again. With migration, requests on a pipeline that breaks
// (twice) finish on the next ones with the tokens of an undisturbed run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "coordinator/generation.h"
#include "coordinator/scheduler.h"
#include "coordinator/single_node.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "tests/test_paths.h"
#include "worker/backend.h"
#include "worker/in_process_link.h"
#include "worker/stage.h"

namespace strata::coordinator {
namespace {

// Waits below return as soon as their event comes; this only bounds a hang.
constexpr std::chrono::seconds kSafetyNet(120);

std::string stories() {
  return (testing::shared_dir() / "models" / "stories260K.gguf").string();
}

// Id i reads as "<i>"; id 0 ends a turn. (stories260K's GGUF carries a
// separator id of 2^32 - 1, which the tokenizer refuses; the scheduler's
// text path is the same with any Detokenizer.)
class CountingDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == 0; }
};

std::unique_ptr<Detokenizer> fake_detokenizer() {
  return std::make_unique<CountingDetokenizer>();
}

struct Outcome {
  absl::Status status;
  std::vector<int32_t> ids;     // from the deltas
  std::vector<int32_t> all_ids; // from done
  std::string text;             // deltas concatenated
  std::string all_text;
  FinishReason finish = FinishReason::kLength;
};

Outcome drain(const std::shared_ptr<SequenceHandle>& h) {
  Outcome o;
  while (true) {
    auto e = h->next(absl::Seconds(120));
    if (!e) {
      o.status = absl::DeadlineExceededError("no event in 120 s");
      return o;
    }
    switch (e->kind) {
      case SequenceEvent::Kind::kDelta:
        o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
        o.text += e->text;
        break;
      case SequenceEvent::Kind::kDone:
        o.all_ids = e->all_ids;
        o.all_text = e->all_text;
        o.finish = e->finish;
        return o;
      case SequenceEvent::Kind::kError:
        o.status = e->error;
        return o;
    }
  }
}

// The one-process loop on the whole model: the reference.
class Reference {
 public:
  explicit Reference(const std::string& path) {
    auto m = gguf::GgufModel::open(path);
    EXPECT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const gguf::GgufModel>(std::move(*m));
    hp_ = *arch::read_hyperparameters(model_->first());
    worker::CpuBackendOptions o;
    o.n_threads = 1;
    backend_ = *worker::make_cpu_backend(model_, hp_, {0, hp_.n_layer}, o);
    EXPECT_TRUE(backend_->add_sequence(0, 1024).ok());
  }
  GenerationResult run(const std::vector<int32_t>& prompt,
                       const GenerationParams& params) {
    CountingDetokenizer detok;
    auto r = generate(*backend_, 0, prompt, params, detok, {});
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }

 private:
  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  std::unique_ptr<worker::Backend> backend_;
};

std::vector<int32_t> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p = {1};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + rng() % 500);
  return p;
}

class SchedulerPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(stories())) {
      GTEST_SKIP() << stories() << " absent (../shared/models)";
    }
  }
  std::unique_ptr<Cluster> start(int workers,
                                 std::vector<placement::Range> ranges = {},
                                 int max_sequences = 8) {
    SingleNodeOptions o;
    o.model = stories();
    o.workers = workers;
    o.threads = workers;
    o.context_length = 1024;
    o.max_sequences = max_sequences;
    o.ranges = std::move(ranges);
    o.detokenizers = fake_detokenizer;
    auto c = make_single_node(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    absl::Status st = (*c)->wait_serving(absl::Seconds(60));
    EXPECT_TRUE(st.ok()) << st;
    return *std::move(c);
  }
};

TEST_F(SchedulerPipelineTest, SameGreedyTokensForEverySplit) {
  Reference ref(stories());
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407, 261, 378}, random_prompt(40, 7), random_prompt(700, 9)};
  GenerationParams params;
  params.max_tokens = 24;
  params.ignore_eos = true;
  std::vector<GenerationResult> expected;
  for (const auto& p : prompts) expected.push_back(ref.run(p, params));

  const std::vector<std::vector<placement::Range>> splits = {
      {},                                   // 1 stage
      {},                                   // 2 stages, auto
      {},                                   // 3 stages, auto
      {{0, 1}, {1, 5}},                     // uneven
      {{0, 4}, {4, 5}},                     // uneven the other way
      {{0, 1}, {1, 2}, {2, 5}},
  };
  const int workers[] = {1, 2, 3, 2, 2, 3};
  for (size_t s = 0; s < splits.size(); ++s) {
    SCOPED_TRACE(::testing::Message() << workers[s] << " stages, split " << s);
    auto cluster = start(workers[s], splits[s]);
    ASSERT_NE(cluster, nullptr);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SequenceRequest r;
      r.prompt = prompts[i];
      r.params = params;
      auto h = cluster->scheduler().submit(r);
      ASSERT_TRUE(h.ok()) << h.status();
      Outcome o = drain(*h);
      ASSERT_TRUE(o.status.ok()) << o.status;
      EXPECT_EQ(o.all_ids, expected[i].ids) << "prompt " << i;
      EXPECT_EQ(o.ids, o.all_ids);
      EXPECT_EQ(o.text, o.all_text);
      EXPECT_EQ(o.all_text, expected[i].text);
      EXPECT_EQ(o.finish, expected[i].finish);
    }
  }
}

// With a repeat penalty the last stage samples from the downloaded row;
// without one, from the backend's top-k candidates (Logits::kTopK); both
// draw the one-process loop's tokens.
TEST_F(SchedulerPipelineTest, SeededSamplingAndStopsMatchTheOneProcessLoop) {
  Reference ref(stories());
  auto cluster = start(2);
  ASSERT_NE(cluster, nullptr);
  for (const float repeat_penalty : {1.1f, 1.0f}) {
    SCOPED_TRACE(repeat_penalty);
    GenerationParams params;
    params.max_tokens = 40;
    params.sampling.temperature = 0.9f;
    params.sampling.top_k = 40;
    params.sampling.top_p = 0.95f;
    params.sampling.repeat_penalty = repeat_penalty;
    params.sampling.seed = 1234;
    params.stop = {"5>"};  // the first id ending in 5
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
    const GenerationResult expected = ref.run(prompt, params);
    SequenceRequest r;
    r.prompt = prompt;
    r.params = params;
    Outcome o = drain(*cluster->scheduler().submit(r));
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.all_ids, expected.ids);
    EXPECT_EQ(o.all_text, expected.text);
    EXPECT_EQ(o.finish, expected.finish);
  }
}

TEST_F(SchedulerPipelineTest, ManyConcurrentSequencesAllCompleteCorrectly) {
  Reference ref(stories());
  constexpr int kRequests = 12;  // more than max_sequences: some wait
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerationParams> params(kRequests);
  std::vector<GenerationResult> expected;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(3 + 17 * i % 90, 100 + i));
    params[i].max_tokens = 8 + 3 * i;
    params[i].ignore_eos = true;
    expected.push_back(ref.run(prompts[i], params[i]));
  }
  auto cluster = start(3, {}, /*max_sequences=*/8);
  ASSERT_NE(cluster, nullptr);
  std::vector<Outcome> outcomes(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      SequenceRequest r;
      r.prompt = prompts[i];
      r.params = params[i];
      auto h = cluster->scheduler().submit(r);
      if (!h.ok()) {
        outcomes[i].status = h.status();
        return;
      }
      outcomes[i] = drain(*h);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status;
    EXPECT_EQ(outcomes[i].all_ids, expected[i].ids) << "request " << i;
  }
  // Every sequence was freed on every stage (the counts are published
  // after the last event, once the scheduler freed what ended).
  cluster->scheduler().wait_stats(
      [&](const Scheduler::Stats& st) {
        return st.active == 0 && st.served == kRequests;
      },
      absl::FromChrono(kSafetyNet));
  const v1::ClusterStatusResponse status = cluster->status();
  EXPECT_EQ(status.active_sequences(), 0);
  EXPECT_EQ(status.requests_served(), static_cast<uint64_t>(kRequests));
}

TEST_F(SchedulerPipelineTest, RefusesBadRequests) {
  auto cluster = start(1);
  ASSERT_NE(cluster, nullptr);
  SequenceRequest r;
  EXPECT_EQ(cluster->scheduler().submit(r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.prompt = random_prompt(1025, 1);
  EXPECT_EQ(cluster->scheduler().submit(r).status().code(),
            absl::StatusCode::kOutOfRange);
  r.prompt = {1, 2};
  r.params.max_tokens = 0;
  EXPECT_EQ(cluster->scheduler().submit(r).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerPipelineTest, ContextEndIsLength) {
  SingleNodeOptions o;
  o.model = stories();
  o.workers = 2;
  o.context_length = 16;
  o.detokenizers = fake_detokenizer;
  auto cluster = make_single_node(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->wait_serving(absl::Seconds(60)).ok());
  SequenceRequest r;
  r.prompt = random_prompt(10, 3);
  r.params.max_tokens = 100;
  r.params.ignore_eos = true;
  Outcome out = drain(*(*cluster)->scheduler().submit(r));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.finish, FinishReason::kLength);
  EXPECT_EQ(out.all_ids.size(), 7u);  // positions 10 .. 15, then one more
}

// `strata status` of `strata serve`: each in-process stage reports the
// CPU and the tier its kernels run on, as a worker process does
// (it said "cpu (this process, , 1 threads)").
TEST_F(SchedulerPipelineTest, InProcessStagesReportTheirCpuAndTier) {
  SingleNodeOptions o;
  o.model = stories();
  o.workers = 2;
  o.detokenizers = fake_detokenizer;
  auto cluster = make_single_node(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->wait_serving(absl::Seconds(60)).ok());
  absl::StatusOr<std::optional<kernels::IsaTier>> isa = kernels::engine_isa();
  ASSERT_TRUE(isa.ok()) << isa.status();
  const std::string tier = isa->has_value() ? kernels::isa_name(**isa) : "reference";
  const v1::ClusterStatusResponse status = (*cluster)->status();
  ASSERT_EQ(status.workers_size(), 2);
  for (const auto& w : status.workers()) {
    EXPECT_NE(w.device().find(absl::StrCat(kernels::cpu_model_name(), ", this process, ",
                                           tier, ", ")),
              std::string::npos)
        << w.device();
  }
}

// A link whose micro-batches are answered by the test.
class FakeLink final : public worker::ActivationLink {
 public:
  explicit FakeLink(ResultCallback cb) : cb_(std::move(cb)) {}
  const std::string& peer() const override { return peer_; }
  absl::Status send(v1::MicroBatch batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    sent_.push_back(std::move(batch));
    cv_.notify_all();
    if (!cv_.wait_for(lock, kSafetyNet, [&] { return !held_; })) {
      ADD_FAILURE() << "send held and never released";
    }
    return absl::OkStatus();
  }
  bool healthy() const override { return true; }
  void close(const std::string&) override {}
  // While held, send() keeps the scheduler thread until release().
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // The next micro-batch the scheduler sent, as soon as it is sent.
  v1::MicroBatch wait_batch() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kSafetyNet, [&] { return !sent_.empty(); })) {
      ADD_FAILURE() << "no micro-batch sent";
      return {};
    }
    v1::MicroBatch b = std::move(sent_.front());
    sent_.pop_front();
    return b;
  }
  void answer(v1::MicroBatchResult r) { cb_(std::move(r)); }

 private:
  ResultCallback cb_;
  std::string peer_ = "worker fake";
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::MicroBatch> sent_;
  bool held_ = false;
};

// What the scheduler thread reports through its callbacks (FreeFn,
// on_broken), with waits that return as soon as it came.
class Reports {
 public:
  Scheduler::FreeFn free_fn() {
    return [this](std::span<const uint64_t> ids) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        freed_.insert(freed_.end(), ids.begin(), ids.end());
      }
      cv_.notify_all();
    };
  }
  Scheduler::BrokenFn broken_fn() {
    return [this](const absl::Status&) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++broken_;
      }
      cv_.notify_all();
    };
  }
  // The ids freed so far, once there are at least `n`.
  std::vector<uint64_t> wait_freed(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kSafetyNet, [&] { return freed_.size() >= n; });
    return freed_;
  }
  std::vector<uint64_t> freed() {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_;
  }
  // How often on_broken ran, once it ran at least `n` times.
  int wait_broken(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kSafetyNet, [&] { return broken_ >= n; });
    return broken_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> freed_;
  int broken_ = 0;
};

TEST(Scheduler, BrokenPipelineFailsEveryRequestAndANewLinkServes) {
  SchedulerOptions so;
  so.n_ctx = 64;
  so.max_in_flight = 2;
  Reports reports;
  Scheduler s(so, [] { return std::make_unique<CountingDetokenizer>(); },
              reports.free_fn());
  s.set_on_broken(reports.broken_fn());
  SequenceRequest r;
  r.prompt = {5, 6, 7};
  r.params.max_tokens = 3;
  EXPECT_EQ(s.submit(r).status().code(), absl::StatusCode::kUnavailable);

  auto link = std::make_unique<FakeLink>(s.result_callback());
  FakeLink* fake = link.get();
  s.attach(std::move(link), 77);
  auto a = s.submit(r);
  auto b = s.submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  // The prompts travel as slices of one micro-batch (or of two, when the
  // scheduler's thread sent the first before the second was submitted),
  // with the shard id and sampling params at start_pos 0.
  std::vector<v1::MicroBatch> prompts;
  for (int slices = 0; slices < 2;) {
    prompts.push_back(fake->wait_batch());
    ASSERT_GE(prompts.back().slices_size(), 1);
    slices += prompts.back().slices_size();
  }
  ASSERT_LE(prompts.size(), 2u);
  for (const v1::MicroBatch& batch : prompts) {
    EXPECT_EQ(batch.shard_id(), 77u);
    for (const auto& slice : batch.slices()) {
      EXPECT_EQ(slice.start_pos(), 0);
      EXPECT_TRUE(slice.sample());
      EXPECT_TRUE(slice.has_sampling());
      EXPECT_EQ(slice.tokens_size(), 3);
    }
  }
  // Sample a token for each: two decode steps follow, spread over the two
  // micro-batches in flight.
  for (const v1::MicroBatch& batch : prompts) {
    v1::MicroBatchResult res;
    res.set_batch_id(batch.batch_id());
    for (const auto& slice : batch.slices()) {
      v1::SampledToken* t = res.add_tokens();
      t->set_seq_id(slice.seq_id());
      t->set_id(42);
    }
    fake->answer(res);
  }
  v1::MicroBatch d1 = fake->wait_batch();
  v1::MicroBatch d2 = fake->wait_batch();
  EXPECT_EQ(d1.slices_size(), 1);
  EXPECT_EQ(d2.slices_size(), 1);
  EXPECT_EQ(d1.slices(0).start_pos(), 3);
  EXPECT_EQ(d1.slices(0).tokens(0), 42);
  EXPECT_FALSE(d1.slices(0).has_sampling());
  // The first stage's link dies.
  v1::MicroBatchResult dead;
  dead.set_batch_id(d1.batch_id());
  dead.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
  dead.set_error_message("worker w1 (127.0.0.1:1): connection lost");
  fake->answer(dead);
  for (auto* h : {&*a, &*b}) {
    Outcome o = drain(*h);
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(o.status.message().find("worker w1"), std::string::npos);
    EXPECT_EQ(o.ids, std::vector<int32_t>({42}));  // streamed before
  }
  // on_broken runs on the scheduler thread after the requests are failed.
  EXPECT_EQ(reports.wait_broken(1), 1);
  auto refused = s.submit(r);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("worker w1"), std::string::npos);

  // Back: a new link serves a request to its end (EOG id 0 ends it).
  auto link2 = std::make_unique<FakeLink>(s.result_callback());
  FakeLink* fake2 = link2.get();
  s.attach(std::move(link2), 78);
  auto c = s.submit(r);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::MicroBatch p = fake2->wait_batch();
  EXPECT_EQ(p.shard_id(), 78u);
  v1::MicroBatchResult ok;
  ok.set_batch_id(p.batch_id());
  v1::SampledToken* t = ok.add_tokens();
  t->set_seq_id(p.slices(0).seq_id());
  t->set_id(0);
  fake2->answer(ok);
  Outcome o = drain(*c);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_TRUE(o.all_ids.empty());
  EXPECT_EQ(reports.wait_freed(1), std::vector<uint64_t>({(*c)->seq_id()}));
}

TEST(Scheduler, SequenceIdsAreDistinctAndNotACounter) {
  // Workers name sequences by these ids: a peer must not guess another
  // user's (worker.proto FreeSequence, restarts at start_pos 0).
  SchedulerOptions so;
  so.n_ctx = 64;
  so.max_queued = 1000;
  std::vector<uint64_t> first;
  for (int run = 0; run < 2; ++run) {
    Scheduler s(so, [] { return std::make_unique<CountingDetokenizer>(); }, nullptr);
    s.attach(std::make_unique<FakeLink>(s.result_callback()), 9);
    SequenceRequest r;
    r.prompt = {5};
    std::vector<uint64_t> ids;
    for (int i = 0; i < 200; ++i) {
      auto h = s.submit(r);
      ASSERT_TRUE(h.ok()) << h.status();
      ids.push_back((*h)->seq_id());
    }
    std::vector<uint64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
    EXPECT_EQ(sorted.front() == 0, false);
    int steps_of_one = 0;
    for (size_t i = 1; i < ids.size(); ++i) steps_of_one += ids[i] - ids[i - 1] == 1;
    EXPECT_LT(steps_of_one, 3);
    first.push_back(ids[0]);
  }
  EXPECT_NE(first[0], first[1]);  // another key per scheduler
}

TEST(Scheduler, LongPromptsFollowInChunksAndCancelFrees) {
  SchedulerOptions so;
  so.n_ctx = 4096;
  so.max_in_flight = 3;
  so.prefill_chunk = 512;
  Reports reports;
  Scheduler s(so, [] { return std::make_unique<CountingDetokenizer>(); },
              reports.free_fn());
  auto link = std::make_unique<FakeLink>(s.result_callback());
  FakeLink* fake = link.get();
  s.attach(std::move(link), 5);
  SequenceRequest r;
  r.prompt.assign(1300, 9);
  auto h = s.submit(r);
  ASSERT_TRUE(h.ok());
  // Three chunks (512, 512, 276) in flight at once, without waiting.
  v1::MicroBatch c[3];
  for (auto& b : c) b = fake->wait_batch();
  EXPECT_EQ(c[0].slices(0).start_pos(), 0);
  EXPECT_EQ(c[1].slices(0).start_pos(), 512);
  EXPECT_EQ(c[2].slices(0).start_pos(), 1024);
  EXPECT_EQ(c[2].slices(0).tokens_size(), 276);
  EXPECT_FALSE(c[0].slices(0).sample());
  EXPECT_TRUE(c[2].slices(0).sample());
  s.cancel((*h)->seq_id());
  Outcome o = drain(*h);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kCancelled);
  // Freed only when its last micro-batch came back.
  for (auto& b : c) {
    EXPECT_TRUE(reports.freed().empty());
    v1::MicroBatchResult res;
    res.set_batch_id(b.batch_id());
    if (b.slices(0).sample()) {
      res.add_tokens()->set_seq_id(b.slices(0).seq_id());
    }
    fake->answer(res);
  }
  EXPECT_EQ(reports.wait_freed(1), std::vector<uint64_t>({(*h)->seq_id()}));
  // The counts are published after the free.
  const Scheduler::Stats st = s.wait_stats(
      [](const Scheduler::Stats& now) { return now.active == 0; },
      absl::FromChrono(kSafetyNet));
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.served, 0u);
}

// A request cancelled at once after its submission (an HTTP client that
// closes its connection right after sending) reaches the scheduler thread in
// the same round as the submission: it must end cancelled, not run.
TEST(Scheduler, CancelInTheSameRoundAsTheSubmissionEndsTheRequest) {
  SchedulerOptions so;
  so.n_ctx = 256;
  so.max_in_flight = 2;
  Reports reports;
  Scheduler s(so, [] { return std::make_unique<CountingDetokenizer>(); },
              reports.free_fn());
  auto link = std::make_unique<FakeLink>(s.result_callback());
  FakeLink* fake = link.get();
  s.attach(std::move(link), 5);
  SequenceRequest r;
  r.prompt.assign(20, 9);
  r.params.max_tokens = 4;
  // The scheduler thread stays in send() with the first request's prompt
  // while the second is submitted and cancelled.
  fake->hold();
  auto first = s.submit(r);
  ASSERT_TRUE(first.ok());
  const v1::MicroBatch a = fake->wait_batch();
  ASSERT_EQ(a.slices_size(), 1);
  EXPECT_EQ(a.slices(0).seq_id(), (*first)->seq_id());
  auto second = s.submit(r);
  ASSERT_TRUE(second.ok());
  s.cancel((*second)->seq_id());
  fake->release();
  Outcome o = drain(*second);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kCancelled) << o.status;
  // The first request goes on undisturbed, and nothing of the second's was
  // ever sent.
  v1::MicroBatchResult res;
  res.set_batch_id(a.batch_id());
  v1::SampledToken* t = res.add_tokens();
  t->set_seq_id((*first)->seq_id());
  t->set_id(42);  // not the end of generation (0)
  fake->answer(res);
  const v1::MicroBatch next = fake->wait_batch();
  ASSERT_EQ(next.slices_size(), 1);
  EXPECT_EQ(next.slices(0).seq_id(), (*first)->seq_id());
  s.cancel((*first)->seq_id());
  EXPECT_EQ(drain(*first).status.code(), absl::StatusCode::kCancelled);
}

// Migration over real stages: stories260K's pipelines loaded afresh, one
// after the other, each under its own shard id (epoch).
std::vector<std::unique_ptr<worker::Stage>> load_stages(
    uint64_t shard_id, const std::vector<placement::Range>& ranges,
    int max_sequences) {
  std::vector<std::unique_ptr<worker::Stage>> stages;
  for (size_t k = 0; k < ranges.size(); ++k) {
    v1::LoadShardRequest r;
    r.set_shard_id(shard_id);
    r.set_model_path(stories());
    r.set_first_block(ranges[k].first);
    r.set_last_block(ranges[k].last);
    r.set_embedding(ranges[k].first == 0);
    r.set_head(k + 1 == ranges.size());
    r.set_n_ctx(1024);
    r.set_max_sequences(max_sequences);
    r.set_max_batch_rows(512 + max_sequences);
    r.set_kv_type("f16");
    if (k + 1 < ranges.size()) r.set_next_stage("in-process:1");
    worker::StageOptions o;
    o.worker_name = "stage " + std::to_string(k);
    auto stage = worker::load_stage(r, 1, o);
    EXPECT_TRUE(stage.ok()) << stage.status();
    if (!stage.ok()) return {};
    stages.push_back(*std::move(stage));
  }
  return stages;
}

// An in-process chain that dies: its `fail_at`-th result (1-based) is
// replaced by UNAVAILABLE naming a worker, and the results after it still
// reach the scheduler (a zombie pipeline's frames), which must drop them.
class DyingLink final : public worker::ActivationLink {
 public:
  DyingLink(const std::vector<std::unique_ptr<worker::Stage>>& stages,
            ResultCallback cb, int fail_at)
      : cb_(std::move(cb)), fail_at_(fail_at) {
    std::vector<worker::Stage*> raw;
    for (const auto& s : stages) raw.push_back(s.get());
    inner_ = worker::make_in_process_chain(
        raw, [this](v1::MicroBatchResult r) { on_result(std::move(r)); });
  }
  ~DyingLink() override { close(worker::kLinkClosed); }
  const std::string& peer() const override { return inner_->peer(); }
  absl::Status send(v1::MicroBatch batch) override {
    return inner_->send(std::move(batch));
  }
  bool healthy() const override { return inner_->healthy(); }
  void close(const std::string& reason) override { inner_->close(reason); }

 private:
  void on_result(v1::MicroBatchResult r) {
    const int n = ++results_;
    if (n == fail_at_) {
      v1::MicroBatchResult dead;
      dead.set_batch_id(r.batch_id());
      dead.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
      dead.set_error_message("worker w1 (in-process): connection lost");
      cb_(std::move(dead));
      return;
    }
    cb_(std::move(r));
  }

  ResultCallback cb_;
  int fail_at_;
  std::atomic<int> results_{0};
  std::unique_ptr<worker::ActivationLink> inner_;
};

class MigrationTest : public SchedulerPipelineTest {};

TEST_F(MigrationTest, RequestsFinishOnTheNextPipelinesWithUndisturbedTokens) {
  Reference ref(stories());
  struct Case {
    std::vector<int32_t> prompt;
    GenerationParams params;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i) {
    Case c;
    c.prompt = random_prompt(i == 2 ? 600 : 5 + 17 * i, 100 + i);
    c.params.max_tokens = 30 + 3 * i;
    if (i % 2 == 0) {
      c.params.ignore_eos = true;  // greedy
    } else {
      c.params.sampling.temperature = 0.8f;
      c.params.sampling.top_k = 40;
      c.params.sampling.top_p = 0.9f;
      c.params.sampling.repeat_penalty = 1.15f;
      c.params.sampling.frequency_penalty = 0.2f;
      c.params.sampling.seed = 77 + i;
      c.params.ignore_eos = true;
    }
    cases.push_back(c);
  }
  std::vector<GenerationResult> expected;
  for (const Case& c : cases) expected.push_back(ref.run(c.prompt, c.params));

  // Declared before the scheduler: they outlive the links it holds.
  std::vector<std::unique_ptr<worker::Stage>> a = load_stages(101, {{0, 2}, {2, 5}}, 8);
  std::vector<std::unique_ptr<worker::Stage>> b = load_stages(202, {{0, 4}, {4, 5}}, 8);
  std::vector<std::unique_ptr<worker::Stage>> c = load_stages(303, {{0, 5}}, 8);
  ASSERT_FALSE(a.empty() || b.empty() || c.empty());
  SchedulerOptions so;
  so.n_ctx = 1024;
  so.max_sequences = 8;
  so.max_in_flight = 2;
  so.max_migrations = 3;
  Reports reports;
  Scheduler s(so, fake_detokenizer, reports.free_fn());
  s.set_on_broken(reports.broken_fn());
  s.attach(std::make_unique<DyingLink>(a, s.result_callback(101), 9), 101);
  std::vector<std::shared_ptr<SequenceHandle>> handles;
  for (const Case& k : cases) {
    SequenceRequest r;
    r.prompt = k.prompt;
    r.params = k.params;
    auto h = s.submit(r);
    ASSERT_TRUE(h.ok()) << h.status();
    handles.push_back(*h);
  }
  // The first pipeline dies; the requests wait (a new one is accepted
  // meanwhile), then go on over another split, which dies in turn.
  EXPECT_EQ(reports.wait_broken(1), 1);
  EXPECT_TRUE(s.wait_stats([](const Scheduler::Stats& st) { return st.recovering; },
                           absl::FromChrono(kSafetyNet)).recovering);
  SequenceRequest late;
  late.prompt = cases[0].prompt;
  late.params = cases[0].params;
  auto h_late = s.submit(late);
  ASSERT_TRUE(h_late.ok()) << h_late.status();
  s.attach(std::make_unique<DyingLink>(b, s.result_callback(202), 14), 202);
  EXPECT_EQ(reports.wait_broken(2), 2);
  s.attach(std::make_unique<DyingLink>(c, s.result_callback(303), -1), 303);
  for (size_t i = 0; i < handles.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    Outcome o = drain(handles[i]);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.all_ids, expected[i].ids);
    EXPECT_EQ(o.ids, o.all_ids);  // streamed once each, in order
    EXPECT_EQ(o.text, o.all_text);
    EXPECT_EQ(o.all_text, expected[i].text);
  }
  Outcome o = drain(*h_late);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.all_ids, expected[0].ids);
  const Scheduler::Stats st = s.wait_stats(
      [](const Scheduler::Stats& now) { return now.active == 0; },
      absl::FromChrono(kSafetyNet));
  EXPECT_GE(st.migrated, 6u);  // every request moved at least once
  EXPECT_EQ(st.served, 7u);
}

TEST_F(MigrationTest, NoPipelineInTimeEndsTheRequestsCleanly) {
  std::vector<std::unique_ptr<worker::Stage>> a = load_stages(101, {{0, 2}, {2, 5}}, 8);
  ASSERT_FALSE(a.empty());
  SchedulerOptions so;
  so.n_ctx = 1024;
  so.max_in_flight = 2;
  so.max_migrations = 3;
  so.migration_timeout_ms = 300;
  Reports reports;
  Scheduler s(so, fake_detokenizer, reports.free_fn());
  s.set_on_broken(reports.broken_fn());
  s.attach(std::make_unique<DyingLink>(a, s.result_callback(101), 3), 101);
  SequenceRequest r;
  r.prompt = random_prompt(20, 5);
  r.params.max_tokens = 50;
  r.params.ignore_eos = true;
  auto h = s.submit(r);
  ASSERT_TRUE(h.ok()) << h.status();
  Outcome o = drain(*h);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(o.status.message().find("worker w1"), std::string::npos) << o.status;
  EXPECT_NE(o.status.message().find("no new pipeline within 300 ms"), std::string::npos)
      << o.status;
  // Then new requests are refused at once, naming the cause.
  auto refused = s.submit(r);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata::coordinator
