// The NCCL links of a cluster, wired end to end on a machine without a GPU:
// WorkerServices on loopback gRPC whose frame transport is the in-memory
// fake (tests/worker/in_memory_transport.h), a Cluster (the coordinator)
// that hands out their ids, and requests through the scheduler. What is
// not exercised here is NCCL's own transfer (tests/cuda/nccl_channel_test.cc
// on a GPU).
//
//   - a worker without a transport says so (Describe) and refuses
//     MakeNcclId and LoadShard's NCCL fields, naming the field;
//   - the id a worker is rank 0 of must be one its MakeNcclId made, used
//     once, among the newest kMaxMadeIds;
//   - greedy tokens through 2 and 3 stages linked over the fake NCCL
//     equal those of the same workers linked over gRPC, and the cluster's
//     status says which link each stage uses;
//   - activation_link: nccl with a worker that makes no NCCL links fails
//     the load naming the worker.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster.h"
#include "coordinator/worker_control.h"
#include "gtest/gtest.h"
#include "tests/worker/in_memory_transport.h"
#include "tests/worker/served_worker.h"
#include "tests/worker/worker_test_util.h"
#include "worker/frame_link.h"
#include "worker/grpc_link.h"

namespace strata::worker_test {
namespace {


grpc::Status make_id(const ServedWorker& w, std::string* id) {
  grpc::ClientContext context;
  v1::MakeNcclIdResponse out;
  grpc::Status st = w.stub()->MakeNcclId(&context, v1::MakeNcclIdRequest(), &out);
  *id = out.id();
  return st;
}

grpc::Status link(const ServedWorker& w, const v1::LinkNcclRequest& r) {
  grpc::ClientContext context;
  v1::LinkNcclResponse out;
  return w.stub()->LinkNccl(&context, r, &out);
}

bool describes_nccl(const ServedWorker& w) {
  grpc::ClientContext context;
  v1::DescribeResponse d;
  EXPECT_TRUE(w.stub()->Describe(&context, v1::DescribeRequest(), &d).ok());
  return d.nccl_link();
}

class WorkerNcclTest : public StoriesWorkerTest {};

TEST_F(WorkerNcclTest, AWorkerWithoutATransportRefusesNcclLinksNamingTheField) {
  ServedWorker w("w0", model_dir_, 30000);
  EXPECT_FALSE(describes_nccl(w));
  std::string id;
  grpc::Status st = make_id(w, &id);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("worker w0: makes no NCCL links"), std::string::npos)
      << st.error_message();

