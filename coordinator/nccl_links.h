// Which links of a pipeline go over NCCL, and setting them up: the
// coordinator's half of the NCCL activation link (worker/frame_link.h,
// docs/gpu.md "The NCCL link"). Cluster (coordinator/cluster.h) calls
// choose_nccl_links before any shard loads and link_over_nccl once all
// have.
//
// Thread-safety: plain functions; link_over_nccl makes blocking RPCs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/cluster_config.h"
#include "coordinator/worker_control.h"
#include "strata/v1/worker.pb.h"

namespace strata::coordinator {

// A pipeline stage's worker as the choice sees it.
struct StageWorker {
  std::string label;                          // "worker w1 (host:port)", for messages
  const v1::DescribeResponse* described = nullptr;  // null: not described yet
};

// For each stage but the last, whether its link to the next stage is NCCL
// (entry k: stages[k] -> stages[k + 1]; the last entry is always false):
// under kGrpc never; else when both workers Describe nccl_link and are not
// on the same GPU (gpu_uuid: NCCL refuses two ranks on one GPU). Under
// kAuto the other pairs stay on gRPC; under kNccl they are refused:
// FailedPrecondition naming the worker (or both, on one GPU).
absl::StatusOr<std::vector<bool>> choose_nccl_links(ActivationLinkKind kind,
                                                    const std::vector<StageWorker>& stages);

// Once every stage of shard `shard_id` loaded, links the pairs `nccl`
// marks: each communicator's id from the worker that is its rank 0 (its
// MakeNcclId; made only now, since each holds NCCL's bootstrap listener
// until both ranks join), then LinkNccl to every stage with an NCCL
// neighbour, last stage first. Returns, per stage, the ShardInfo its
// LinkNccl answered (nullopt for a stage not linked). The first failing
// RPC's status otherwise (ids already made are then spent: the pipeline
// is loaded again with new ones).
absl::StatusOr<std::vector<std::optional<v1::ShardInfo>>> link_over_nccl(
    const std::vector<WorkerControl*>& stages, uint64_t shard_id, const std::vector<bool>& nccl,
    absl::Duration call_deadline);

}  // namespace strata::coordinator
