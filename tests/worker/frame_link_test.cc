// The frame link (worker/frame_link.h) over the in-memory transport
// (tests/worker/in_memory_transport.h): what the NCCL link between two GPU
// stages does, checked here without a GPU. Micro-batches reach the far side
// whole and in order and their results come back in order; a far side that
// never joins, never answers, leaves, answers out of order or sends bytes
// that are not a frame breaks the link, and every pending micro-batch gets
// that error naming the peer; close() tells the far side. Waits are on
// events; the timeouts that are the subject of a test are short.
#include "worker/frame_link.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/in_memory_transport.h"

namespace strata::worker_test {
namespace {

using worker::FrameChannel;
using worker::FrameLinkIds;
using worker::FrameLinkOptions;

constexpr uint32_t kEmbd = 48;

v1::MicroBatch micro_batch(uint64_t id, int rows, bool with_hidden = true) {
  v1::MicroBatch b;
  b.set_shard_id(7);
  b.set_batch_id(id);
  v1::SequenceSlice* s = b.add_slices();
  s->set_seq_id(id % 5);
  s->set_start_pos(static_cast<int>(id));
  for (int i = 0; i < rows; ++i) s->add_tokens(static_cast<int>(id) * 100 + i);
  s->set_sample(true);
  if (with_hidden) {
    std::vector<float> hidden(static_cast<size_t>(rows) * kEmbd);
    for (size_t i = 0; i < hidden.size(); ++i) {
      hidden[i] = static_cast<float>((i * 7919 + id) % 1013) * 0.25f - 100.0f;
    }
    b.set_hidden(std::string(reinterpret_cast<const char*>(hidden.data()),
                             hidden.size() * sizeof(float)));
  }
  return b;
}

// Results as the link's callback delivers them.
class Results {
 public:
  worker::ActivationLink::ResultCallback callback() {
    return [this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back(std::move(r));
      cv_.notify_all();
    };
  }
  // Waits for `n` results (a bound only against a hang).
  std::vector<v1::MicroBatchResult> wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return got_.size() >= n; }))
        << got_.size() << " of " << n << " results";
    return got_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::MicroBatchResult> got_;
};

// The next stage's side: joins both communicators as the far side does
// (forward rank 1, then results rank 0).
struct FarSide {
  std::unique_ptr<FrameChannel> forward, results;
  absl::Status join(InMemoryTransport& t, const FrameLinkIds& ids) {
    auto f = t.join(ids.forward, 1, std::chrono::seconds(60), nullptr,
                    worker::FrameLimits{worker::kMaxFrameRows, kEmbd});
    if (!f.ok()) return f.status();
    forward = std::move(*f);
    auto r = t.join(ids.results, 0, std::chrono::seconds(60), nullptr, worker::FrameLimits{});
    if (!r.ok()) return r.status();
    results = std::move(*r);
    return absl::OkStatus();
  }
};

class FrameLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = std::make_shared<InMemoryTransport>();
    ids_.forward = *transport_->make_id();
    ids_.results = *transport_->make_id();
    options_.peer_name = "worker w1 (nccl)";
    options_.n_embd = kEmbd;
  }
  std::unique_ptr<worker::ActivationLink> link() {
    auto l = worker::make_frame_link(transport_, ids_, results_.callback(), options_);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? *std::move(l) : nullptr;
  }

  std::shared_ptr<InMemoryTransport> transport_;
  FrameLinkIds ids_;
  FrameLinkOptions options_;
  Results results_;
};

