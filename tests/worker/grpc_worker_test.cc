// Real strata-worker processes on loopback (ephemeral ports) with
// stories260K: a two-worker pipeline gives the whole model's greedy ids;
// hostile micro-batches get error results naming the field while the
// stream goes on; a killed or stopped next worker is reported, by name,
// within 10 s. Every test runs twice: plaintext links (insecure: true),
// and mutual TLS with certificates made by strata certs' code (the same
// errors must come back over mTLS).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "proto/cluster_certs.h"
#include "proto/grpc_tls.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/worker/worker_process.h"
#include "tests/worker/worker_test_util.h"
#include "worker/grpc_link.h"

namespace strata::worker_test {
namespace {

using Clock = std::chrono::steady_clock;

// How the test talks to its workers: plaintext or mutual TLS. The
// certificates (coordinator, w0, w1) are made once per process.
struct Links {
  bool tls = false;
  std::string dir;
  grpc_tls::TlsConfig coordinator;  // resolved: PEM loaded
  std::map<std::string, std::string> names;  // address -> worker name

  void use(bool with_tls) {
    tls = with_tls;
    names.clear();
    if (!tls || !dir.empty()) return;
    dir = ::testing::TempDir() + "/grpc-worker-certs-" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    absl::Status st = certs::write_cluster_certs(dir, {"coordinator", "w0", "w1"}, false);
    ASSERT_TRUE(st.ok()) << st;
    coordinator.ca = dir + "/ca.pem";
    coordinator.cert = dir + "/coordinator.pem";
    coordinator.key = dir + "/coordinator.key";
    coordinator.tls_given = true;
    st = grpc_tls::load_tls_files(&coordinator);
    ASSERT_TRUE(st.ok()) << st;
  }
  // The worker config's link security for worker `own`.
  std::string worker_yaml(const std::string& own) const {
    if (!tls) return "insecure: true\n";
    return "tls:\n  ca: " + dir + "/ca.pem\n  cert: " + dir + "/" + own +
           ".pem\n  key: " + dir + "/" + own + ".key\n  peers: [coordinator, w0, w1]\n";
  }
  std::shared_ptr<grpc::Channel> channel(const std::string& address) const {
    if (!tls) return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    auto c = grpc_tls::make_channel(coordinator, address, name(address),
                                    grpc::ChannelArguments());
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  worker::GrpcLinkOptions link_options(const std::string& address) const {
    worker::GrpcLinkOptions o;
    if (tls) {
      o.tls = coordinator;
      o.tls_name = name(address);
    } else {
      o.tls.insecure = true;
    }
    return o;
  }
  std::string name(const std::string& address) const {
    auto it = names.find(address);
    return it == names.end() ? "" : it->second;
  }
};

Links& links() {
  static Links l;
  return l;
}

class Results {
 public:
  worker::ActivationLink::ResultCallback callback() {
    return [this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(r));
      cv_.notify_all();
    };
  }
  std::optional<v1::MicroBatchResult> next(
      std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) {
      return std::nullopt;
    }
    v1::MicroBatchResult r = std::move(queue_.front());
    queue_.pop_front();
    return r;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::MicroBatchResult> queue_;
};

grpc::Status load_shard(const std::string& address,
                        const v1::LoadShardRequest& request,
                        v1::LoadShardResponse* response = nullptr) {
  auto stub = v1::Worker::NewStub(links().channel(address));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::LoadShardResponse unused;
  return stub->LoadShard(&context, request,
                         response != nullptr ? response : &unused);
}

// Waits (up to 60 s) until the worker at `address` has taken in a SIGTERM:
// its Health says "serving" no more (shutdown() dropped the shard) or it
// answers no new call (its server is shutting down). An event, not a
// sleep: a loaded machine only makes it take longer.
bool wait_until_stopping(const std::string& address) {
  auto stub = v1::Worker::NewStub(links().channel(address));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WorkerHealthResponse health;
    const grpc::Status st = stub->Health(&context, v1::WorkerHealthRequest(), &health);
    if (!st.ok() || health.state() != "serving") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // poll interval
  }
  return false;
}

std::unique_ptr<worker::ActivationLink> link_to(const std::string& address,
                                                Results& results,
                                                int max_message_bytes = 64
                                                                        << 20) {
  worker::GrpcLinkOptions options = links().link_options(address);
  options.answer_timeout = std::chrono::seconds(30);
  options.max_message_bytes = max_message_bytes;
  auto link = worker::make_grpc_link(address, results.callback(), options);
  EXPECT_TRUE(link.ok()) << link.status();
  return std::move(*link);
}

v1::MicroBatch micro_batch(uint64_t batch_id,
                           std::vector<v1::SequenceSlice> slices,
                           size_t hidden_rows = 0) {
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  b.set_batch_id(batch_id);
  for (auto& s : slices) *b.add_slices() = s;
  if (hidden_rows > 0) {
    std::vector<float> h(hidden_rows * 64, 0.02f);
    b.set_hidden(std::string(reinterpret_cast<const char*>(h.data()),
                             h.size() * sizeof(float)));
  }
  return b;
}

constexpr int kCut = 2;  // w0: blocks [0, 2), w1: [2, 5)

class GrpcWorker : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!exists(stories_path())) {
      GTEST_SKIP() << stories_path() << " absent (../shared/models)";
    }
    links().use(GetParam());
    n_layer_ = model_layers(stories_path());
    model_dir_ = std::filesystem::path(stories_path()).parent_path().string();
    start_w1(0);
    w0_ = std::make_unique<WorkerProcess>("w0", model_dir_, 0, /*threads=*/2,
                                          links().worker_yaml("w0"));
    ASSERT_TRUE(w0_->ok()) << w0_->error();
    links().names[w0_->address()] = "w0";
    load_w0();
  }

  void start_w1(int port) {
    w1_ = std::make_unique<WorkerProcess>("w1", model_dir_, port, 1,
                                          links().worker_yaml("w1"));
    ASSERT_TRUE(w1_->ok()) << w1_->error();
    links().names[w1_->address()] = "w1";
    v1::LoadShardRequest r =
        shard_request(stories_path(), kCut, n_layer_, n_layer_, 32, 4, 32);
    grpc::Status st = load_shard(w1_->address(), r);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  void load_w0() {
    // A path relative to the worker's model_dirs.
    v1::LoadShardRequest r =
        shard_request("stories260K.gguf", 0, kCut, n_layer_, 32, 4, 32);
    r.set_next_stage(w1_->address());
    r.set_next_stage_name("w1");  // the certificate w1 must show
    v1::LoadShardResponse response;
    grpc::Status st = load_shard(w0_->address(), r, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(response.shard().n_embd(), 64);
    EXPECT_EQ(response.shard().n_vocab(), 512);
    EXPECT_GT(response.shard().weight_bytes(), 0u);
  }

  // Batch 1 (sequence 1's prompt) through w0 and w1, answered.
  static void first_batch(worker::ActivationLink& link, Results& results) {
    ASSERT_TRUE(link.send(micro_batch(1, {slice(1, 0, stories_prompt())})).ok());
    ASSERT_TRUE(results.next().has_value());
  }

  int n_layer_ = 0;
  std::string model_dir_;
  std::unique_ptr<WorkerProcess> w1_;
  std::unique_ptr<WorkerProcess> w0_;
};

TEST_P(GrpcWorker, TwoWorkersGiveTheWholeModelsGreedyIds) {
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), 12);
  Results results;
  auto link = link_to(w0_->address(), results);
  std::vector<int32_t> ids;
  v1::MicroBatch b = micro_batch(0, {slice(7, 0, stories_prompt())});
  b.set_trace(true);  // not loaded with trace: ignored
  int pos = static_cast<int>(stories_prompt().size());
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(link->send(b).ok());
    auto r = results.next();
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->error_code(), 0) << r->error_message();
    ASSERT_EQ(r->batch_id(), static_cast<uint64_t>(i));
    ASSERT_EQ(r->tokens_size(), 1);
    EXPECT_EQ(r->traces_size(), 0);
    ids.push_back(r->tokens(0).id());
    b = micro_batch(i + 1, {slice(7, pos++, {ids.back()})});
  }
  EXPECT_EQ(ids, expected);

  // Idle workers sleep: with the stream and the link between them open,
  // neither burns CPU (spinning threads of two processes fight for cores).
  const long busy0 = w0_->cpu_ticks();
  const long busy1 = w1_->cpu_ticks();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long idle0 = w0_->cpu_ticks() - busy0;
  const long idle1 = w1_->cpu_ticks() - busy1;
  EXPECT_LE(idle0, 10) << "w0 used " << idle0 << " ticks in 2 s idle";
  EXPECT_LE(idle1, 10) << "w1 used " << idle1 << " ticks in 2 s idle";

  // Describe and Health.
  auto stub = v1::Worker::NewStub(
      links().channel(w0_->address()));
  grpc::ClientContext c1;
  v1::DescribeResponse d;
  ASSERT_TRUE(stub->Describe(&c1, v1::DescribeRequest(), &d).ok());
  EXPECT_EQ(d.worker_id(), "w0");
  EXPECT_EQ(d.protocol_version(), 1u);
  EXPECT_EQ(d.shard().last_block(), kCut);
  EXPECT_EQ(d.shard().next_stage(), w1_->address());
  grpc::ClientContext c2;
  v1::WorkerHealthResponse h;
  ASSERT_TRUE(stub->Health(&c2, v1::WorkerHealthRequest(), &h).ok());
  EXPECT_EQ(h.state(), "serving");
  EXPECT_EQ(h.live_sequences(), 1);
  grpc::ClientContext c3;
  v1::FreeSequenceRequest f;
  f.set_shard_id(kShardId);
  f.add_seq_ids(7);
  f.add_seq_ids(8);
  v1::FreeSequenceResponse fr;
  ASSERT_TRUE(stub->FreeSequence(&c3, f, &fr).ok());
  EXPECT_EQ(fr.freed(), 1);
}