  ASSERT_TRUE(w.load(shard_request("stories260K.gguf", 0, 2, n_layer_, 32, 4, 32)).ok());
  v1::LinkNcclRequest r;
  r.set_shard_id(kShardId);
  r.mutable_next()->set_forward_id(std::string(worker::kNcclIdBytes, 'f'));
  r.mutable_next()->set_results_id(std::string(worker::kNcclIdBytes, 'r'));
  st = link(w, r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("worker w0: this worker makes no NCCL links"),
            std::string::npos)
      << st.error_message();
  // The shard still links over gRPC.
  grpc::ClientContext context;
  v1::DescribeResponse d;
  ASSERT_TRUE(w.stub()->Describe(&context, v1::DescribeRequest(), &d).ok());
  EXPECT_EQ(d.shard().next_link(), "grpc");
}

TEST_F(WorkerNcclTest, TheIdsAWorkerIsRankZeroOfMustBeItsOwnEachUsedOnce) {
  auto transport = std::make_shared<InMemoryTransport>();
  ServedWorker w0("w0", model_dir_, 30000, transport);
  ServedWorker w1("w1", model_dir_, 30000, transport);
  EXPECT_TRUE(describes_nccl(w0));
  std::string from_w1;
  ASSERT_TRUE(make_id(w1, &from_w1).ok());
  ASSERT_EQ(from_w1.size(), worker::kNcclIdBytes);

  // A middle stage: next.forward_id and previous.results_id are w0's.
  uint64_t shard = kShardId;
  auto load_middle = [&] {
    v1::LoadShardRequest r = shard_request("stories260K.gguf", 1, 3, n_layer_, 32, 4, 32);
    r.set_shard_id(++shard);
    grpc::Status st = w0.load(r);
    EXPECT_TRUE(st.ok()) << st.error_message();
  };
  auto request = [&](const std::string& next_forward, const std::string& previous_results) {
    v1::LinkNcclRequest r;
    r.set_shard_id(shard);
    r.mutable_next()->set_forward_id(next_forward);
    r.mutable_next()->set_results_id(from_w1);
    r.mutable_previous()->set_forward_id(from_w1);
    r.mutable_previous()->set_results_id(previous_results);
    return r;
  };
  load_middle();
  std::vector<std::string> made(worker::WorkerService::kMaxMadeIds + 1);
  for (std::string& id : made) ASSERT_TRUE(make_id(w0, &id).ok());

  // w1's id where w0's belongs, and the oldest of more than kMaxMadeIds
  // (forgotten): refused, naming the field.
  grpc::Status st = link(w0, request(from_w1, made[3]));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("worker w0: next.forward_id: not an id this worker's "
                                    "MakeNcclId made"),
            std::string::npos)
      << st.error_message();
  st = link(w0, request(made[2], made[0]));
  EXPECT_NE(st.error_message().find("previous.results_id: not an id"), std::string::npos)
      << st.error_message();
  st = link(w0, request(made[2], made[2]));
  EXPECT_NE(st.error_message().find("one id for two communicators"), std::string::npos)
      << st.error_message();
  // Two of its own: linked; Describe says so.
  st = link(w0, request(made[2], made[3]));
  ASSERT_TRUE(st.ok()) << st.error_message();
  grpc::ClientContext context;
  v1::DescribeResponse d;
  ASSERT_TRUE(w0.stub()->Describe(&context, v1::DescribeRequest(), &d).ok());
  EXPECT_EQ(d.shard().next_link(), "nccl");
  // Once linked, a shard is not linked again.
  st = link(w0, request(made[4], made[5]));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("is linked over NCCL already"), std::string::npos)
      << st.error_message();
  // A new shard: the ids used are spent; the others, around them, are not.
  load_middle();
  EXPECT_EQ(link(w0, request(made[2], made[4])).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(link(w0, request(made[4], made[3])).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = link(w0, request(made[1], made[4]));
  EXPECT_TRUE(st.ok()) << st.error_message();
  load_middle();
  st = link(w0, request(made[5], made[8]));
  EXPECT_TRUE(st.ok()) << st.error_message();
  // Another shard's id: refused before any id is taken.
  v1::LinkNcclRequest other = request(made[6], made[7]);
  other.set_shard_id(shard + 100);
  st = link(w0, other);
  EXPECT_NE(st.error_message().find("shard_id: "), std::string::npos) << st.error_message();
  load_middle();
  EXPECT_TRUE(link(w0, request(made[6], made[7])).ok());
}

// The receiving side on a real worker, the previous stage played here: a
// micro-batch whose activations a local stage made gets the token of the
// whole chain; then bytes that are not a frame end that link (logged, and
// told to the previous stage in a close frame: NCCL would not tell it of
// the abort, nor does this transport), and the worker keeps its shard and
// answers as before.
TEST_F(WorkerNcclTest, ABadFrameFromThePreviousStageEndsOnlyThatLink) {
  auto transport = std::make_shared<InMemoryTransport>();
  transport->set_silent_aborts(true);
  ServedWorker w1("w1", model_dir_, 30000, transport);
  const int cut = 2;
  worker::FrameLinkIds ids;
  ids.forward = *transport->make_id();  // the previous stage's to make
  std::string results;
  ASSERT_TRUE(make_id(w1, &results).ok());
  std::copy(results.begin(), results.end(), ids.results.begin());
  grpc::Status st =
      w1.load(shard_request("stories260K.gguf", cut, n_layer_, n_layer_, 256, 8, 64));
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::LinkNcclRequest r;
  r.set_shard_id(kShardId);
  r.mutable_previous()->set_forward_id(std::string(ids.forward.begin(), ids.forward.end()));
  r.mutable_previous()->set_results_id(results);
  st = link(w1, r);
  ASSERT_TRUE(st.ok()) << st.error_message();

  auto forward = transport->join(ids.forward, 0, std::chrono::seconds(60), nullptr,
                                 worker::FrameLimits{worker::kMaxFrameRows});
  ASSERT_TRUE(forward.ok()) << forward.status();
  auto back =
      transport->join(ids.results, 1, std::chrono::seconds(60), nullptr, worker::FrameLimits{});
  ASSERT_TRUE(back.ok()) << back.status();

  // The first stage here; the whole chain as the reference.
  std::vector<std::unique_ptr<worker::Stage>> local = load_split(stories_path(), {cut});
  ASSERT_EQ(local.size(), 2u);
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  batch.set_batch_id(1);
  *batch.add_slices() = slice(1, 0, stories_prompt());
  absl::StatusOr<v1::MicroBatchResult> want = run_chain(local, batch);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->tokens_size(), 1);
  v1::MicroBatch next;
  v1::MicroBatchResult unused;
  std::vector<std::unique_ptr<worker::Stage>> first = load_split(stories_path(), {cut});
  ASSERT_TRUE(first[0]->run(batch, &next, &unused).ok());
  next.set_shard_id(kShardId);
  absl::StatusOr<worker::Frame> frame = worker::frame_micro_batch(next, static_cast<uint32_t>(first[0]->shard().n_embd()));
  ASSERT_TRUE(frame.ok()) << frame.status();
  ASSERT_TRUE((*forward)->send(*frame).ok());
  absl::StatusOr<worker::Frame> answer = (*back)->recv();
  ASSERT_TRUE(answer.ok()) << answer.status();
  absl::StatusOr<v1::MicroBatchResult> got = worker::unframe_result(answer->header, answer->meta);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->error_code(), 0) << got->error_message();
  ASSERT_EQ(got->tokens_size(), 1);
  EXPECT_EQ(got->tokens(0).id(), want->tokens(0).id());

  // A header that is not one: the worker ends the link.
  InMemoryTransport::Message garbage;
  garbage.header.assign(worker::kFrameHeaderBytes, 0x41);
  ASSERT_TRUE(send_raw(**forward, std::move(garbage)).ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  absl::StatusOr<worker::Frame> told = (*back)->recv(
      [until]() -> std::optional<std::chrono::steady_clock::time_point> { return until; });
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->header.kind, worker::FrameKind::kClose);
  EXPECT_NE(worker::close_reason(*told).find("magic"), std::string::npos)
      << worker::close_reason(*told);
  grpc::ClientContext context;
  v1::WorkerHealthResponse health;
  ASSERT_TRUE(w1.stub()->Health(&context, v1::WorkerHealthRequest(), &health).ok());
  EXPECT_EQ(health.state(), "serving");
  EXPECT_EQ(health.shard_id(), kShardId);
}

