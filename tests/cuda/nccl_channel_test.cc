// NCCL channels (worker/nccl_channel.h) on a GPU. What one GPU can test: a
// communicator of one rank sending frames to itself (header, meta, payload
// through device memory). The frame link (worker/frame_link.h) over NCCL
// between two stages needs two GPUs (NCCL refuses two ranks on one:
// "invalid usage"); its test skips, saying so, on fewer. Without a device
// every device test skips with cudaGetDeviceCount's error; the argument
// checks run anywhere. (The link's logic is tested on every machine over
// the in-memory transport: tests/worker/frame_link_test.cc.)
#include "worker/nccl_channel.h"

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/frame_link.h"

namespace strata::worker {
namespace {

// Devices present, or a skip message naming why none can be used.
int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device: cudaGetDeviceCount: ") +
           cudaGetErrorString(e);
    return 0;
  }
  if (n == 0) *why = "no CUDA device: cudaGetDeviceCount found 0";
  return n;
}

#define REQUIRE_DEVICES(n)                                                   \
  do {                                                                       \
    std::string why_;                                                        \
    const int have_ = device_count(&why_);                                   \
    if (have_ == 0) GTEST_SKIP() << why_;                                    \
    if (have_ < (n)) {                                                       \
      GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << have_ \
                   << ": NCCL refuses two ranks on one GPU (invalid usage)"; \
    }                                                                        \
  } while (0)

v1::MicroBatch micro_batch(uint64_t id, int rows, uint32_t cols) {
  v1::MicroBatch b;
  b.set_shard_id(11);
  b.set_batch_id(id);
  v1::SequenceSlice* s = b.add_slices();
  s->set_seq_id(1);
  s->set_start_pos(0);
  for (int i = 0; i < rows; ++i) s->add_tokens(i + 1);
  s->set_sample(true);
  std::vector<float> hidden(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < hidden.size(); ++i) {
    hidden[i] = static_cast<float>(i % 977) * 0.5f - 100.0f;
  }
  b.set_hidden(std::string(reinterpret_cast<const char*>(hidden.data()),
                           hidden.size() * sizeof(float)));
  return b;
}

TEST(NcclLink, OneRankSendsFramesToItself) {
  REQUIRE_DEVICES(1);
  absl::StatusOr<NcclId> id = make_nccl_id();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclChannel>> ch =
      NcclChannel::join(*id, 1, 0);
  ASSERT_TRUE(ch.ok()) << ch.status();

  // A micro-batch with activations, then a larger one (the staging buffers
  // grow), then a first-stage one with none, a result and the close frame.
  for (const auto& [rows, cols] :
       std::vector<std::pair<int, uint32_t>>{{5, 64}, {512, 4096}, {0, 64}}) {
    v1::MicroBatch b = micro_batch(static_cast<uint64_t>(rows) + 1,
                                   rows == 0 ? 3 : rows, cols);
    if (rows == 0) b.clear_hidden();
    absl::StatusOr<Frame> f = frame_micro_batch(b, cols);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<Frame> back = (*ch)->exchange_with_self(*f);
    ASSERT_TRUE(back.ok()) << back.status();
    absl::StatusOr<v1::MicroBatch> got =
        unframe_micro_batch(back->header, back->meta, back->payload);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->SerializeAsString(), b.SerializeAsString())
        << rows << " x " << cols;
  }
  v1::MicroBatchResult r;
  r.set_batch_id(9);
  r.set_shard_id(11);
  r.add_tokens()->set_id(1234);
  absl::StatusOr<Frame> rf = frame_result(r);
  ASSERT_TRUE(rf.ok()) << rf.status();
  absl::StatusOr<Frame> rback = (*ch)->exchange_with_self(*rf);
  ASSERT_TRUE(rback.ok()) << rback.status();
  absl::StatusOr<v1::MicroBatchResult> rgot =
      unframe_result(rback->header, rback->meta);
  ASSERT_TRUE(rgot.ok()) << rgot.status();
  EXPECT_EQ(rgot->tokens(0).id(), 1234);
  absl::StatusOr<Frame> cback = (*ch)->exchange_with_self(close_frame());
  ASSERT_TRUE(cback.ok()) << cback.status();
  EXPECT_EQ(cback->header.kind, FrameKind::kClose);
  EXPECT_EQ(close_reason(*cback), "");
  // A close frame that says why the link ends: its reason crosses as meta.
  absl::StatusOr<Frame> why = (*ch)->exchange_with_self(close_frame("frame rows: 65 exceed 64"));
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_EQ(why->header.kind, FrameKind::kClose);
  EXPECT_EQ(close_reason(*why), "frame rows: 65 exceed 64");
}