TEST_P(GrpcWorker, LastStageResultsComeStraightToTheCoordinator) {
  const std::vector<int32_t> expected =
      whole_model_greedy(stories_path(), stories_prompt(), 12);
  auto w1 = v1::Worker::NewStub(
      links().channel(w1_->address()));
  auto w0 = v1::Worker::NewStub(
      links().channel(w0_->address()));
  // Refused: another shard id; a stage that is not the last.
  {
    grpc::ClientContext c;
    v1::ResultsRequest r;
    r.set_shard_id(kShardId + 1);
    auto reader = w1->Results(&c, r);
    v1::MicroBatchResult m;
    EXPECT_FALSE(reader->Read(&m));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    grpc::ClientContext c0;
    r.set_shard_id(kShardId);
    auto reader0 = w0->Results(&c0, r);
    EXPECT_FALSE(reader0->Read(&m));
    EXPECT_EQ(reader0->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  // By hand: the chain answers with an acknowledgement, the Results
  // stream brings the token.
  {
    grpc::ClientContext rc;
    v1::ResultsRequest r;
    r.set_shard_id(kShardId);
    auto results = w1->Results(&rc, r);
    v1::MicroBatchResult hello;
    ASSERT_TRUE(results->Read(&hello));  // registered
    EXPECT_EQ(hello.batch_id(), 0u);
    grpc::ClientContext ac;
    auto chain = w0->Activations(&ac);
    ASSERT_TRUE(chain->Write(micro_batch(5, {slice(3, 0, stories_prompt())})));
    v1::MicroBatchResult ack;
    ASSERT_TRUE(chain->Read(&ack));
    EXPECT_EQ(ack.batch_id(), 5u);
    EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
    EXPECT_TRUE(ack.delivered());
    EXPECT_EQ(ack.tokens_size(), 0);
    v1::MicroBatchResult direct;
    ASSERT_TRUE(results->Read(&direct));
    EXPECT_EQ(direct.batch_id(), 5u);
    ASSERT_EQ(direct.tokens_size(), 1);
    EXPECT_EQ(direct.tokens(0).seq_id(), 3u);
    EXPECT_EQ(direct.tokens(0).id(), expected[0]);
    // The Results stream gone, the chain brings whole results again.
    rc.TryCancel();
    (void)results->Finish();
    // The worker may take a few more first; each try restarts sequence 100
    // from position 0, so the tries never hold more than one sequence (the
    // link below needs a free one: max_sequences 4).
    for (int tries = 0;; ++tries) {
      ASSERT_TRUE(chain->Write(micro_batch(6 + tries, {slice(100, 0, stories_prompt())})));
      v1::MicroBatchResult answer;
      ASSERT_TRUE(chain->Read(&answer));
      ASSERT_EQ(answer.error_code(), 0) << answer.error_message();
      if (!answer.delivered()) {
        ASSERT_EQ(answer.tokens_size(), 1);
        EXPECT_EQ(answer.tokens(0).id(), expected[0]);
        break;
      }
      ASSERT_LT(tries, 100) << "still acknowledged after the Results stream ended";
    }
    chain->WritesDone();
    (void)chain->Finish();
  }
  // Through a link that holds the Results stream: the whole model's ids.
  Results results;
  worker::GrpcLinkOptions options = links().link_options(w0_->address());
  options.results_tls_name = "w1";
  options.answer_timeout = std::chrono::seconds(30);
  options.results_from = w1_->address();
  options.shard_id = kShardId;
  auto link = worker::make_grpc_link(w0_->address(), results.callback(), options);
  ASSERT_TRUE(link.ok()) << link.status();
  std::vector<int32_t> ids;
  v1::MicroBatch b = micro_batch(1, {slice(9, 0, stories_prompt())});
  int pos = static_cast<int>(stories_prompt().size());
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE((*link)->send(b).ok());
    auto r = results.next();
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->error_code(), 0) << r->error_message();
    ASSERT_EQ(r->batch_id(), static_cast<uint64_t>(i + 1));
    ASSERT_EQ(r->tokens_size(), 1);
    ids.push_back(r->tokens(0).id());
    b = micro_batch(i + 2, {slice(9, pos++, {ids.back()})});
  }
  EXPECT_EQ(ids, expected);
  // One result per micro-batch: no acknowledgement reaches the callback.
  EXPECT_FALSE(results.next(std::chrono::seconds(0)).has_value());
}

