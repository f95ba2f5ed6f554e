// WorkerControl over gRPC: one channel per worker, a deadline on every call.
#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "coordinator/worker_control.h"
#include "proto/grpc_status.h"
#include "proto/grpc_tls.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata::coordinator {
namespace {

absl::Status from_grpc(const grpc::Status& s, const std::string& label,
                       const char* call) {
  return to_absl_status(s, absl::StrCat(label, ": ", call));
}

class GrpcWorkerControl final : public WorkerControl {
 public:
  GrpcWorkerControl(const std::string& address, const std::string& label,
                    const grpc_tls::TlsConfig& tls,
                    const std::string& tls_name)
      : address_(address), label_(label.empty() ? "worker " + address : label) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(64 << 20);
    // Keepalive and, with TLS, the worker's certificate checked for
    // tls_name (its `name:`).
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        grpc_tls::make_channel(tls, address, tls_name, args);
    if (!channel.ok()) {
      refused_ = absl::Status(channel.status().code(),
                              absl::StrCat(label_, ": ", channel.status().message()));
      return;
    }
    channel_ = *std::move(channel);
    stub_ = v1::Worker::NewStub(channel_);
  }

  const std::string& address() const override { return address_; }

  absl::StatusOr<v1::DescribeResponse> describe(
      absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::DescribeResponse out;
    grpc::Status s = stub_->Describe(&ctx, v1::DescribeRequest(), &out);
    if (!s.ok()) return from_grpc(s, label_, "Describe");
    return out;
  }

  absl::StatusOr<v1::ShardInfo> load_shard(const v1::LoadShardRequest& request,
                                           absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::LoadShardResponse out;
    grpc::Status s = stub_->LoadShard(&ctx, request, &out);
    if (!s.ok()) return from_grpc(s, label_, "LoadShard");
    return out.shard();
  }

  absl::StatusOr<std::string> make_nccl_id(absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::MakeNcclIdResponse out;
    grpc::Status s = stub_->MakeNcclId(&ctx, v1::MakeNcclIdRequest(), &out);
    if (!s.ok()) return from_grpc(s, label_, "MakeNcclId");
    return std::move(*out.mutable_id());
  }

  absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest& request,
                                          absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::LinkNcclResponse out;
    grpc::Status s = stub_->LinkNccl(&ctx, request, &out);
    if (!s.ok()) return from_grpc(s, label_, "LinkNccl");
    return out.shard();
  }

  absl::StatusOr<int> free_sequences(uint64_t shard_id,
                                     std::span<const uint64_t> seq_ids,
                                     absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::FreeSequenceRequest req;
    req.set_shard_id(shard_id);
    for (uint64_t id : seq_ids) req.add_seq_ids(id);
    v1::FreeSequenceResponse out;
    grpc::Status s = stub_->FreeSequence(&ctx, req, &out);
    if (!s.ok()) return from_grpc(s, label_, "FreeSequence");
    return out.freed();
  }

  absl::StatusOr<v1::WorkerHealthResponse> health(
      absl::Duration deadline) override {
    if (!refused_.ok()) return refused_;
    grpc::ClientContext ctx;
    set_deadline(&ctx, deadline);
    v1::WorkerHealthResponse out;
    grpc::Status s = stub_->Health(&ctx, v1::WorkerHealthRequest(), &out);
    if (!s.ok()) return from_grpc(s, label_, "Health");
    return out;
  }

 private:
  static void set_deadline(grpc::ClientContext* ctx, absl::Duration d) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(d));
  }

  std::string address_;
  std::string label_;  // in messages
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  absl::Status refused_;  // no channel could be made: every call's answer
};

}  // namespace

std::unique_ptr<WorkerControl> make_grpc_worker_control(
    const std::string& address, const std::string& label,
    const grpc_tls::TlsConfig& tls, const std::string& tls_name) {
  return std::make_unique<GrpcWorkerControl>(address, label, tls, tls_name);
}

}  // namespace strata::coordinator