// Every micro-batch arrives as it was sent (slices, tokens, activations bit
// for bit, a first-stage one without activations), in order; the far side
// answers each with its row count, and the answers come back in order.
TEST_F(FrameLinkTest, MicroBatchesArriveWholeAndResultsComeBackInOrder) {
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  std::vector<v1::MicroBatch> sent;
  for (uint64_t i = 1; i <= 40; ++i) {
    sent.push_back(micro_batch(i, static_cast<int>(i % 9) + 1, /*with_hidden=*/i % 10 != 3));
  }
  std::thread stage([&] {
    for (const v1::MicroBatch& want : sent) {
      absl::StatusOr<v1::MicroBatch> b = worker::receive_micro_batch(*far.forward);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->SerializeAsString(), want.SerializeAsString()) << "batch " << want.batch_id();
      v1::MicroBatchResult r;
      r.set_batch_id(b->batch_id());
      r.set_shard_id(b->shard_id());
      r.add_tokens()->set_id(b->slices(0).tokens_size());
      ASSERT_TRUE(worker::send_result(*far.results, r).ok());
    }
  });
  for (const v1::MicroBatch& b : sent) ASSERT_TRUE(l->send(b).ok());
  std::vector<v1::MicroBatchResult> got = results_.wait(sent.size());
  stage.join();
  ASSERT_EQ(got.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].batch_id(), sent[i].batch_id());
    EXPECT_EQ(got[i].error_code(), 0) << got[i].error_message();
    ASSERT_EQ(got[i].tokens_size(), 1);
    EXPECT_EQ(got[i].tokens(0).id(), sent[i].slices(0).tokens_size());
  }
  EXPECT_TRUE(l->healthy());
  // close() tells the far side: its next receive ends the link.
  l->close(worker::kLinkClosed);
  absl::StatusOr<v1::MicroBatch> end = worker::receive_micro_batch(*far.forward);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().message(), worker::kLinkClosed);
  EXPECT_FALSE(l->healthy());
}

// The link joins in the background: micro-batches sent before the far side
// joins wait in its queue and are answered once it has.
TEST_F(FrameLinkTest, MicroBatchesSentBeforeTheFarSideJoinsWaitForIt) {
  auto l = link();
  ASSERT_NE(l, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(l->send(micro_batch(i, 2)).ok());
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  for (uint64_t i = 1; i <= 3; ++i) {
    absl::StatusOr<v1::MicroBatch> b = worker::receive_micro_batch(*far.forward);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->batch_id(), i);
    v1::MicroBatchResult r;
    r.set_batch_id(i);
    ASSERT_TRUE(worker::send_result(*far.results, r).ok());
  }
  std::vector<v1::MicroBatchResult> got = results_.wait(3);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].batch_id(), i + 1);
    EXPECT_EQ(got[i].error_code(), 0) << got[i].error_message();
  }
}

// Pending micro-batches' results: each with `code`, its message naming the
// peer and containing `why`, in order; the link then refuses sends.
void expect_failed(worker::ActivationLink& l, Results& results, size_t n, int code,
                   const std::string& why) {
  std::vector<v1::MicroBatchResult> got = results.wait(n);
  ASSERT_EQ(got.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i].batch_id(), i + 1);
    EXPECT_EQ(got[i].error_code(), code) << got[i].error_message();
    EXPECT_NE(got[i].error_message().find("worker w1 (nccl): "), std::string::npos)
        << got[i].error_message();
    EXPECT_NE(got[i].error_message().find(why), std::string::npos) << got[i].error_message();
  }
  EXPECT_FALSE(l.healthy());
  absl::Status again = l.send(micro_batch(99, 1));
  EXPECT_EQ(again.code(), absl::StatusCode::kUnavailable) << again;
  // Once closed (its threads joined) it answered each exactly once.
  l.close(worker::kLinkClosed);
  EXPECT_EQ(results.wait(n).size(), n);
}

TEST_F(FrameLinkTest, AFarSideThatNeverJoinsFailsThePendingMicroBatches) {
  options_.join_timeout = std::chrono::milliseconds(50);
  auto l = link();
  ASSERT_NE(l, nullptr);
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 2)).ok());
  expect_failed(*l, results_, 2, static_cast<int>(absl::StatusCode::kDeadlineExceeded),
                "joining the forward communicator");
}