struct Hostile {
  const char* what;
  bool to_first;  // to w0 (takes tokens) or w1 (takes hidden rows)
  v1::MicroBatch batch;
  int code;
  const char* field;
};

TEST_P(GrpcWorker, HostileMicroBatchesGetErrorsAndTheStreamGoesOn) {
  Results r0, r1;
  auto to_w0 = link_to(w0_->address(), r0);
  auto to_w1 = link_to(w1_->address(), r1);
  const int kInvalid = static_cast<int>(absl::StatusCode::kInvalidArgument);
  // Sequence 1 lives on both workers with 5 positions.
  ASSERT_TRUE(
      to_w0->send(micro_batch(1, {slice(1, 0, stories_prompt())})).ok());
  auto first = r0.next();
  ASSERT_TRUE(first && first->error_code() == 0) << first->error_message();

  std::vector<Hostile> cases;
  v1::MicroBatch b = micro_batch(2, {slice(1, 5, {42})}, 2);
  cases.push_back({"wrong row count", false, b, kInvalid,
                   "hidden: 512 bytes, expected 256"});
  b = micro_batch(2, {slice(1, 5, {42})});
  b.set_hidden(std::string(100, '\0'));
  cases.push_back(
      {"wrong hidden size", false, b, kInvalid, "hidden: 100 bytes"});
  b = micro_batch(2, {slice(1, 5, {42})}, 1);
  b.mutable_hidden()->resize(255);
  cases.push_back(
      {"truncated payload", false, b, kInvalid, "hidden: 255 bytes"});
  cases.push_back({"beyond the context", true,
                   micro_batch(2, {slice(1, 5, std::vector<int32_t>(30, 1))}),
                   static_cast<int>(absl::StatusCode::kOutOfRange),
                   "slices[0]: start_pos 5 + 30 rows exceed n_ctx 32"});
  cases.push_back({"unknown sequence", true,
                   micro_batch(2, {slice(999, 3, {1})}),
                   static_cast<int>(absl::StatusCode::kNotFound),
                   "slices[0].seq_id: sequence 999"});
  cases.push_back(
      {"huge row count", true,
       micro_batch(2, {slice(3, 0, std::vector<int32_t>(100000, 1))}), kInvalid,
       "slices[0].tokens: 100000 rows exceed max_batch_rows 32"});
  b = micro_batch(2, {slice(1, 5, {1})});
  b.mutable_slices(0)->set_top_logprobs(1 << 30);
  cases.push_back(
      {"huge top_logprobs", true, b, kInvalid, "slices[0].top_logprobs"});
  cases.push_back({"huge start_pos", true,
                   micro_batch(2, {slice(1, 2147483647, {1})}), kInvalid,
                   "slices[0].start_pos: 2147483647"});
  b = micro_batch(2, {slice(1, 5, {1})});
  b.set_shard_id(12345);
  cases.push_back({"wrong shard_id", true, b, kInvalid, "shard_id: 12345"});
  cases.push_back({"bad token id", true, micro_batch(2, {slice(1, 5, {1, -7})}),
                   kInvalid, "slices[0].tokens[1]: id -7"});
  cases.push_back({"bad token id (later stage)", false,
                   micro_batch(2, {slice(1, 5, {100000})}, 1), kInvalid,
                   "slices[0].tokens[0]: id 100000"});
  cases.push_back({"duplicate seq ids", true,
                   micro_batch(2, {slice(4, 0, {1}), slice(4, 0, {1})}),
                   kInvalid, "slices[1].seq_id: 4 repeats slices[0]"});
  cases.push_back(
      {"too many slices", true,
       micro_batch(2, {slice(11, 0, {1}), slice(12, 0, {1}), slice(13, 0, {1}),
                       slice(14, 0, {1}), slice(15, 0, {1})}),
       kInvalid, "slices: 5 exceed max_sequences 4"});
  cases.push_back({"hidden on the first stage", true,
                   micro_batch(2, {slice(1, 5, {1})}, 1), kInvalid,
                   "hidden: 256 bytes on the first stage"});

  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.what);
    worker::ActivationLink& link = c.to_first ? *to_w0 : *to_w1;
    Results& results = c.to_first ? r0 : r1;
    ASSERT_TRUE(link.send(c.batch).ok());
    auto r = results.next();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->batch_id(), 2u);
    EXPECT_EQ(r->error_code(), c.code) << r->error_message();
    EXPECT_NE(r->error_message().find(c.field), std::string::npos)
        << r->error_message();
    EXPECT_NE(r->error_message().find(c.to_first ? "worker w0" : "worker w1"),
              std::string::npos)
        << r->error_message();
    // A valid micro-batch still works: a fresh sequence 20 through both.
    ASSERT_TRUE(to_w0->send(micro_batch(3, {slice(20, 0, {1, 2})})).ok());
    auto ok = r0.next();
    ASSERT_TRUE(ok.has_value());
    EXPECT_EQ(ok->error_code(), 0) << ok->error_message();
    EXPECT_EQ(ok->tokens_size(), 1);
  }
  EXPECT_TRUE(to_w0->healthy());
  EXPECT_TRUE(to_w1->healthy());
}

