#include "coordinator/cluster_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/prefix_index.h"

namespace strata::coordinator {

namespace {

// A rate from a worker's Describe or a config: NaN, infinities, zero,
// negatives and absurd values (past 1e18 a second) are unknown (0).
double known_rate(double rate) {
  return std::isfinite(rate) && rate > 0 && rate <= 1e18 ? rate : 0;
}

}  // namespace

double read_rate_at(const WorkerFigures& w, uint64_t bytes) {
  std::vector<WorkerFigures::ReadPoint> points;
  for (const WorkerFigures::ReadPoint& p : w.read_points) {
    if (p.bytes > 0 && known_rate(p.bytes_per_s) > 0) points.push_back(p);
  }
  if (points.empty()) return known_rate(w.read_bytes_per_s);
  std::sort(points.begin(), points.end(),
            [](const WorkerFigures::ReadPoint& a,
               const WorkerFigures::ReadPoint& b) { return a.bytes < b.bytes; });
  if (bytes <= points.front().bytes) return points.front().bytes_per_s;
  for (size_t i = 1; i < points.size(); ++i) {
    const WorkerFigures::ReadPoint& lo = points[i - 1];
    const WorkerFigures::ReadPoint& hi = points[i];
    if (bytes > hi.bytes) continue;
    if (hi.bytes == lo.bytes) return hi.bytes_per_s;
    const double t = std::log(static_cast<double>(bytes) / lo.bytes) /
                     std::log(static_cast<double>(hi.bytes) / lo.bytes);
    return lo.bytes_per_s + t * (hi.bytes_per_s - lo.bytes_per_s);
  }
  return points.back().bytes_per_s;
}

std::vector<placement::WorkerBudget> worker_budgets(
    std::span<const WorkerFigures> workers) {
  bool all_bandwidth = !workers.empty();
  for (const WorkerFigures& w : workers) {
    all_bandwidth = all_bandwidth && known_rate(w.read_bytes_per_s) > 0;
  }
  std::vector<placement::WorkerBudget> out;
  for (const WorkerFigures& w : workers) {
    placement::WorkerBudget b;
    b.name = w.name;
    b.bytes = w.memory_budget;
    b.speed = all_bandwidth ? w.read_bytes_per_s : std::max(w.threads, 0);
    out.push_back(b);
  }
  return out;
}

uint64_t scratch_bytes(const arch::Hyperparameters& hp,
                       const placement::ShardPlan& shard, int n_vocab,
                       int max_batch_rows, int max_sequences, int n_ctx,
                       int threads) {
  // Element counts as worker/cpu/cpu_backend.cc sizes its step buffers
  // (f32 unless said), B = max_batch_rows rows.
  const uint64_t b = static_cast<uint64_t>(std::max(max_batch_rows, 1));
  const uint64_t e = static_cast<uint64_t>(hp.n_embd);
  const uint64_t q_width = static_cast<uint64_t>(hp.n_head) * hp.head_dim_k;
  const uint64_t k_width = static_cast<uint64_t>(hp.n_head_kv) * hp.head_dim_k;
  const uint64_t v_width = static_cast<uint64_t>(hp.n_head_kv) * hp.head_dim_v;
  // The widest FFN: dense, one expert's, the shared expert's.
  const uint64_t ff = static_cast<uint64_t>(
      std::max({hp.n_ff, hp.moe.n_ff_expert, hp.moe.n_ff_shared}));
  const uint64_t max_in =
      std::max({e, static_cast<uint64_t>(hp.n_head) * hp.head_dim_v, ff});
  uint64_t floats =
      b * (3 * e)                                             // x_, xn_, proj_
      + 2 * b * (q_width + k_width + v_width)                 // q_ k_ v_, qkv_
      + b * static_cast<uint64_t>(hp.n_head) * hp.head_dim_v  // attn_
      + 3 * b * ff                                // gate_ (2 ff), up_
      + 2 * b * static_cast<uint64_t>(hp.n_rot);  // RoPE tables
  if (hp.moe.n_expert > 0) {
    // Routing and the grouped expert step (4-byte elements): router
    // logits, the top-k experts, weights and slots of each row, the
    // per-expert counts, the gathered rows in and out, each expert's output.
    const uint64_t n_expert = static_cast<uint64_t>(hp.moe.n_expert);
    const uint64_t k = static_cast<uint64_t>(std::max(hp.moe.n_expert_used, 0));
    // Each slot's output for a block of rows: all B unless B x k passes
    // 8192 slots (worker/cpu/cpu_backend.h, moe_block_rows).
    const uint64_t block_rows =
        std::max<uint64_t>(1, std::min<uint64_t>(b, 8192 / std::max<uint64_t>(k, 1)));
    floats += b * n_expert + 3 * b * k + 2 * n_expert + (2 * n_expert + 1) +
              2 * b * e + block_rows * k * e;
  }
  uint64_t bytes = floats * 4 + b * 4;  // + positions_
  // Activation scratch of the matmuls: the reference one (int8 + f32 per
  // element) and the generated one's (int8, scales, f32 per element):
  // about 11 bytes per element of B rows of the widest input.
  bytes += b * max_in * 11;
  // Attention: per thread a row of scores per head of a KV group for n_ctx
  // keys; T buffers, 4T - 1 spread items and T serial ones (T > 1).
  const uint64_t t = static_cast<uint64_t>(std::max(threads, 1));
  const uint64_t group =
      static_cast<uint64_t>(hp.n_head / std::max(1, hp.n_head_kv));
  const uint64_t per_thread =
      group * (static_cast<uint64_t>(std::max(n_ctx, 0)) + hp.head_dim_k);
  const uint64_t copies = t > 1 ? t + (4 * t - 1) + t : 1;
  bytes += copies * per_thread * 4;
  if (shard.head) {
    bytes += static_cast<uint64_t>(std::max(max_sequences, 1)) *
             static_cast<uint64_t>(std::max(n_vocab, 0)) * 4;  // logits_
  }
  return bytes;
}

absl::StatusOr<ClusterPlan> plan_cluster(
    const ClusterConfig& config, const gguf::GgufModel& model,
    const arch::Hyperparameters& hp, std::span<const WorkerFigures> workers) {
  if (workers.size() != config.workers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", workers.size(), " worker figures for ",
                     config.workers.size(), " workers"));
  }
  absl::StatusOr<placement::ModelSizes> sizes =
      placement::model_sizes(model, hp);
  if (!sizes.ok()) return sizes.status();
  if (config.context_length > hp.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrCat("context_length: ", config.context_length,
                     " exceeds the model's ", hp.n_ctx_train));
  }
  ClusterPlan plan;
  plan.architecture = hp.architecture;
  plan.n_layer = hp.n_layer;
  plan.n_expert = sizes->n_expert;
  plan.n_expert_used = sizes->n_expert_used;
  plan.kv.n_ctx =
      config.context_length > 0 ? config.context_length : hp.n_ctx_train;
  plan.kv.max_sequences = config.max_sequences;
  plan.kv.kv_type = config.kv_type;
  // As Cluster::prefix_blocks(): -1 is one context's worth, off with a trace.
  int prefix_blocks = config.prefix_cache_blocks;
  if (!config.trace.empty()) prefix_blocks = 0;
  if (prefix_blocks < 0)
    prefix_blocks = std::max(1, plan.kv.n_ctx / kDefaultPrefixBlockTokens);
  plan.kv.prefix_positions = int64_t{prefix_blocks} * kDefaultPrefixBlockTokens;
  plan.max_batch_rows = config.prefill_chunk + config.max_sequences;
  for (const gguf::TensorInfo& t : model.tensors())
    plan.model_weight_bytes += t.n_bytes;

  const std::vector<placement::WorkerBudget> budgets = worker_budgets(workers);
  absl::StatusOr<std::vector<placement::ShardPlan>> shards;
  if (config.explicit_placement) {
    std::vector<placement::Range> ranges;
    for (const WorkerConfig& w : config.workers) ranges.push_back(*w.blocks);
    shards = placement::check_explicit(*sizes, plan.kv, budgets, ranges);
  } else {
    shards = placement::plan_auto(*sizes, plan.kv, budgets);
  }
  if (!shards.ok()) return shards.status();

  const gguf::TensorInfo* embd = model.find_tensor("token_embd.weight");
  const int n_vocab = hp.n_vocab > 0 ? hp.n_vocab
                      : embd != nullptr && embd->shape.size() == 2
                          ? static_cast<int>(embd->shape[1])
                          : 0;
  double decode_s = 0;
  bool decode_known = true;
  double prefill = std::numeric_limits<double>::infinity();
  bool prefill_known = true;
  for (size_t i = 0; i < shards->size(); ++i) {
    StagePlan s;
    s.shard = (*shards)[i];
    s.worker = workers[i];
    s.worker.read_bytes_per_s = known_rate(s.worker.read_bytes_per_s);
    s.worker.flops_per_s = known_rate(s.worker.flops_per_s);
    // A hand-off past a second is not one: unknown.
    if (!(s.worker.matmul_overhead_s > 0 && s.worker.matmul_overhead_s < 1)) {
      s.worker.matmul_overhead_s = 0;
    }
    s.scratch_bytes =
        scratch_bytes(hp, s.shard, n_vocab, plan.max_batch_rows,
                      config.max_sequences, plan.kv.n_ctx, s.worker.threads);
    s.read_bytes_per_token =
        placement::stage_work(*sizes, s.shard.first, s.shard.last);
    s.matmuls_per_token =
        placement::stage_matmuls(*sizes, s.shard.first, s.shard.last);
    s.params_per_token =
        placement::stage_params(*sizes, s.shard.first, s.shard.last);
    s.read_bytes_per_s = read_rate_at(s.worker, s.read_bytes_per_token);
    if (s.read_bytes_per_s > 0) {
      s.decode_s_per_token = static_cast<double>(s.read_bytes_per_token) /
                                 s.read_bytes_per_s +
                             s.matmuls_per_token * s.worker.matmul_overhead_s;
      decode_s += s.decode_s_per_token;
    } else {
      decode_known = false;
    }
    if (s.worker.flops_per_s > 0 && s.params_per_token > 0) {
      s.prefill_tok_s = s.worker.flops_per_s /
                        (2.0 * static_cast<double>(s.params_per_token));
      prefill = std::min(prefill, s.prefill_tok_s);
    } else {
      prefill_known = false;
    }
    plan.stages.push_back(s);
  }
  plan.decode_tok_s = decode_known && decode_s > 0 ? 1.0 / decode_s : 0;
  plan.prefill_tok_s = prefill_known && std::isfinite(prefill) ? prefill : 0;
  return plan;
}

}  // namespace strata::coordinator