TEST_F(FrameLinkTest, AFarSideThatNeverAnswersFailsWithDeadlineExceeded) {
  options_.answer_timeout = std::chrono::milliseconds(100);
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(worker::receive_micro_batch(*far.forward).ok());  // and no answer
  expect_failed(*l, results_, 1, static_cast<int>(absl::StatusCode::kDeadlineExceeded),
                "no answer in time");
}

TEST_F(FrameLinkTest, AFarSideThatLeavesFailsThePendingMicroBatches) {
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 3)).ok());
  ASSERT_TRUE(worker::receive_micro_batch(*far.forward).ok());
  far.results.reset();  // the process died
  far.forward.reset();
  expect_failed(*l, results_, 2, static_cast<int>(absl::StatusCode::kUnavailable),
                "the other rank left");
}

// A far side that ends the link on a failure says why in a close frame on
// the results communicator, then aborts; as between two GPUs of one host,
// the abort itself is never heard of (silent aborts). The pending
// micro-batches fail with its reason at once, not when the oldest is
// overdue (the answer bound here is an hour; Results::wait gives up after
// a minute).
TEST_F(FrameLinkTest, AFarSideThatEndsTheLinkSaysWhy) {
  transport_->set_silent_aborts(true);
  ids_.forward = *transport_->make_id();
  ids_.results = *transport_->make_id();
  options_.answer_timeout = std::chrono::hours(1);
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 2)).ok());
  ASSERT_TRUE(worker::receive_micro_batch(*far.forward).ok());
  ASSERT_TRUE(far.results->send(worker::close_frame("NCCL frame: magic: expected 0x4c434e53"))
                  .ok());
  far.results->abort();
  far.forward->abort();
  expect_failed(*l, results_, 2, static_cast<int>(absl::StatusCode::kUnavailable),
                "the far side ended the link: NCCL frame: magic: expected 0x4c434e53");
}

TEST_F(FrameLinkTest, AResultOutOfOrderBreaksTheLink) {
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 2)).ok());
  v1::MicroBatchResult r;
  r.set_batch_id(2);  // batch 1's answer is owed first
  ASSERT_TRUE(worker::send_result(*far.results, r).ok());
  expect_failed(*l, results_, 2, static_cast<int>(absl::StatusCode::kUnavailable),
                "result for batch 2, expected 1");
}

// Bytes that are not a frame (a wrong magic; a header whose sizes
// disagree with what follows; a micro-batch frame where a result belongs)
// break the link naming what was wrong, and nothing is delivered as a
// result.
TEST_F(FrameLinkTest, BytesThatAreNotAResultFrameBreakTheLink) {
  struct Case {
    const char* name;
    InMemoryTransport::Message message;
    const char* why;
  };
  std::vector<Case> cases;
  {
    absl::StatusOr<worker::Frame> f = worker::frame_result(v1::MicroBatchResult());
    auto h = worker::encode_frame_header(f->header);
    InMemoryTransport::Message m;
    m.header.assign(h.begin(), h.end());
    m.header[0] ^= 0xff;
    m.meta = f->meta;
    cases.push_back({"bad magic", m, "magic"});
  }
  {
    v1::MicroBatchResult res;
    res.set_batch_id(1);
    absl::StatusOr<worker::Frame> f = worker::frame_result(res);
    auto h = worker::encode_frame_header(f->header);
    InMemoryTransport::Message m;
    m.header.assign(h.begin(), h.end());
    m.meta = f->meta + "extra";  // more than the header says
    cases.push_back({"sizes", m, "differ from its header"});
  }
  {
    // A first stage's micro-batch (no payload): within the limits.
    absl::StatusOr<worker::Frame> f =
        worker::frame_micro_batch(micro_batch(1, 2, /*with_hidden=*/false), kEmbd);
    auto h = worker::encode_frame_header(f->header);
    InMemoryTransport::Message m;
    m.header.assign(h.begin(), h.end());
    m.meta = f->meta;
    cases.push_back({"micro-batch", m, "a micro-batch frame on the results communicator"});
  }
  {
    // 4096 rows of 65536 (1 GiB), within the format's bounds but not this
    // channel's: refused from the header, before anything is sized.
    worker::FrameHeader h;
    h.kind = worker::FrameKind::kMicroBatch;
    h.rows = worker::kMaxFrameRows;
    h.cols = worker::kMaxFrameCols;
    auto bytes = worker::encode_frame_header(h);
    InMemoryTransport::Message m;
    m.header.assign(bytes.begin(), bytes.end());
    cases.push_back({"over the limits", m, "frame rows: 4096 exceed this link's 0"});
  }
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    SetUp();
    Results results;
    auto l = worker::make_frame_link(transport_, ids_, results.callback(), options_);
    ASSERT_TRUE(l.ok()) << l.status();
    FarSide far;
    ASSERT_TRUE(far.join(*transport_, ids_).ok());
    ASSERT_TRUE((*l)->send(micro_batch(1, 2)).ok());
    ASSERT_TRUE(send_raw(*far.results, std::move(c.message)).ok());
    expect_failed(**l, results, 1, static_cast<int>(absl::StatusCode::kUnavailable), c.why);
  }
}