TEST_P(GrpcWorker, OversizedMessagesEndTheStreamNotTheWorker) {
  Results results;
  auto big = link_to(w1_->address(), results, 512 << 20);
  v1::MicroBatch b = micro_batch(1, {slice(1, 0, {1})});
  b.set_hidden(std::string(size_t{80} << 20, '\0'));  // 80 MiB > 64 MiB
  ASSERT_TRUE(big->send(b).ok());
  auto r = results.next();
  ASSERT_TRUE(r.has_value());
  // gRPC refuses the message and ends the stream (the client sees the
  // stream end); the link reports it, naming the worker.
  EXPECT_NE(r->error_code(), 0);
  EXPECT_NE(r->error_message().find(w1_->address()), std::string::npos)
      << r->error_message();
  // The worker is up: a new stream works.
  Results again;
  auto link = link_to(w0_->address(), again);
  ASSERT_TRUE(link->send(micro_batch(2, {slice(1, 0, stories_prompt())})).ok());
  auto ok = again.next();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->error_code(), 0) << ok->error_message();
}

TEST_P(GrpcWorker, LoadShardChecksPathBudgetAndFields) {
  v1::LoadShardRequest r =
      shard_request(stories_path(), kCut, n_layer_, n_layer_, 64, 4, 32);
  r.set_model_path("/etc/passwd");
  grpc::Status st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("model_path: /etc/passwd"),
            std::string::npos)
      << st.error_message();
  r.set_model_path("../../etc/passwd");
  st = load_shard(w1_->address(), r);
  EXPECT_NE(st.error_code(), grpc::StatusCode::OK);
  r.set_model_path("absent.gguf");
  st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  // The model directory itself is inside it, but not a file (it was
  // reported as "outside the model directories").
  r.set_model_path(".");
  st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("model_path: . is the model directory"), std::string::npos)
      << st.error_message();

  r = shard_request(stories_path(), kCut, n_layer_, n_layer_, 2048, 1024, 32);
  r.set_kv_type("f32");  // 3 blocks x 768 B x 2048 x 1024 > 1 GiB
  st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("over the memory budget of 1073741824"),
            std::string::npos)
      << st.error_message();

  r = shard_request(stories_path(), kCut, n_layer_, n_layer_, 64, 4, 32);
  r.set_embedding(true);
  st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("embedding: true"), std::string::npos)
      << st.error_message();
  r = shard_request(stories_path(), kCut, n_layer_ + 1, n_layer_, 64, 4, 32);
  r.set_head(false);
  r.set_next_stage("127.0.0.1:9");
  st = load_shard(w1_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("last_block: 6 exceeds"), std::string::npos)
      << st.error_message();
  // The next stage's name (for messages) is bounded.
  r = shard_request("stories260K.gguf", 0, kCut, n_layer_, 32, 4, 32);
  r.set_next_stage(w1_->address());
  r.set_next_stage_name(std::string(129, 'n'));
  st = load_shard(w0_->address(), r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("next_stage_name: 129 bytes exceed 128"), std::string::npos)
      << st.error_message();

  // None of that disturbed the loaded shard.
  Results results;
  auto link = link_to(w0_->address(), results);
  ASSERT_TRUE(link->send(micro_batch(1, {slice(1, 0, stories_prompt())})).ok());
  auto ok = results.next();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->error_code(), 0) << ok->error_message();
}

