// FrameUpstream (worker/frame_upstream.h), the receiving side of the frame
// link, over the in-memory transport, in front of the last stage of
// stories260K split at block 2 (the first stage runs here, as the previous
// worker would): micro-batches run and their results come back in order
// with the whole chain's tokens; the previous stage's close frame ends the
// link in order; bytes that are not a frame, or a frame beyond the shard's
// limits, end it saying why; close() ends a join that waits for a peer.
#include "worker/frame_upstream.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/worker/in_memory_transport.h"
#include "tests/worker/worker_test_util.h"
#include "worker/frame_link.h"

namespace strata::worker_test {
namespace {

using Clock = std::chrono::steady_clock;

class FrameUpstreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(stories_path())) GTEST_SKIP() << stories_path() << " absent (../shared/models)";
    stages_ = load_split(stories_path(), {2});
    ASSERT_EQ(stages_.size(), 2u);
    relay_ = std::make_unique<worker::StageRelay>(*stages_[1], "worker w1", nullptr);
    transport_ = std::make_shared<InMemoryTransport>();
    // As NCCL between two GPUs of one host: an abort is never heard of by
    // the other rank; what it learns, it learns from a close frame.
    transport_->set_silent_aborts(true);
    ids_.forward = *transport_->make_id();
    ids_.results = *transport_->make_id();
    n_embd_ = static_cast<uint32_t>(stages_[1]->shard().n_embd());
  }
  void TearDown() override {
    upstream_.reset();
    relay_.reset();
  }

  void start(std::chrono::milliseconds join_timeout = std::chrono::seconds(60),
             size_t max_owed = 256) {
    worker::FrameUpstreamOptions o;
    o.label = "worker w1: link from the previous stage (nccl)";
    o.join_timeout = join_timeout;
    o.max_owed = max_owed;
    o.n_embd = n_embd_;
    o.max_rows = static_cast<uint32_t>(stages_[1]->shard().max_batch_rows());
    upstream_ = std::make_unique<worker::FrameUpstream>(transport_, ids_, *relay_, o);
  }

  // Joins as the previous stage does (forward rank 0, results rank 1).
  void join() {
    auto f = transport_->join(ids_.forward, 0, std::chrono::seconds(60), nullptr,
                              worker::FrameLimits{worker::kMaxFrameRows});
    ASSERT_TRUE(f.ok()) << f.status();
    forward_ = *std::move(f);
    auto r = transport_->join(ids_.results, 1, std::chrono::seconds(60), nullptr,
                              worker::FrameLimits{});
    ASSERT_TRUE(r.ok()) << r.status();
    results_ = *std::move(r);
  }

  // The close frame the upstream sent back when it ended: its reason
  // (waited for up to 60 s: the transport would never say it aborted).
  std::string told() {
    const auto until = Clock::now() + std::chrono::seconds(60);
    absl::StatusOr<worker::Frame> f =
        results_->recv([until]() -> std::optional<Clock::time_point> { return until; });
    if (!f.ok()) return absl::StrCat("no close frame: ", f.status().message());
    if (f->header.kind != worker::FrameKind::kClose) return "not a close frame";
    return worker::close_reason(*f);
  }

  // Waits (up to 60 s) until the upstream says why it ended.
  std::string ended() {
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (upstream_->ended().empty() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return upstream_->ended();
  }

  std::vector<std::unique_ptr<worker::Stage>> stages_;
  std::unique_ptr<worker::StageRelay> relay_;
  std::shared_ptr<InMemoryTransport> transport_;
  worker::FrameLinkIds ids_;
  uint32_t n_embd_ = 0;
  std::unique_ptr<worker::FrameUpstream> upstream_;
  std::unique_ptr<worker::FrameChannel> forward_, results_;
};