TEST(NcclLink, AbortedChannelFailsAtOnce) {
  REQUIRE_DEVICES(1);
  absl::StatusOr<NcclId> id = make_nccl_id();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<NcclChannel>> ch =
      NcclChannel::join(*id, 1, 0);
  ASSERT_TRUE(ch.ok()) << ch.status();
  (*ch)->abort();
  absl::StatusOr<Frame> f = (*ch)->exchange_with_self(close_frame());
  // The header round may complete before the flag is seen; what matters is
  // that it returns.
  if (!f.ok()) {
    EXPECT_EQ(f.status().code(), absl::StatusCode::kUnavailable);
  }
}

// Two stages, one GPU each: micro-batches forward, results back, close.
// This side is the frame link over the NCCL transport of GPU 0 (it joins
// in its writer thread); the far side joins on GPU 1 as FrameUpstream does.
TEST(NcclLink, TwoStagesOnTwoGpus) {
  REQUIRE_DEVICES(2);
  std::shared_ptr<FrameTransport> transport =
      make_nccl_transport(0, std::chrono::seconds(30));
  absl::StatusOr<NcclId> fwd_id = transport->make_id();
  absl::StatusOr<NcclId> res_id = transport->make_id();
  ASSERT_TRUE(fwd_id.ok() && res_id.ok());

  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::MicroBatchResult> results;
  FrameLinkOptions lo;
  lo.peer_name = "worker far (nccl)";
  lo.n_embd = 64;
  absl::StatusOr<std::unique_ptr<ActivationLink>> link = make_frame_link(
      transport, FrameLinkIds{*fwd_id, *res_id},
      [&](v1::MicroBatchResult res) {
        std::lock_guard<std::mutex> lock(mu);
        results.push_back(std::move(res));
        cv.notify_all();
      },
      lo);
  ASSERT_TRUE(link.ok()) << link.status();
  NcclChannelOptions o;
  o.device = 1;
  auto far_fwd = NcclChannel::join(*fwd_id, 2, 1, o);
  ASSERT_TRUE(far_fwd.ok()) << far_fwd.status();
  auto far_res = NcclChannel::join(*res_id, 2, 0, o);
  ASSERT_TRUE(far_res.ok()) << far_res.status();
  // The far stage: echo each micro-batch's row count as a token.
  std::thread stage([&] {
    for (;;) {
      absl::StatusOr<v1::MicroBatch> b = receive_micro_batch(**far_fwd);
      if (!b.ok()) return;  // closed
      v1::MicroBatchResult res;
      res.set_batch_id(b->batch_id());
      res.set_shard_id(b->shard_id());
      res.add_tokens()->set_id(b->slices(0).tokens_size());
      if (!send_result(**far_res, res).ok()) return;
    }
  });
  for (uint64_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(
        (*link)->send(micro_batch(i, static_cast<int>(i * 3), 64)).ok());
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30),
                            [&] { return results.size() == 4; }));
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(results[i].batch_id(), i + 1);
    EXPECT_EQ(results[i].tokens(0).id(), static_cast<int>((i + 1) * 3));
  }
  (*link)->close(kLinkClosed);
  stage.join();
  EXPECT_FALSE((*link)->healthy());
}

// Argument checks: no device needed.
TEST(NcclLink, RefusesBadRanks) {
  NcclId id{};
  absl::StatusOr<std::unique_ptr<NcclChannel>> ch = NcclChannel::join(id, 3, 0);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  ch = NcclChannel::join(id, 2, 2);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), absl::StatusCode::kInvalidArgument);
  // The transport the worker uses refuses them as well, before any NCCL or
  // CUDA call (a link has two ranks: 0 and 1).
  const std::shared_ptr<FrameTransport> transport =
      make_nccl_transport(0, std::chrono::seconds(1));
  EXPECT_EQ(transport->name(), "nccl");
  for (int rank : {-1, 2}) {
    absl::StatusOr<std::unique_ptr<FrameChannel>> c =
        transport->join(LinkId{}, rank, std::chrono::seconds(1), nullptr, FrameLimits{});
    ASSERT_FALSE(c.ok()) << "rank " << rank;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
    EXPECT_NE(std::string(c.status().message()).find(absl::StrCat("rank ", rank, " of 2")),
              std::string::npos)
        << c.status();
  }
}

}  // namespace
}  // namespace strata::worker