TEST_P(GrpcWorker, KilledNextWorkerIsReportedByNameAndComesBack) {
  Results results;
  auto link = link_to(w0_->address(), results);
  ASSERT_NO_FATAL_FAILURE(first_batch(*link, results));

  const int port = w1_->port();
  const std::string w1_address = w1_->address();
  w1_->kill(SIGKILL);
  w1_->reap();
  const auto t0 = Clock::now();
  ASSERT_TRUE(link->send(micro_batch(2, {slice(1, 5, {42})})).ok());
  auto r = results.next(std::chrono::seconds(10));
  ASSERT_TRUE(r.has_value()) << "no result within 10 s";
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r->error_code(), static_cast<int>(absl::StatusCode::kUnavailable))
      << r->error_message();
  EXPECT_NE(r->error_message().find(w1_address), std::string::npos)
      << r->error_message();
  EXPECT_TRUE(link->healthy());  // w0 itself is fine

  // w1 restarts on the same port and is reloaded: w0 reconnects.
  start_w1(port);
  ASSERT_TRUE(link->send(micro_batch(3, {slice(1, 0, stories_prompt())})).ok());
  auto ok = results.next();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->error_code(), 0) << ok->error_message();
  EXPECT_EQ(ok->tokens_size(), 1);
}

TEST_P(GrpcWorker, StoppedNextWorkerIsReportedWithin10Seconds) {
  Results results;
  auto link = link_to(w0_->address(), results);
  ASSERT_NO_FATAL_FAILURE(first_batch(*link, results));

  w1_->kill(SIGSTOP);
  ASSERT_TRUE(w1_->wait_stopped()) << "worker 1 never stopped";
  const auto t0 = Clock::now();
  ASSERT_TRUE(link->send(micro_batch(2, {slice(1, 5, {42})})).ok());
  auto r = results.next(std::chrono::seconds(10));
  ASSERT_TRUE(r.has_value()) << "no result within 10 s";
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
  EXPECT_TRUE(r->error_code() ==
                  static_cast<int>(absl::StatusCode::kDeadlineExceeded) ||
              r->error_code() ==
                  static_cast<int>(absl::StatusCode::kUnavailable))
      << r->error_code() << " " << r->error_message();
  EXPECT_NE(r->error_message().find(w1_->address()), std::string::npos)
      << r->error_message();
  std::cerr << "stopped worker reported after " << s
            << " s: " << r->error_message() << "\n";
  w1_->kill(SIGCONT);
}

