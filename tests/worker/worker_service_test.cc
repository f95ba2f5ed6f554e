// strata.v1.Worker served in this process (WorkerService on a loopback
// gRPC server, stories260K): LoadShard refuses the live shard's id and
// answers every path outside the model directories alike; a peer that
// sends micro-batches and never reads their results is cut, and the
// worker goes on serving others.
#include "worker/worker_service.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "grpcpp/grpcpp.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/worker/served_worker.h"
#include "tests/worker/worker_test_util.h"

namespace strata::worker_test {
namespace {

using Clock = std::chrono::steady_clock;

// Waits (up to 60 s) until `w` has cut `n` streams.
bool wait_for_cuts(ServedWorker& w, int n) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (w.service().stream_stats().cut < n) {
    if (Clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

class WorkerServiceTest : public StoriesWorkerTest {};

// The measured rates (strata-worker sets them at startup from
// kernels/cpu/machine_rates.h) come back in Describe for planning; none
// set: 0, unknown.
TEST_F(WorkerServiceTest, DescribeReportsTheMachineRates) {
  ServedWorker w("w0", model_dir_, 30000);
  const auto describe = [&w] {
    grpc::ClientContext context;
    v1::DescribeResponse d;
    EXPECT_TRUE(w.stub()->Describe(&context, v1::DescribeRequest(), &d).ok());
    return d;
  };
  EXPECT_EQ(describe().read_bandwidth_bytes_per_s(), 0);
  EXPECT_EQ(describe().flops_per_s(), 0);
  w.service().set_machine_rates(12.5e9, 3.5e11);
  const v1::DescribeResponse d = describe();
  EXPECT_DOUBLE_EQ(d.read_bandwidth_bytes_per_s(), 12.5e9);
  EXPECT_DOUBLE_EQ(d.flops_per_s(), 3.5e11);
  EXPECT_EQ(d.threads(), 1);
  EXPECT_EQ(d.memory_budget_bytes(), uint64_t{1} << 30);
  EXPECT_EQ(d.read_rates_size(), 0);
  std::vector<v1::ReadRate> rates(2);
  rates[0].set_working_set_bytes(uint64_t{18} << 20);
  rates[0].set_bytes_per_s(40e9);
  rates[1].set_working_set_bytes(uint64_t{126} << 20);
  rates[1].set_bytes_per_s(32e9);
  w.service().set_read_rates(rates);
  const v1::DescribeResponse p = describe();
  ASSERT_EQ(p.read_rates_size(), 2);
  EXPECT_EQ(p.read_rates(0).working_set_bytes(), uint64_t{18} << 20);
  EXPECT_DOUBLE_EQ(p.read_rates(0).bytes_per_s(), 40e9);
  EXPECT_EQ(p.read_rates(1).working_set_bytes(), uint64_t{126} << 20);
  EXPECT_DOUBLE_EQ(p.read_rates(1).bytes_per_s(), 32e9);
}

TEST_F(WorkerServiceTest, LoadShardRefusesTheLiveShardsId) {
  ServedWorker w("w0", model_dir_, 30000);
  v1::LoadShardRequest r =
      shard_request("stories260K.gguf", 0, n_layer_, n_layer_, 32, 4, 32);
  ASSERT_TRUE(w.load(r).ok());
  // The same id again (Health shows it to anyone): refused, the live shard
  // untouched.
  grpc::Status st = w.load(r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(st.error_message(),
            "worker w0: shard_id: 77 is the loaded shard's; a new shard needs "
            "a new shard_id");
  grpc::ClientContext context;
  v1::WorkerHealthResponse health;
  ASSERT_TRUE(
      w.stub()->Health(&context, v1::WorkerHealthRequest(), &health).ok());
  EXPECT_EQ(health.shard_id(), kShardId);
  EXPECT_EQ(health.state(), "serving");
  // A new id loads.
  r.set_shard_id(kShardId + 1);
  st = w.load(r);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(WorkerServiceTest,
       PathsOutsideTheModelDirsGetOneAnswerWhetherTheyExistOrNot) {
  ServedWorker w("w0", model_dir_, 30000);
  ASSERT_TRUE(std::filesystem::exists("/etc/passwd"));
  ASSERT_FALSE(std::filesystem::exists("/etc/strata-absent"));
  const std::string dirs = absl::StrCat("[", model_dir_, "]");
  // Pairs: a path that exists outside, one that does not.
  const std::pair<std::string, std::string> pairs[] = {
      {"/etc/passwd", "/etc/strata-absent"},
      {"../../../../../../../etc/passwd",
       "../../../../../../../etc/strata-absent"},
      {"/", "/strata-absent-dir/"},
  };
  for (const auto& [there, absent] : pairs) {
    v1::LoadShardRequest r =
        shard_request(there, 0, n_layer_, n_layer_, 32, 4, 32);
    const grpc::Status a = w.load(r);
    r.set_model_path(absent);
    const grpc::Status b = w.load(r);
    EXPECT_EQ(a.error_code(), grpc::StatusCode::PERMISSION_DENIED) << there;
    EXPECT_EQ(b.error_code(), a.error_code()) << absent;
    EXPECT_EQ(a.error_message(),
              absl::StrCat("worker w0: model_path: ", there,
                           " is outside the model directories ", dirs));
    EXPECT_EQ(absl::StrReplaceAll(b.error_message(), {{absent, there}}),
              a.error_message());
  }
  // Inside the directory, a missing file is said to be missing.
  v1::LoadShardRequest r =
      shard_request("absent.gguf", 0, n_layer_, n_layer_, 32, 4, 32);
  const grpc::Status st = w.load(r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(),
            absl::StrCat(
                "worker w0: model_path: absent.gguf does not exist in ", dirs));
}

// A micro-batch that does not decode (a string that is not UTF-8) ends
// its stream with INVALID_ARGUMENT naming the field (gRPC's Read says only
// "false", which read as the peer's end of stream).
TEST_F(WorkerServiceTest, UndecodableMicroBatchEndsItsStreamNamingTheField) {
  ServedWorker w("w0", model_dir_, 30000);
  ASSERT_TRUE(w.load(shard_request("stories260K.gguf", 0, n_layer_, n_layer_,
                                   32, 4, 32))
                  .ok());
  auto stub = w.stub();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  auto stream = stub->Activations(&context);
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  b.set_batch_id(1);
  *b.add_slices() = slice(1, 0, stories_prompt());
  ASSERT_TRUE(stream->Write(b));
  v1::MicroBatchResult r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  b.set_batch_id(2);
  b.mutable_slices(0)->set_grammar(
      "root ::= \"\xff\"");  // C++ protobuf sends it (and logs)
  (void)stream->Write(b);
  EXPECT_FALSE(stream->Read(&r));
  const grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "worker w0: slices[0].grammar: not valid UTF-8 (byte 10 of 12); a "
            "string field "
            "must be UTF-8 (strata.v1.MicroBatch)");
}

// A peer that writes micro-batches and never reads: the worker owes it
// results it cannot write. The stream is cut at the bound (256 results
// owed) and the worker goes on serving another stream. Two stages in this
// process so that results come back on the link's thread, not the
// stream's (on which a blocked write would stop the reading too).
TEST_F(WorkerServiceTest, PeerThatNeverReadsIsCutAtTheBound) {
  ServedWorker w1("w1", model_dir_, 600000);
  ServedWorker w0("w0", model_dir_,
                  600000);  // the stall cut is not what ends it here
  const int cut = 2;
  ASSERT_TRUE(w1.load(shard_request("stories260K.gguf", cut, n_layer_, n_layer_,
                                    32, 4, 32))
                  .ok());
  v1::LoadShardRequest r =
      shard_request("stories260K.gguf", 0, cut, n_layer_, 32, 4, 32);
  r.set_next_stage(w1.address());
  ASSERT_TRUE(w0.load(r).ok());

  // A small receive window, so that the worker's writes block soon.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = w0.stub(args);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(120));
  auto stream = stub->Activations(&context);
  const auto began = Clock::now();
  int sent = 0;
  constexpr int kMax = 200000;
  for (; sent < kMax; ++sent) {
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    b.set_batch_id(static_cast<uint64_t>(sent) + 1);
    v1::SequenceSlice s = slice(1, 0, {1});  // restarts sequence 1 each time
    s.set_top_logprobs(20);                  // ~300-byte results
    *b.add_slices() = s;
    if (!stream->Write(b)) break;
  }
  // Cut: the worker stopped the stream long before the peer's last write.
  EXPECT_LT(sent, kMax);
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(60));
  ASSERT_TRUE(wait_for_cuts(w0, 1));
  // The status waits behind the unread results: the peer gives up.
  context.TryCancel();
  (void)stream->Finish();
  const worker::WorkerService::StreamStats stats = w0.service().stream_stats();
  EXPECT_EQ(stats.cut, 1);
  // The results owed never passed the bound.
  EXPECT_EQ(stats.max_owed, 256u);

  // The worker serves another stream.
  grpc::ClientContext c2;
  c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto good = w0.stub()->Activations(&c2);
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  b.set_batch_id(1);
  *b.add_slices() = slice(2, 0, stories_prompt());
  ASSERT_TRUE(good->Write(b));
  v1::MicroBatchResult result;
  ASSERT_TRUE(good->Read(&result));
  EXPECT_EQ(result.error_code(), 0) << result.error_message();
  EXPECT_EQ(result.tokens_size(), 1);
  good->WritesDone();
  EXPECT_TRUE(good->Finish().ok());
}

// A peer that never reads, on a stream whose results are written on the
// stream's own thread (no shard: every micro-batch is answered at once):
// the write blocks, and the watchdog cuts it after answer_timeout_ms.
TEST_F(WorkerServiceTest, WriteThatWaitsTooLongIsCut) {
  ServedWorker w0("w0", model_dir_, 300);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = w0.stub(args);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(120));
  auto stream = stub->Activations(&context);
  const auto began = Clock::now();
  int sent = 0;
  constexpr int kMax = 2000000;
  for (; sent < kMax; ++sent) {
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    b.set_batch_id(static_cast<uint64_t>(sent) + 1);
    *b.add_slices() = slice(1, 0, {1});
    if (!stream->Write(b)) break;
  }
  EXPECT_LT(sent, kMax);
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(60));
  ASSERT_TRUE(wait_for_cuts(w0, 1));
  context.TryCancel();
  (void)stream->Finish();
  EXPECT_EQ(w0.service().stream_stats().cut, 1);
  grpc::ClientContext hc;
  v1::WorkerHealthResponse health;
  EXPECT_TRUE(w0.stub()->Health(&hc, v1::WorkerHealthRequest(), &health).ok());
}

}  // namespace
}  // namespace strata::worker_test