// close() while the link still waits for the far side to join returns
// without waiting out the join's bound; the pending micro-batch gets
// close's reason.
TEST_F(FrameLinkTest, CloseWhileJoiningEndsTheJoin) {
  options_.join_timeout = std::chrono::hours(1);
  auto l = link();
  ASSERT_NE(l, nullptr);
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  l->close("worker w0 is stopping");
  std::vector<v1::MicroBatchResult> got = results_.wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].error_code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(got[0].error_message(), "worker w1 (nccl): worker w0 is stopping");
}

// A micro-batch wider or longer than the link's limits is refused by send()
// and the link goes on.
TEST_F(FrameLinkTest, AMicroBatchBeyondTheLinksLimitsIsRefusedAndTheLinkGoesOn) {
  options_.max_rows = 4;
  auto l = link();
  ASSERT_NE(l, nullptr);
  absl::Status st = l->send(micro_batch(1, 5));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("worker w1 (nccl): frame rows: 5 exceed this link's 4"),
            std::string::npos)
      << st;
  EXPECT_TRUE(l->healthy());
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 4)).ok());
  absl::StatusOr<v1::MicroBatch> b = worker::receive_micro_batch(*far.forward);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->batch_id(), 2u);
}

// Sends that return only once received (as NCCL's): a far side that stopped
// receiving does not hold close() (its close frame waits a second, then the
// channel is aborted); the micro-batch queued behind is answered with
// close's reason, not sent.
TEST_F(FrameLinkTest, CloseDoesNotWaitForAFarSideThatStoppedReceiving) {
  transport_->set_rendezvous(true);
  ids_.forward = *transport_->make_id();  // communicators that rendezvous
  ids_.results = *transport_->make_id();
  auto l = link();
  ASSERT_NE(l, nullptr);
  FarSide far;
  ASSERT_TRUE(far.join(*transport_, ids_).ok());
  ASSERT_TRUE(l->send(micro_batch(1, 2)).ok());
  ASSERT_TRUE(l->send(micro_batch(2, 2)).ok());
  ASSERT_TRUE(worker::receive_micro_batch(*far.forward).ok());  // then it stops
  l->close("worker w0 is stopping");
  std::vector<v1::MicroBatchResult> got = results_.wait(2);
  ASSERT_EQ(got.size(), 2u);
  for (const v1::MicroBatchResult& r : got) {
    EXPECT_EQ(r.error_message(), "worker w1 (nccl): worker w0 is stopping");
  }
}

TEST(FrameLink, RefusesAMissingTransportOrWidth) {
  FrameLinkOptions o;
  o.n_embd = kEmbd;
  EXPECT_EQ(worker::make_frame_link(nullptr, {}, [](v1::MicroBatchResult) {}, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.n_embd = 0;
  EXPECT_EQ(worker::make_frame_link(std::make_shared<InMemoryTransport>(), {},
                                    [](v1::MicroBatchResult) {}, o)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::worker_test