// A worker stopped by SIGTERM (its own orderly stop) is reported as
// stopping, by its name, UNAVAILABLE: the last stage answers the micro-
// batches that still reach it so, instead of FAILED_PRECONDITION "no shard
// loaded" (it has unloaded), and the first stage says it is the one
// stopping rather than blaming the next stage whose link it closed.
TEST_P(GrpcWorker, TerminatedWorkerIsReportedAsStoppingByName) {
  Results results;
  auto link = link_to(w0_->address(), results);
  ASSERT_NO_FATAL_FAILURE(first_batch(*link, results));

  w1_->kill(SIGTERM);
  ASSERT_TRUE(wait_until_stopping(w1_->address())) << "w1 still serving 60 s after SIGTERM";
  ASSERT_TRUE(link->send(micro_batch(2, {slice(1, 5, {42})})).ok());
  auto r = results.next(std::chrono::seconds(10));
  ASSERT_TRUE(r.has_value()) << "no result within 10 s";
  EXPECT_EQ(r->error_code(), static_cast<int>(absl::StatusCode::kUnavailable))
      << r->error_message();
  EXPECT_NE(r->error_message().find("w1"), std::string::npos) << r->error_message();
  w1_->reap();

  w0_->kill(SIGTERM);
  ASSERT_TRUE(wait_until_stopping(w0_->address())) << "w0 still serving 60 s after SIGTERM";
  // w0 gives in-flight streams 2 s before it cancels them: this one is up.
  ASSERT_TRUE(link->send(micro_batch(3, {slice(1, 5, {42})})).ok());
  auto r0 = results.next(std::chrono::seconds(10));
  ASSERT_TRUE(r0.has_value()) << "no result within 10 s";
  EXPECT_EQ(r0->error_code(), static_cast<int>(absl::StatusCode::kUnavailable))
      << r0->error_message();
  EXPECT_NE(r0->error_message().find("worker w0 is stopping"), std::string::npos)
      << r0->error_message();
  w0_->reap();
}

INSTANTIATE_TEST_SUITE_P(Links, GrpcWorker, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "mtls" : "plaintext");
                         });

}  // namespace
}  // namespace strata::worker_test
