// ShardPlan: a strata.v1.LoadShardRequest checked against the limits of
// worker.proto and against the model file, with the shard's sizes — what a
// worker decides before it loads any weight (LoadShard checks the memory
// budget with it, then frees the old shard, then loads the new one).
//
// Ownership: the plan holds the opened model (a read-only mapping; no
// tensor data is touched until the stage loads). Threads: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"
#include "strata/v1/worker.pb.h"
#include "worker/stage.h"

namespace strata::worker {

// Limits of LoadShardRequest (worker.proto).
inline constexpr int kMaxContext = 1 << 20;
inline constexpr int kMaxSequences = 1024;
inline constexpr int kMaxBatchRows = 4096;
inline constexpr int kMaxPrefixBlocks = 1 << 20;
inline constexpr int kMaxPathBytes = 4096;
inline constexpr int kMaxAddressBytes = 256;

struct ShardPlan {
  v1::ShardInfo info;  // every field filled (weight_bytes, kv_bytes, ...)
  std::shared_ptr<const gguf::GgufModel> model;
  arch::Hyperparameters hp;
  GgmlType kv_type = GgmlType::kF16;
  bool trace = false;
};

// The checks that need no file: shard_id, path length, block range order,
// counts, kv_type, next_stage. INVALID_ARGUMENT naming the field.
absl::Status check_load_request(const v1::LoadShardRequest& request);

// LinkNccl's checks against the loaded `shard`: its shard_id, at least one
// side given, each id kNcclIdBytes, a stage on that side. INVALID_ARGUMENT
// naming the field ("next.forward_id: 100 bytes, expected 128").
absl::Status check_link_nccl(const v1::LinkNcclRequest& request, const v1::ShardInfo& shard);

// check_load_request, then opens request.model_path (as given: the caller
// resolves and confines it) and checks the range, the embedding and head
// flags and n_ctx against the model. Errors name the field
// ("last_block: 40 exceeds the model's 30 blocks") or come from the GGUF
// reader (NOT_FOUND for a missing file).
absl::StatusOr<ShardPlan> plan_shard(const v1::LoadShardRequest& request);

// Loads the planned shard onto a cpu backend with n_threads threads; with
// backend "cuda" / "cuda:N" onto GPU N (make_cuda_backend's errors: a build
// without CUDA, no such device, and for now its unwritten forward pass); or,
// with backend "fake", onto a FakeBackend of the shard's shape (no weights
// are read).
absl::StatusOr<std::unique_ptr<Stage>> load_planned_stage(
    ShardPlan plan, int n_threads, const StageOptions& options,
    std::string_view backend = "cpu");

// The Stage over any backend (a fake in tests): `plan.info` must describe
// the backend's shard (n_embd, embedding and head as its range says);
// plan.model may be null.
std::unique_ptr<Stage> make_stage(ShardPlan plan, std::unique_ptr<Backend> backend,
                                  const StageOptions& options);

// Bytes of the KV cache of one position of one sequence over the shard's
// blocks (keys and values of every block).
uint64_t kv_bytes_per_position(const arch::Hyperparameters& hp, int n_blocks,
                               GgmlType kv_type);

}  // namespace strata::worker