// Workers on loopback under a Cluster, as strata-coordinator runs them.
class NcclClusterTest : public WorkerNcclTest {
 protected:
  void SetUp() override {
    WorkerNcclTest::SetUp();
    if (IsSkipped()) return;
    transport_ = std::make_shared<InMemoryTransport>();
    for (int i = 0; i < 3; ++i) {
      workers_.push_back(std::make_unique<ServedWorker>(absl::StrCat("w", i), model_dir_, 60000,
                                                        transport_));
    }
  }

  std::unique_ptr<coordinator::Cluster> start(int n, coordinator::ActivationLinkKind link,
                                              const std::vector<ServedWorker*>& pool) {
    auto model = coordinator::open_served_model(stories_path(), 256);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    coordinator::ClusterOptions o;
    o.config.max_sequences = 4;
    o.config.prefill_chunk = 64;
    o.config.migration_attempts = 0;
    o.config.activation_link = link;
    o.config.tls.insecure = true;
    std::vector<std::unique_ptr<coordinator::WorkerControl>> controls;
    std::vector<coordinator::WorkerConfig> configs;
    for (int i = 0; i < n; ++i) {
      coordinator::WorkerConfig w;
      w.address = pool[i]->address();
      w.name = absl::StrCat("w", i);
      o.config.workers.push_back(w);
      configs.push_back(w);
      controls.push_back(coordinator::make_grpc_worker_control(
          w.address, coordinator::worker_label(w), o.config.tls, w.name));
    }
    const grpc_tls::TlsConfig tls = o.config.tls;
    coordinator::FirstLinkFactory first =
        [configs, tls](worker::ActivationLink::ResultCallback cb, uint64_t shard_id,
                       const std::vector<int>& members)
        -> absl::StatusOr<std::unique_ptr<worker::ActivationLink>> {
      worker::GrpcLinkOptions g;
      g.peer_name = coordinator::worker_label(configs[members.front()]);
      g.tls = tls;
      if (members.size() > 1) {
        g.results_from = configs[members.back()].address;
        g.results_peer_name = coordinator::worker_label(configs[members.back()]);
        g.shard_id = shard_id;
      }
      return worker::make_grpc_link(configs[members.front()].address, std::move(cb), g);
    };
    return std::make_unique<coordinator::Cluster>(o, *std::move(model), std::move(controls),
                                                  first);
  }