TEST_F(FrameUpstreamTest, MicroBatchesRunAndTheirResultsComeBackInOrder) {
  start();
  join();
  // Greedy decoding: the first stage here, the last through the upstream.
  const std::vector<std::unique_ptr<worker::Stage>> reference = load_split(stories_path(), {2});
  const std::vector<int32_t> want = chain_greedy(reference, stories_prompt(), 6);
  ASSERT_EQ(want.size(), 6u);
  std::vector<int32_t> got;
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() = slice(1, 0, stories_prompt());
  int pos = static_cast<int>(stories_prompt().size());
  for (int i = 0; i < 6; ++i) {
    batch.set_batch_id(static_cast<uint64_t>(i + 1));
    v1::MicroBatch next;
    v1::MicroBatchResult unused;
    ASSERT_TRUE(stages_[0]->run(batch, &next, &unused).ok());
    absl::StatusOr<worker::Frame> frame = worker::frame_micro_batch(next, n_embd_);
    ASSERT_TRUE(frame.ok()) << frame.status();
    ASSERT_TRUE(forward_->send(*frame).ok());
    absl::StatusOr<worker::Frame> answer = results_->recv();
    ASSERT_TRUE(answer.ok()) << answer.status();
    absl::StatusOr<v1::MicroBatchResult> r = worker::unframe_result(answer->header, answer->meta);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->batch_id(), static_cast<uint64_t>(i + 1));
    ASSERT_EQ(r->tokens_size(), 1) << r->error_message();
    got.push_back(r->tokens(0).id());
    batch.clear_slices();
    *batch.add_slices() = slice(1, pos++, {got.back()});
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(upstream_->received(), 6u);
  EXPECT_EQ(upstream_->ended(), "");
  // The previous stage's close frame: an orderly end.
  ASSERT_TRUE(forward_->send(worker::close_frame()).ok());
  EXPECT_EQ(ended(), "the previous stage closed the link");
}

TEST_F(FrameUpstreamTest, BytesThatAreNotAFrameEndTheLinkSayingWhy) {
  start();
  join();
  InMemoryTransport::Message garbage;
  garbage.header.assign(worker::kFrameHeaderBytes, 0x41);
  ASSERT_TRUE(send_raw(*forward_, std::move(garbage)).ok());
  EXPECT_NE(ended().find("magic"), std::string::npos) << upstream_->ended();
  EXPECT_EQ(upstream_->received(), 0u);
  // The previous stage's wait for a result ends with the reason.
  EXPECT_EQ(told(), upstream_->ended());
}

// Rows past the shard's max_batch_rows: refused from the header, before
// the payload is sized or the stage runs.
TEST_F(FrameUpstreamTest, AFrameBeyondTheShardsLimitsEndsTheLink) {
  start();
  join();
  worker::FrameHeader h;
  h.kind = worker::FrameKind::kMicroBatch;
  h.shard_id = kShardId;
  h.rows = static_cast<uint32_t>(stages_[1]->shard().max_batch_rows()) + 1;
  h.cols = n_embd_;
  auto bytes = worker::encode_frame_header(h);
  InMemoryTransport::Message m;
  m.header.assign(bytes.begin(), bytes.end());
  ASSERT_TRUE(send_raw(*forward_, std::move(m)).ok());
  EXPECT_NE(ended().find("frame rows: "), std::string::npos) << upstream_->ended();
  EXPECT_EQ(upstream_->received(), 0u);
  EXPECT_EQ(told(), upstream_->ended());
}

// The whole link: a previous stage whose frame link allows more rows than
// this shard takes (a misconfigured pair) sends one micro-batch too many
// rows. The upstream refuses it from the header and tells the link, whose
// pending micro-batch fails with that reason at once (its answer bound is
// an hour), naming this worker.
TEST_F(FrameUpstreamTest, TheSendingLinkHearsWhyTheLinkEnded) {
  start();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::MicroBatchResult> got;
  worker::FrameLinkOptions o;
  o.peer_name = "worker w1 (nccl)";
  o.n_embd = n_embd_;
  o.max_rows = worker::kMaxFrameRows;
  o.answer_timeout = std::chrono::hours(1);
  auto link = worker::make_frame_link(
      transport_, ids_,
      [&](v1::MicroBatchResult r) {
        std::lock_guard<std::mutex> lock(mu);
        got.push_back(std::move(r));
        cv.notify_all();
      },
      o);
  ASSERT_TRUE(link.ok()) << link.status();
  const int rows = stages_[1]->shard().max_batch_rows() + 1;
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  batch.set_batch_id(1);
  v1::SequenceSlice* s = batch.add_slices();
  s->set_seq_id(1);
  for (int i = 0; i < rows; ++i) s->add_tokens(1);
  batch.set_hidden(std::string(size_t{n_embd_} * rows * sizeof(float), '\0'));
  ASSERT_TRUE((*link)->send(batch).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return !got.empty(); }))
        << "no answer: the link did not hear why the far side ended it";
  }
  EXPECT_EQ(got[0].batch_id(), 1u);
  EXPECT_EQ(got[0].error_code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_NE(got[0].error_message().find("worker w1 (nccl): the far side ended the link: frame rows: "),
            std::string::npos)
      << got[0].error_message();
  EXPECT_NE(ended().find("frame rows: "), std::string::npos) << upstream_->ended();
  EXPECT_EQ(upstream_->received(), 0u);
  (*link)->close(worker::kLinkClosed);
  EXPECT_EQ(got.size(), 1u);  // answered once
}

