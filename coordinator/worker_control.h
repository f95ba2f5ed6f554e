// WorkerControl: the coordinator's control plane to one worker — Describe,
// LoadShard, MakeNcclId, LinkNccl, FreeSequence, Health (strata.v1.Worker,
// worker.proto). Two
// implementations: gRPC to a `strata-worker` process
// (make_grpc_worker_control), and a Stage in this process for single-node
// mode (coordinator/single_node.h). Activations do not pass here: they
// travel over ActivationLinks.
//
// Threads: any thread may call any method; calls may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/grpc_tls.h"
#include "strata/v1/worker.pb.h"

namespace strata::coordinator {

class WorkerControl {
 public:
  virtual ~WorkerControl() = default;

  // "127.0.0.1:50061"; "in-process 0" in single-node mode.
  virtual const std::string& address() const = 0;

  // Each call ends by `deadline` (DEADLINE_EXCEEDED) or UNAVAILABLE when
  // the worker cannot be reached; other codes are the worker's answer.
  // Every error's message starts with the worker's label (worker_label(),
  // cluster_config.h), so callers pass it on as it is.
  virtual absl::StatusOr<v1::DescribeResponse> describe(
      absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::ShardInfo> load_shard(
      const v1::LoadShardRequest& request, absl::Duration deadline) = 0;
  // A new ncclUniqueId (128 bytes) for a communicator this worker will be
  // rank 0 of (worker.proto MakeNcclId); FailedPrecondition from a worker
  // that makes no NCCL links.
  virtual absl::StatusOr<std::string> make_nccl_id(absl::Duration deadline) = 0;
  // Links the loaded shard to its neighbours over NCCL (worker.proto
  // LinkNccl); the shard as linked.
  virtual absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest& request,
                                                  absl::Duration deadline) = 0;
  virtual absl::StatusOr<int> free_sequences(
      uint64_t shard_id, std::span<const uint64_t> seq_ids,
      absl::Duration deadline) = 0;
  virtual absl::StatusOr<v1::WorkerHealthResponse> health(
      absl::Duration deadline) = 0;
};

// A client of the strata.v1.Worker service at `address` (host:port). The
// channel reconnects quickly (backoff 100 ms .. 1 s) so a restarted worker
// is seen within about a second; HTTP/2 keepalive notices a stopped one.
// Errors name the worker as `label` ("worker w1 (HOST:PORT)"; empty:
// "worker HOST:PORT") and the call. `tls` (resolved, proto/grpc_tls.h):
// mutual TLS, the worker's certificate must carry `tls_name` (its `name:`),
// or plaintext on loopback; a channel that cannot be made (no TLS config,
// plaintext to a non-loopback address) answers every call with that error.
std::unique_ptr<WorkerControl> make_grpc_worker_control(
    const std::string& address, const std::string& label,
    const grpc_tls::TlsConfig& tls, const std::string& tls_name);

}  // namespace strata::coordinator