  // Greedy ids of each prompt through `c`.
  std::vector<std::vector<int32_t>> generate(coordinator::Cluster& c) {
    std::vector<std::vector<int32_t>> out;
    const std::vector<std::vector<int32_t>> prompts = {
        stories_prompt(), {1, 403, 407, 261, 378}, std::vector<int32_t>(90, 300)};
    for (const std::vector<int32_t>& p : prompts) {
      coordinator::SequenceRequest r;
      r.prompt = p;
      r.params.max_tokens = 20;
      r.params.ignore_eos = true;
      auto h = c.scheduler().submit(r);
      EXPECT_TRUE(h.ok()) << h.status();
      if (!h.ok()) return out;
      std::vector<int32_t> ids;
      for (;;) {
        auto e = (*h)->next(absl::Seconds(120));
        if (!e) {
          ADD_FAILURE() << "no event in 120 s";
          return out;
        }
        if (e->kind == coordinator::SequenceEvent::Kind::kError) {
          ADD_FAILURE() << e->error;
          return out;
        }
        if (e->kind == coordinator::SequenceEvent::Kind::kDone) {
          ids = e->all_ids;
          break;
        }
      }
      out.push_back(ids);
    }
    return out;
  }

  // Waits (up to 60 s) until the cluster's health names `want` as why it
  // does not serve.
  static void expect_problem(coordinator::Cluster& c, const std::string& want) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (c.health().message().find(want) == std::string::npos &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_NE(c.health().message().find(want), std::string::npos) << c.health().message();
    EXPECT_NE(c.health().state(), v1::HealthResponse::SERVING);
  }

  std::vector<ServedWorker*> pool() {
    std::vector<ServedWorker*> p;
    for (auto& w : workers_) p.push_back(w.get());
    return p;
  }

  std::shared_ptr<InMemoryTransport> transport_;
  std::vector<std::unique_ptr<ServedWorker>> workers_;
};

TEST_F(NcclClusterTest, StagesLinkedOverNcclGiveTheGrpcPipelinesTokens) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " stages"));
    std::vector<std::vector<int32_t>> over_grpc, over_nccl;
    {
      auto c = start(n, coordinator::ActivationLinkKind::kGrpc, pool());
      ASSERT_NE(c, nullptr);
      ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
      over_grpc = generate(*c);
      const v1::ClusterStatusResponse status = c->status();
      ASSERT_EQ(status.workers_size(), n);
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(status.workers(k).link_to_next(), k + 1 < n ? "grpc" : "") << k;
      }
    }
    const int made_before = transport_->made();
    const uint64_t frames_before = transport_->frames();
    {
      // auto: every worker here makes NCCL links.
      auto c = start(n, coordinator::ActivationLinkKind::kAuto, pool());
      ASSERT_NE(c, nullptr);
      ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
      over_nccl = generate(*c);
      const v1::ClusterStatusResponse status = c->status();
      ASSERT_EQ(status.workers_size(), n);
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(status.workers(k).link_to_next(), k + 1 < n ? "nccl" : "") << k;
      }
    }
    // Two communicators a link, each joined by both of its stages; every
    // micro-batch crossed each link as a frame, its result as another.
    EXPECT_EQ(transport_->made() - made_before, 2 * (n - 1));
    EXPECT_GE(transport_->frames() - frames_before, uint64_t{2 * 20} * (n - 1));
    ASSERT_EQ(over_nccl.size(), 3u);
    EXPECT_EQ(over_nccl, over_grpc);
    for (const auto& ids : over_nccl) EXPECT_EQ(ids.size(), 20u);
  }
}

