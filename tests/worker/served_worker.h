// A WorkerService served in this process on a loopback gRPC server (any
// port), for tests of the worker's RPCs and of clusters of such workers.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "strata/v1/worker.grpc.pb.h"
#include "worker/frame_channel.h"
#include "worker/worker_service.h"

namespace strata::worker_test {

// One WorkerService on 127.0.0.1 (any port).
class ServedWorker {
 public:
  // `transport`: the worker makes NCCL links over it (null: none).
  ServedWorker(const std::string& name, const std::string& model_dir,
               int answer_timeout_ms,
               std::shared_ptr<worker::FrameTransport> transport = nullptr) {
    worker::WorkerConfig config;
    config.name = name;
    config.model_dirs = {model_dir};
    config.memory_budget_bytes = uint64_t{1} << 30;
    config.threads = 1;
    config.answer_timeout_ms = answer_timeout_ms;
    config.tls.insecure = true;  // loopback: the link to the next stage is plaintext
    service_ = std::make_unique<worker::WorkerService>(config);
    service_->set_frame_transport(std::move(transport));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
    service_->set_bound_address(address_);
  }
  ~ServedWorker() {
    service_->shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
  }
  const std::string& address() const { return address_; }
  worker::WorkerService& service() { return *service_; }
  std::unique_ptr<v1::Worker::Stub> stub(
      const grpc::ChannelArguments& args = {}) const {
    return v1::Worker::NewStub(grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args));
  }
  grpc::Status load(const v1::LoadShardRequest& r) const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    v1::LoadShardResponse response;
    return stub()->LoadShard(&context, r, &response);
  }

 private:
  std::unique_ptr<worker::WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// Tests of ServedWorkers on stories260K (skipped, saying so, when it is
// absent): its layer count and the directory workers may load it from.
class StoriesWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(stories_path()))
      GTEST_SKIP() << stories_path() << " absent (../shared/models)";
    n_layer_ = model_layers(stories_path());
    model_dir_ = std::filesystem::path(stories_path()).parent_path().string();
  }
  int n_layer_ = 0;
  std::string model_dir_;
};

}  // namespace strata::worker_test
