// The strata.v1.Inference gRPC service (inference.proto) over a Cluster:
// Generate (a server stream of token deltas and one final `done`), Embed
// (embedding.h), Tokenize, Detokenize, ListModels, Health, ClusterStatus.
//
// Every request field is checked against the bounds stated in
// inference.proto before anything runs (prepare_prompt, prompt.h, which the
// HTTP front end shares); a violation is INVALID_ARGUMENT naming the field
// ("max_tokens: 10000000 exceeds 1048576"), a prompt longer than the
// context OUT_OF_RANGE. Handlers are thin: check, call the domain
// (prepare_prompt, tokenizer, Scheduler), convert absl::Status to
// grpc::Status (proto/grpc_status.h).
//
// With an API key, every call but Health needs the metadata
// `authorization: Bearer KEY` (UNAUTHENTICATED otherwise).
//
// Threads: gRPC's sync server calls the handlers on its own threads, many
// at once; each Generate blocks its thread until the stream ends (client
// cancellation and deadlines are polled every 50 ms).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "coordinator/prompt.h"
#include "strata/v1/inference.grpc.pb.h"

namespace strata::coordinator {

class InferenceService final : public v1::Inference::Service {
 public:
  // Borrows `cluster` (it must outlive the service). `api_key` empty: no
  // authentication.
  explicit InferenceService(Cluster& cluster, std::string api_key = "");

  grpc::Status Generate(grpc::ServerContext* context,
                        const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer)
      override;
  grpc::Status Embed(grpc::ServerContext* context, const v1::EmbedRequest* request,
                     v1::EmbedResponse* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context,
                        const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context,
                          const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context,
                          const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context,
                      const v1::HealthRequest* request,
                      v1::HealthResponse* response) override;
  grpc::Status ClusterStatus(grpc::ServerContext* context,
                             const v1::ClusterStatusRequest* request,
                             v1::ClusterStatusResponse* response) override;

 private:
  absl::Status check_model(const std::string& model) const;
  absl::Status check_auth(const grpc::ServerContext& context) const;

  Cluster& cluster_;
  v1::ModelInfo info_;
  const std::string api_key_;
};

// A running gRPC server for `service` on `listen` (host:port; port 0 picks a
// free one). *bound_port receives the port. Unavailable when it cannot
// bind.
absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc_server(
    grpc::Service& service, const std::string& listen, int* bound_port);

}  // namespace strata::coordinator
