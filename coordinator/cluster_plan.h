// What a cluster config would do with a model, without loading anything:
// the placement of its blocks (placement::plan_auto / check_explicit, the
// planner the coordinator runs), each shard's memory (weights, KV cache,
// scratch) and the predicted decode and prefill tok/s from each worker's
// read bandwidth and FLOP rate. `strata plan` prints it; the coordinator
// builds its placement budgets with worker_budgets() below.
//
// Predictions (roofline bounds, not measurements):
//   decode   a token reads every weight of a stage once (placement::
//            stage_work: the blocks' active bytes, and the output head on
//            the last stage), so a stage takes stage_work / read bandwidth
//            per token, plus the worker's fixed cost of a decode matmul
//            (its thread hand-offs) for each matrix the token multiplies
//            (placement::stage_matmuls); one stream passes the stages one
//            after another, so its rate is 1 / sum over stages. KV reads
//            and the vector work (norms, RoPE, attention) are left out:
//            the figure is an upper bound, close for models whose weights
//            dwarf their KV.
//   prefill  2 FLOPs per weight a token multiplies (placement::
//            stage_params), at the worker's FLOP rate; prompt chunks fill
//            the pipeline, so a long prompt moves at the slowest stage's
//            rate (min over stages). Attention's FLOPs are left out.
// A figure is 0 (unknown) when a worker's rate is.
//
// Scratch: the cpu backend's step buffers for max_batch_rows rows
// (worker/cpu/cpu_backend.cc: residual, normed input, q/k/v, fused qkv,
// attention output, projection, gate|up, RoPE tables, matmul activation
// scratch; on a mixture-of-experts model the routing and grouped expert
// buffers) and attention scratch per thread for n_ctx keys
// (kernels/cpu/simd/attention.cc), plus the logits of max_sequences rows on
// the last stage. It is reported beside the shard, not counted against the
// budget (the worker's LoadShard check counts weights + KV, as placement).
//
// Thread-safety: plain functions over plain data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/cluster_config.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/placement.h"

namespace strata::coordinator {

// One worker as planning sees it: from its Describe, or declared in the
// config (`declared: true`).
struct WorkerFigures {
  std::string name;  // worker_label() of its config entry
  bool declared = false;
  uint64_t memory_budget = 0;   // bytes; 0: unknown (no limit)
  int threads = 0;              // 0: unknown
  // The large-working-set read rate (a declared figure is this one);
  // 0: unknown.
  double read_bytes_per_s = 0;
  double flops_per_s = 0;  // 0: unknown
  // Seconds one decode matmul costs besides its weight reads; 0: unknown
  // (left out).
  double matmul_overhead_s = 0;
  // The decode matmul's read rate by working-set size (Describe's
  // read_rates); empty: read_bytes_per_s at every size.
  struct ReadPoint {
    uint64_t bytes = 0;
    double bytes_per_s = 0;
  };
  std::vector<ReadPoint> read_points;
};

// The read rate of `w` over `bytes` of weights a token: between two points
// interpolated linearly in log(bytes); below the smallest point its rate,
// past the largest the largest's. Points with a rate that is not known
// (see plan_cluster) or no bytes are skipped; none left: read_bytes_per_s
// (itself 0 when not known). Points need not be sorted.
double read_rate_at(const WorkerFigures& w, uint64_t bytes);

// Placement budgets in worker order. Speed: the read bandwidth when every
// worker has one (decode reads weights: bandwidth is its pace), else the
// threads (as before measured rates existed), else unknown (equal). A rate
// that is not finite, not positive or past 1e18/s counts as unknown.
std::vector<placement::WorkerBudget> worker_budgets(
    std::span<const WorkerFigures> workers);

struct StagePlan {
  placement::ShardPlan shard;
  WorkerFigures worker;
  uint64_t scratch_bytes = 0;
  uint64_t read_bytes_per_token = 0;  // placement::stage_work
  uint64_t params_per_token = 0;      // placement::stage_params
  int matmuls_per_token = 0;          // placement::stage_matmuls
  // read_rate_at(worker, read_bytes_per_token): the rate decode_s_per_token
  // uses; 0: unknown.
  double read_bytes_per_s = 0;
  double decode_s_per_token = 0;      // 0: unknown
  double prefill_tok_s = 0;           // 0: unknown
};

struct ClusterPlan {
  std::string architecture;
  int n_layer = 0;
  int n_expert = 0;
  int n_expert_used = 0;
  placement::KvShape kv;
  int max_batch_rows = 0;
  uint64_t model_weight_bytes = 0;  // every tensor once
  std::vector<StagePlan> stages;
  double decode_tok_s = 0;   // one stream; 0: unknown
  double prefill_tok_s = 0;  // a long prompt; 0: unknown
};

// Bytes of the cpu backend's scratch for a stage (see above).
uint64_t scratch_bytes(const arch::Hyperparameters& hp,
                       const placement::ShardPlan& shard, int n_vocab,
                       int max_batch_rows, int max_sequences, int n_ctx,
                       int threads);

// Plans `config`'s workers (figures in config order) for `model`. Rates
// that are not finite, not positive or past 1e18/s count as unknown.
// Errors: the model's (sizes, context_length past the model's), and
// placement's: InvalidArgument for malformed explicit ranges,
// ResourceExhausted with the numbers when no split fits the budgets.
absl::StatusOr<ClusterPlan> plan_cluster(
    const ClusterConfig& config, const gguf::GgufModel& model,
    const arch::Hyperparameters& hp, std::span<const WorkerFigures> workers);

}  // namespace strata::coordinator
