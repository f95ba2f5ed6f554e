// The gRPC ActivationLink against in-process fake workers: a peer that
// never answers hits the answer deadline (its pings are answered, so only
// the deadline can catch it); an unreachable peer fails at once; results
// keep their order.
#include "worker/grpc_link.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Answers each micro-batch with its batch_id, or never (silent).
class FakeWorker final : public v1::Worker::Service {
 public:
  explicit FakeWorker(bool silent) : silent_(silent) {}
  grpc::Status Activations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::MicroBatchResult, v1::MicroBatch>* stream)
      override {
    v1::MicroBatch b;
    while (stream->Read(&b)) {
      if (silent_) continue;
      v1::MicroBatchResult r;
      r.set_batch_id(b.batch_id());
      stream->Write(r);
    }
    while (silent_ && !context->IsCancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return grpc::Status::OK;
  }

 private:
  bool silent_;
};

struct Served {
  explicit Served(bool silent) : service(silent) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    grpc_tls::add_server_limits(b, grpc_tls::ServerLimits());
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~Served() {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(100));
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  FakeWorker service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

struct Collect {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<v1::MicroBatchResult> got;
  ActivationLink::ResultCallback cb() {
    return [this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> l(mu);
      got.push_back(std::move(r));
      cv.notify_all();
    };
  }
  bool wait(size_t n, std::chrono::seconds t) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, t, [&] { return got.size() >= n; });
  }
};

// Plaintext on loopback (mutual TLS: tls_test.cc).
GrpcLinkOptions plain() {
  GrpcLinkOptions o;
  o.tls.insecure = true;
  return o;
}

v1::MicroBatch batch(uint64_t id) {
  v1::MicroBatch b;
  b.set_batch_id(id);
  return b;
}

TEST(GrpcLink, ResultsComeBackInOrder) {
  Served peer(false);
  ASSERT_NE(peer.server, nullptr);
  Collect c;
  auto link = make_grpc_link(peer.address(), c.cb(), plain());
  ASSERT_TRUE(link.ok());
  for (uint64_t i = 0; i < 50; ++i) ASSERT_TRUE((*link)->send(batch(i)).ok());
  ASSERT_TRUE(c.wait(50, std::chrono::seconds(10)));
  for (uint64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(c.got[i].batch_id(), i);
    EXPECT_EQ(c.got[i].error_code(), 0);
  }
  EXPECT_EQ((*link)->peer(), "worker " + peer.address());
  (*link)->close(worker::kLinkClosed);
  EXPECT_FALSE((*link)->healthy());
  EXPECT_EQ((*link)->send(batch(99)).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcLink, SilentPeerHitsTheAnswerDeadline) {
  Served peer(true);
  Collect c;
  GrpcLinkOptions options = plain();
  options.answer_timeout = std::chrono::milliseconds(500);
  auto link = make_grpc_link(peer.address(), c.cb(), options);
  ASSERT_TRUE(link.ok());
  const auto t0 = Clock::now();
  ASSERT_TRUE((*link)->send(batch(1)).ok());
  ASSERT_TRUE((*link)->send(batch(2)).ok());
  ASSERT_TRUE(c.wait(2, std::chrono::seconds(5)));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(c.got[i].batch_id(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(c.got[i].error_code(),
              static_cast<int>(absl::StatusCode::kDeadlineExceeded));
    EXPECT_NE(c.got[i].error_message().find(
                  "worker " + peer.address() +
                  ": no answer to micro-batch 1 within 0.5 s"),
              std::string::npos)
        << c.got[i].error_message();
  }
  EXPECT_FALSE((*link)->healthy());
  EXPECT_EQ((*link)->send(batch(3)).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcLink, UnreachablePeerFailsAtOnce) {
  int port = 0;
  {
    Served gone(false);  // a port that was free a moment ago
    port = gone.port;
  }
  Collect c;
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto link = make_grpc_link(address, c.cb(), plain());
  ASSERT_TRUE(link.ok());
  // The refused connection may break the link before send() runs (send then
  // fails at once) or after it (the micro-batch gets an error result). Both
  // are the contract of ActivationLink; either must be UNAVAILABLE and name
  // the peer, and come well inside the 5 s wait.
  const absl::Status sent = (*link)->send(batch(7));
  if (sent.ok()) {
    ASSERT_TRUE(c.wait(1, std::chrono::seconds(5)));
    EXPECT_EQ(c.got[0].batch_id(), 7u);
    EXPECT_EQ(c.got[0].error_code(),
              static_cast<int>(absl::StatusCode::kUnavailable));
    EXPECT_NE(c.got[0].error_message().find("worker " + address),
              std::string::npos)
        << c.got[0].error_message();
  } else {
    EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(sent.message().find("worker " + address), std::string::npos)
        << sent.message();
  }
  EXPECT_FALSE((*link)->healthy());
  EXPECT_FALSE(make_grpc_link("", c.cb(), plain()).ok());
}

}  // namespace
}  // namespace strata::worker