// A link whose communicators fail (the network between two GPU hosts) is
// not remade from spent ids: the requests on it fail naming the next
// stage, the coordinator loads the pipeline again with new ids, and the
// next requests get the same tokens as before.
TEST_F(NcclClusterTest, ABrokenNcclLinkIsRemadeWithNewIds) {
  auto c = start(2, coordinator::ActivationLinkKind::kNccl, pool());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
  const std::vector<std::vector<int32_t>> before = generate(*c);
  const int made = transport_->made();
  transport_->break_all();
  // Requests until the pipeline is reloaded fail (no migration here);
  // a later one gets served again.
  std::vector<std::vector<int32_t>> after;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string failure;
  while (std::chrono::steady_clock::now() < until) {
    coordinator::SequenceRequest r;
    r.prompt = stories_prompt();
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    auto h = c->scheduler().submit(r);
    if (!h.ok()) {  // no pipeline yet
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    auto e = (*h)->next(absl::Seconds(120));
    while (e && e->kind == coordinator::SequenceEvent::Kind::kDelta) e = (*h)->next(absl::Seconds(120));
    ASSERT_TRUE(e.has_value());
    if (e->kind == coordinator::SequenceEvent::Kind::kError) {
      if (failure.empty()) failure = std::string(e->error.message());
      continue;
    }
    after.push_back(e->all_ids);
    break;
  }
  ASSERT_EQ(after.size(), 1u) << failure;
  EXPECT_EQ(after[0], before[0]);
  EXPECT_EQ(transport_->made() - made, 2);  // one new pair of ids
  EXPECT_EQ(c->status().workers(0).link_to_next(), "nccl");
  if (!failure.empty()) {
    EXPECT_NE(failure.find("worker w1"), std::string::npos) << failure;
  }
}

TEST_F(NcclClusterTest, NcclEverywhereFailsTheLoadNamingAWorkerWithoutIt) {
  // w1 makes no NCCL links.
  workers_[1] = std::make_unique<ServedWorker>("w1", model_dir_, 60000);
  auto c = start(2, coordinator::ActivationLinkKind::kNccl, pool());
  ASSERT_NE(c, nullptr);
  // The cluster keeps trying (the worker may be replaced by one that
  // makes NCCL links); its health says why it does not serve. It is
  // refused from the workers' Describe: no shard loads, no id is made.
  expect_problem(*c, "activation_link: nccl, but worker w1");
  EXPECT_EQ(transport_->made(), 0);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    v1::WorkerHealthResponse health;
    ASSERT_TRUE(workers_[i]->stub()->Health(&context, v1::WorkerHealthRequest(), &health).ok());
    EXPECT_EQ(health.state(), "idle") << i;
  }
  // auto links the same pair over gRPC instead.
  c.reset();
  c = start(2, coordinator::ActivationLinkKind::kAuto, pool());
  ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
  EXPECT_EQ(c->status().workers(0).link_to_next(), "grpc");
}

// NCCL refuses two ranks on one GPU: two workers that Describe the same
// GPU are linked over gRPC under auto, and refused under nccl.
TEST_F(NcclClusterTest, TwoWorkersOnOneGpuAreNotLinkedOverNccl) {
  workers_[0]->service().set_gpu_uuid("GPU-6f1c0a2e-0000-0000-0000-000000000001");
  workers_[1]->service().set_gpu_uuid("GPU-6f1c0a2e-0000-0000-0000-000000000001");
  auto c = start(2, coordinator::ActivationLinkKind::kNccl, pool());
  ASSERT_NE(c, nullptr);
  expect_problem(*c, "run on the same GPU (GPU-6f1c0a2e-0000-0000-0000-000000000001)");
  c.reset();
  c = start(2, coordinator::ActivationLinkKind::kAuto, pool());
  ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
  EXPECT_EQ(c->status().workers(0).link_to_next(), "grpc");
  // On two GPUs, NCCL again.
  workers_[1]->service().set_gpu_uuid("GPU-6f1c0a2e-0000-0000-0000-000000000002");
  c.reset();
  c = start(2, coordinator::ActivationLinkKind::kAuto, pool());
  ASSERT_TRUE(c->wait_serving(absl::Seconds(60)).ok());
  EXPECT_EQ(c->status().workers(0).link_to_next(), "nccl");
}

}  // namespace
}  // namespace strata::worker_test
