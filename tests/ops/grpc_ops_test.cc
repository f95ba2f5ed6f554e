// grpc.health.v1 and server reflection on the coordinator's gRPC server,
// through the real gRPC APIs (the generated Health stub; reflection's own
// messages from the descriptor pool), over a Cluster whose workers are
// fakes: a worker that answers, then stops answering (killed), then answers
// again. And the scheduler's metrics after known requests through a fake
// pipeline. Waits are on events (a Watch stream, a request's end); the
// cluster's own health checks run every 20 ms.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "coordinator/cluster.h"
#include "coordinator/grpc_health.h"
#include "coordinator/inference_service.h"
#include "coordinator/single_node.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/message.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace strata::coordinator {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

std::string stories() {
  return (testing::shared_dir() / "models" / "stories260K.gguf").string();
}

class FakeDetokenizer final : public Detokenizer {
 public:
  std::string push(int32_t id) override {
    return "<" + std::to_string(id) + ">";
  }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t) const override { return false; }
};

// A worker that answers (or, once killed, refuses every call as an
// unreachable one would).
class FakeWorker final : public WorkerControl {
 public:
  explicit FakeWorker(std::string address) : address_(std::move(address)) {}
  const std::string& address() const override { return address_; }
  absl::StatusOr<v1::DescribeResponse> describe(absl::Duration) override {
    if (dead_) return down();
    v1::DescribeResponse d;
    d.set_memory_budget_bytes(uint64_t{1} << 30);
    d.set_threads(1);
    return d;
  }
  absl::StatusOr<v1::ShardInfo> load_shard(const v1::LoadShardRequest& r,
                                           absl::Duration) override {
    if (dead_) return down();
    shard_ = r.shard_id();
    v1::ShardInfo s;
    s.set_shard_id(r.shard_id());
    return s;
  }
  absl::StatusOr<std::string> make_nccl_id(absl::Duration) override {
    return absl::FailedPreconditionError("worker " + address_ + ": makes no NCCL links");
  }
  absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest&, absl::Duration) override {
    return absl::FailedPreconditionError("worker " + address_ + ": makes no NCCL links");
  }
  absl::StatusOr<int> free_sequences(uint64_t, std::span<const uint64_t> ids,
                                     absl::Duration) override {
    return static_cast<int>(ids.size());
  }
  absl::StatusOr<v1::WorkerHealthResponse> health(absl::Duration) override {
    if (dead_) return down();
    v1::WorkerHealthResponse h;
    h.set_state(shard_ != 0 ? "serving" : "idle");
    h.set_shard_id(shard_);
    h.set_step_seconds(0.5);  // as if it ran 4 micro-batches in 0.5 s
    h.set_steps(4);
    return h;
  }
  void kill() {
    dead_ = true;
    shard_ = 0;
  }  // a restart loses the shard
  void revive() { dead_ = false; }

 private:
  absl::Status down() const {
    return absl::UnavailableError("worker " + address_ +
                                  ": connection refused");
  }
  std::string address_;
  std::atomic<bool> dead_{false};
  std::atomic<uint64_t> shard_{0};
};

// The first stage and the whole pipeline: every sampling slice is answered
// at once with token 7.
class AnsweringLink final : public worker::ActivationLink {
 public:
  explicit AnsweringLink(ResultCallback cb) : cb_(std::move(cb)) {}
  const std::string& peer() const override { return peer_; }
  absl::Status send(v1::MicroBatch batch) override {
    v1::MicroBatchResult r;
    r.set_batch_id(batch.batch_id());
    for (const v1::SequenceSlice& s : batch.slices()) {
      if (!s.sample()) continue;
      v1::SampledToken* t = r.add_tokens();
      t->set_seq_id(s.seq_id());
      t->set_id(7);
    }
    cb_(std::move(r));
    return absl::OkStatus();
  }
  bool healthy() const override { return true; }
  void close(const std::string&) override {}

 private:
  ResultCallback cb_;
  std::string peer_ = "worker fake 0";
};

class GrpcOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(stories())) {
      GTEST_SKIP() << stories() << " absent (../shared/models)";
    }
    auto model = open_served_model(stories(), 256, /*need_tokenizer=*/false);
    ASSERT_TRUE(model.ok()) << model.status();
    ClusterOptions o;
    o.config.max_sequences = 4;
    o.config.health_check_interval_ms = 20;
    o.config.health_check_timeout_ms = 1000;
    o.config.health_check_failures = 1;
    // Without migration the cluster stays down while a worker is: what the
    // health service must follow (with it, w0 alone would serve again).
    o.config.migration_attempts = 0;
    o.detokenizers = [] { return std::make_unique<FakeDetokenizer>(); };
    std::vector<std::unique_ptr<WorkerControl>> workers;
    for (int i = 0; i < 2; ++i) {
      WorkerConfig w;
      w.address = "fake:" + std::to_string(i);
      w.name = "w" + std::to_string(i);
      o.config.workers.push_back(w);
      auto fake = std::make_unique<FakeWorker>(w.address);
      fakes_.push_back(fake.get());
      workers.push_back(std::move(fake));
    }
    cluster_ = std::make_unique<Cluster>(
        o, *std::move(model), std::move(workers),
        [](worker::ActivationLink::ResultCallback cb, uint64_t, const std::vector<int>&)
            -> absl::StatusOr<std::unique_ptr<worker::ActivationLink>> {
          return std::make_unique<AnsweringLink>(std::move(cb));
        });
    service_ = std::make_unique<InferenceService>(*cluster_);
    int port = 0;
    auto server = start_grpc_server(*service_, "127.0.0.1:0", &port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    health_ = publish_cluster_health(*server_, *cluster_);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    health_.reset();
    if (server_) server_->Shutdown();
    server_.reset();
    service_.reset();
    cluster_.reset();
  }

  HealthCheckResponse::ServingStatus check(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    grpc::Status st = stub->Check(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.status();
  }

  // Reads a Watch stream until it says `want`; false when it ends first (the
  // deadline only bounds a hang).
  static bool watch_until(grpc::ClientReader<HealthCheckResponse>& stream,
                          HealthCheckResponse::ServingStatus want) {
    HealthCheckResponse r;
    while (stream.Read(&r)) {
      if (r.status() == want) return true;
    }
    return false;
  }

  std::vector<FakeWorker*> fakes_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ClusterHealthPublisher> health_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcOpsTest, HealthFollowsTheClusterThroughAKilledWorker) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(120));
  HealthCheckRequest req;  // "": the server as a whole
  auto stream = stub->Watch(&ctx, req);
  // Starting -> SERVING once both workers answered and took their shards.
  ASSERT_TRUE(watch_until(*stream, HealthCheckResponse::SERVING));
  EXPECT_EQ(check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(check("strata.v1.Inference"), HealthCheckResponse::SERVING);

  fakes_[1]->kill();
  ASSERT_TRUE(watch_until(*stream, HealthCheckResponse::NOT_SERVING));
  EXPECT_EQ(check(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(check("strata.v1.Inference"), HealthCheckResponse::NOT_SERVING);
  EXPECT_NE(cluster_->health().state(), v1::HealthResponse::SERVING);

  fakes_[1]->revive();  // back on the same address: reloaded
  ASSERT_TRUE(watch_until(*stream, HealthCheckResponse::SERVING));
  EXPECT_EQ(check(""), HealthCheckResponse::SERVING);
  ctx.TryCancel();
}

TEST_F(GrpcOpsTest, UnknownServiceNameIsNotFound) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  HealthCheckRequest req;
  req.set_service("no.such.Service");
  HealthCheckResponse resp;
  EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// One ServerReflectionInfo exchange: `field` of the request set to `value`.
std::unique_ptr<google::protobuf::Message> reflect(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& field,
    const std::string& value) {
  using google::protobuf::Message;
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  const auto* req_type = pool->FindMessageTypeByName(
      "grpc.reflection.v1alpha.ServerReflectionRequest");
  const auto* resp_type = pool->FindMessageTypeByName(
      "grpc.reflection.v1alpha.ServerReflectionResponse");
  if (req_type == nullptr || resp_type == nullptr) {
    ADD_FAILURE() << "grpc++_reflection's messages are not in the pool";
    return nullptr;
  }
  auto* factory = google::protobuf::MessageFactory::generated_factory();
  std::unique_ptr<Message> req(factory->GetPrototype(req_type)->New());
  req->GetReflection()->SetString(req.get(), req_type->FindFieldByName(field),
                                  value);
  std::unique_ptr<Message> resp(factory->GetPrototype(resp_type)->New());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  static const grpc::internal::RpcMethod method(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<Message, Message>> stream(
      grpc::internal::ClientReaderWriterFactory<Message, Message>::Create(
          channel.get(), method, &ctx));
  EXPECT_TRUE(stream->Write(*req));
  stream->WritesDone();
  EXPECT_TRUE(stream->Read(resp.get()));
  Message* drained = resp->New();
  while (stream->Read(drained)) {
  }
  delete drained;
  EXPECT_TRUE(stream->Finish().ok());
  return resp;
}

TEST_F(GrpcOpsTest, ReflectionListsAndDescribesTheServices) {
  auto listed = reflect(channel_, "list_services", "");
  ASSERT_NE(listed, nullptr);
  const auto* d = listed->GetDescriptor();
  const auto* refl = listed->GetReflection();
  const auto& list =
      refl->GetMessage(*listed, d->FindFieldByName("list_services_response"));
  const auto* list_d = list.GetDescriptor();
  const auto* service_field = list_d->FindFieldByName("service");
  std::set<std::string> names;
  for (int i = 0; i < list.GetReflection()->FieldSize(list, service_field);
       ++i) {
    const auto& s =
        list.GetReflection()->GetRepeatedMessage(list, service_field, i);
    names.insert(s.GetReflection()->GetString(
        s, s.GetDescriptor()->FindFieldByName("name")));
  }
  EXPECT_EQ(names.count("strata.v1.Inference"), 1u);
  EXPECT_EQ(names.count("grpc.health.v1.Health"), 1u);
  EXPECT_EQ(names.count("grpc.reflection.v1alpha.ServerReflection"), 1u);

  // grpcurl describe: the file that defines the service, and Health's.
  for (const auto& [symbol, file] :
       {std::pair<std::string, std::string>{"strata.v1.Inference",
                                            "strata/v1/inference.proto"},
        {"grpc.health.v1.Health", "grpc/health/v1/health.proto"}}) {
    auto described = reflect(channel_, "file_containing_symbol", symbol);
    ASSERT_NE(described, nullptr);
    const auto& files = described->GetReflection()->GetMessage(
        *described, described->GetDescriptor()->FindFieldByName(
                        "file_descriptor_response"));
    const auto* fdp =
        files.GetDescriptor()->FindFieldByName("file_descriptor_proto");
    ASSERT_GE(files.GetReflection()->FieldSize(files, fdp), 1) << symbol;
    google::protobuf::FileDescriptorProto proto;
    ASSERT_TRUE(proto.ParseFromString(
        files.GetReflection()->GetRepeatedString(files, fdp, 0)));
    EXPECT_EQ(proto.name(), file) << symbol;
  }
}

// Two requests of known sizes through the fake pipeline: every count exact.
TEST_F(GrpcOpsTest, MetricsCountKnownRequests) {
  ASSERT_TRUE(cluster_->wait_serving(absl::Seconds(60)).ok());
  for (int prompt : {4, 6}) {
    SequenceRequest r;
    r.prompt.assign(prompt, 3);
    r.params.max_tokens = 3;
    auto h = cluster_->scheduler().submit(r);
    ASSERT_TRUE(h.ok()) << h.status();
    while (true) {
      auto e = (*h)->next(absl::Seconds(60));
      ASSERT_TRUE(e.has_value());
      if (e->kind == SequenceEvent::Kind::kError) FAIL() << e->error;
      if (e->kind == SequenceEvent::Kind::kDone) break;
    }
  }
  // Counters and histograms are updated before a request hears of its end;
  // the gauges once its sequence is freed, before the stats say so.
  cluster_->scheduler().wait_stats(
      [](const Scheduler::Stats& s) { return s.active == 0 && s.queued == 0; },
      absl::Seconds(60));
  ServingMetrics& m = cluster_->metrics();
  EXPECT_EQ(m.prompt_tokens.value(), 10);
  EXPECT_EQ(m.generation_tokens.value(), 6);
  EXPECT_EQ(m.request_success.with({"length"}).value(), 2);
  EXPECT_EQ(m.request_success.with({"stop"}).value(), 0);
  EXPECT_EQ(m.time_to_first_token.cumulative().back(), 2u);
  EXPECT_EQ(m.e2e_request_latency.cumulative().back(), 2u);
  EXPECT_EQ(m.inter_token_latency.cumulative().back(), 4u);  // 2 gaps each
  EXPECT_EQ(m.request_prompt_tokens.sum(), 10);
  EXPECT_EQ(m.request_generation_tokens.sum(), 6);
  EXPECT_GE(m.step_seconds.cumulative().back(), 6u);  // one per token at least
  const std::string page = cluster_->render_prometheus();
  // {M: the model_name label every sample carries first.
  const std::string model =
      "{model_name=\"" + cluster_->model().info.name() + "\"";
  for (const char* line :
       {"strata:prompt_tokens_total{M} 10",
        "strata:generation_tokens_total{M} 6",
        "strata:request_success_total{M,finished_reason=\"length\"} 2",
        "strata:time_to_first_token_seconds_count{M} 2",
        "strata:e2e_request_latency_seconds_count{M} 2",
        "strata:inter_token_latency_seconds_count{M} 4",
        "strata:worker_up{M,worker=\"w0\"} 1",
        "strata:worker_up{M,worker=\"w1\"} 1",
        "strata:worker_step_seconds_sum{M,worker=\"w1\"} 0.5",
        "strata:worker_step_seconds_count{M,worker=\"w1\"} 4",
        "strata:num_requests_running{M} 0",
        "strata:num_requests_waiting{M} 0"}) {
    const std::string want = absl::StrReplaceAll(line, {{"{M", model}});
    EXPECT_NE(page.find(want + "\n"), std::string::npos) << want;
  }
}

// Single-node mode (`strata serve`): the stages are asked for their step
// time at the scrape; one request's micro-batches are all counted.
TEST(SingleNodeMetrics, StagesReportTheirStepTime) {
  if (!std::filesystem::exists(stories())) {
    GTEST_SKIP() << stories() << " absent (../shared/models)";
  }
  SingleNodeOptions o;
  o.model = stories();
  o.workers = 2;
  o.threads = 1;
  o.context_length = 128;
  o.detokenizers = [] { return std::make_unique<FakeDetokenizer>(); };
  auto cluster = make_single_node(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->wait_serving(absl::Seconds(60)).ok());
  SequenceRequest r;
  r.prompt = {1, 403, 407, 261};
  r.params.max_tokens = 5;
  r.params.ignore_eos = true;
  auto h = (*cluster)->scheduler().submit(r);
  ASSERT_TRUE(h.ok()) << h.status();
  while (true) {
    auto e = (*h)->next(absl::Seconds(60));
    ASSERT_TRUE(e.has_value());
    ASSERT_NE(e->kind, SequenceEvent::Kind::kError) << e->error;
    if (e->kind == SequenceEvent::Kind::kDone) break;
  }
  // 1 prefill + 4 decode micro-batches through each stage. The last
  // stage's count is certain once the tokens came back; the first ran its
  // part of each before.
  const std::string page = (*cluster)->render_prometheus();
  const std::string model =
      "{model_name=\"" + (*cluster)->model().info.name() + "\"";
  for (const char* line :
       {"strata:worker_step_seconds_count{M,worker=\"stage 0\"} 5",
        "strata:worker_step_seconds_count{M,worker=\"stage 1\"} 5",
        "strata:worker_up{M,worker=\"stage 0\"} 1",
        "strata:generation_tokens_total{M} 5",
        "strata:prompt_tokens_total{M} 4"}) {
    const std::string want = absl::StrReplaceAll(line, {{"{M", model}});
    EXPECT_NE(page.find(want + "\n"), std::string::npos) << want << "\n"
                                                         << page;
  }
}

}  // namespace
}  // namespace strata::coordinator