// The next stage's link of a middle stage: answers the first micro-batch
// from its own thread (as a link's reader does) and holds the rest, which
// close() fails.
class FirstAnsweredLink final : public worker::ActivationLink {
 public:
  explicit FirstAnsweredLink(ResultCallback on_result) : on_result_(std::move(on_result)) {}
  ~FirstAnsweredLink() override { close(worker::kLinkClosed); }
  const std::string& peer() const override { return peer_; }
  absl::Status send(v1::MicroBatch batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    v1::MicroBatchResult r;
    r.set_batch_id(batch.batch_id());
    r.set_shard_id(batch.shard_id());
    if (!answering_.joinable()) {
      answering_ = std::thread([this, r] { on_result_(r); });
    } else {
      held_.push_back(r);
    }
    return absl::OkStatus();
  }
  bool healthy() const override { return true; }
  void close(const std::string& reason) override {
    std::vector<v1::MicroBatchResult> held;
    std::thread answering;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
      answering.swap(answering_);
    }
    if (answering.joinable()) answering.join();
    for (v1::MicroBatchResult& r : held) {
      r.set_error_code(static_cast<int>(absl::StatusCode::kUnavailable));
      r.set_error_message(reason);
      on_result_(r);
    }
  }

 private:
  const std::string peer_ = "worker w2";
  ResultCallback on_result_;
  std::mutex mu_;
  std::thread answering_;
  std::vector<v1::MicroBatchResult> held_;
};

// A previous stage that sends and never reads, in front of a middle stage,
// over NCCL-like channels (a send waits for its receiver; aborts are
// silent): the first result's send (on the next link's thread) waits for
// ever, results pile up, and at max_owed the link ends. The close frame
// cannot go then (that send holds the results channel, and no one would
// read it): it is given up after a second, and the upstream aborts its
// channels, which frees the stuck send. (A close frame that waited for the
// channel would wait for that send, which waits for the abort.)
TEST_F(FrameUpstreamTest, APreviousStageThatNeverReadsEndsTheLinkAtTheOwedBound) {
  transport_->set_rendezvous(true);
  ids_.forward = *transport_->make_id();
  ids_.results = *transport_->make_id();
  // The first stage of the split as the middle stage here.
  worker::StageRelay middle(*stages_[0], "worker w1", [](worker::ActivationLink::ResultCallback cb) {
    return absl::StatusOr<std::unique_ptr<worker::ActivationLink>>(
        std::make_unique<FirstAnsweredLink>(std::move(cb)));
  });
  worker::FrameUpstreamOptions o;
  o.label = "worker w1: link from the previous stage (nccl)";
  o.n_embd = n_embd_;
  o.max_owed = 3;
  upstream_ = std::make_unique<worker::FrameUpstream>(transport_, ids_, middle, o);
  join();
  // Four sequences' prompts, each a micro-batch: the fourth finds 3 owed.
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    v1::MicroBatch batch;
    batch.set_shard_id(kShardId);
    batch.set_batch_id(seq);
    *batch.add_slices() = slice(seq, 0, stories_prompt());
    absl::StatusOr<worker::Frame> frame = worker::frame_micro_batch(batch, n_embd_);
    ASSERT_TRUE(frame.ok()) << frame.status();
    ASSERT_TRUE(forward_->send(*frame).ok());  // taken by the upstream
  }
  EXPECT_NE(ended().find("3 results owed to the previous stage reach the bound of 3"),
            std::string::npos)
      << upstream_->ended();
  EXPECT_EQ(upstream_->received(), 3u);
  // Its results channel is aborted: it did not wait on the stuck send.
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (!transport_->left(ids_.results, 0) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(transport_->left(ids_.results, 0));
  EXPECT_TRUE(transport_->left(ids_.forward, 1));
  upstream_.reset();  // before the relay it borrows
}

// close() ends a join still waiting for the previous stage, without
// waiting out its bound; an end by close() is no failure.
TEST_F(FrameUpstreamTest, CloseEndsAJoinThatWaits) {
  start(std::chrono::hours(1));
  // Its half of the forward communicator joined, it waits for ours.
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (transport_->joined(ids_.forward) < 1 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(transport_->joined(ids_.forward), 1);
  upstream_->close();
  EXPECT_EQ(upstream_->ended(), "");
}

}  // namespace
}  // namespace strata::worker_test
