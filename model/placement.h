// Placement: which contiguous range of transformer blocks each worker of a
// pipeline holds, and whether it fits the worker's memory. Shared by the
// coordinator (planning) and workers (checking what they are asked to load).
//
// Memory of a shard = its tensors' bytes in the GGUF (the blocks' blk.N.*
// tensors, the token embedding on the first stage, the output norm and head
// on the last: with tied embeddings the head is token_embd again) + its KV
// cache: per block and position, n_head_kv x (head_dim_k + head_dim_v)
// elements of the KV type, for n_ctx positions of max_sequences sequences.
//
// What a token reads: on a dense block every tensor; on a mixture-of-experts
// block (3-D expert tensors blk.N.ffn_{gate,up,down}_exps.*, the experts
// along the last dimension) only n_expert_used of the n_expert experts, plus
// the router (ffn_gate_inp) and any shared expert (ffn_*_shexp) in full.
// n_expert and n_expert_used are the architecture's (hp.moe: the GGUF keys
// ARCH.expert_count and ARCH.expert_used_count).
//
// Usage:
//   ASSIGN_OR_RETURN(ModelSizes sizes, model_sizes(*model, hp));
//   KvShape kv{.n_ctx = 4096, .max_sequences = 8, .kv_type = GgmlType::kF16};
//   ASSIGN_OR_RETURN(std::vector<ShardPlan> plan,
//                    plan_auto(sizes, kv, budgets));          // or
//   ASSIGN_OR_RETURN(plan, check_explicit(sizes, kv, budgets, ranges));
//
// Errors (InvalidArgument / ResourceExhausted) carry the numbers:
//   "worker w1: blocks [10, 30) need 1.9 GiB (weights 1.5 GiB + KV
//    0.4 GiB), budget 1.0 GiB".
//
// Thread-safety: plain functions over plain data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata::placement {

// What the model's parts weigh, in bytes.
struct ModelSizes {
  int n_layer = 0;
  std::vector<uint64_t> block_bytes;  // [n_layer] blk.N.* tensors
  uint64_t embedding_bytes = 0;       // token_embd (first stage)
  uint64_t head_bytes = 0;            // output_norm + output, or token_embd
                                      // when tied (last stage)
  uint64_t shared_bytes = 0;  // other tensors every stage holds (rope_freqs)
  // KV elements per block per position for one sequence:
  // n_head_kv x (head_dim_k + head_dim_v).
  uint64_t kv_elements_per_position = 0;
  // [n_layer] bytes of blk.N.* one token reads: block_bytes on a dense
  // block; the dense tensors + n_expert_used / n_expert of the expert
  // tensors on a mixture-of-experts block.
  std::vector<uint64_t> active_bytes;
  // [n_layer] weights (elements of the 2-D and 3-D tensors, expert ones at
  // n_expert_used / n_expert) one token multiplies: a matmul costs 2 FLOPs
  // per weight and row.
  std::vector<uint64_t> active_params;
  uint64_t head_params = 0;  // elements of the output matrix (last stage)
  // [n_layer] matrices one token multiplies: each dense weight matrix once,
  // each expert tensor n_expert_used times (the output head: one more).
  std::vector<int> active_matmuls;
  int n_expert = 0;          // 0: dense
  int n_expert_used = 0;
};

// Sizes from the GGUF's tensor table. InvalidArgument when a tensor name
// blk.N.* has N outside [0, n_layer) or token_embd is missing; for expert
// tensors, when hp.moe says the model is dense (ARCH.expert_count missing)
// or its counts are out of range (1 <= used <= count), or an expert
// tensor's last dimension is not expert_count.
absl::StatusOr<ModelSizes> model_sizes(const gguf::GgufModel& model,
                                       const arch::Hyperparameters& hp);

// The KV cache every worker reserves.
struct KvShape {
  int n_ctx = 0;          // positions per sequence
  int max_sequences = 1;  // live sequences at once
  GgmlType kv_type = GgmlType::kF16;  // kF16 or kF32
  // Positions of the prefix cache's block store on every worker
  // (prefix_cache_blocks x block tokens; coordinator/prefix_index.h).
  int64_t prefix_positions = 0;
};

// KV bytes of blocks [first, last): (last - first) x (n_ctx x max_sequences
// + prefix_positions) x kv_elements_per_position x element size.
uint64_t kv_bytes(const ModelSizes& sizes, const KvShape& kv, int first,
                  int last);

struct WorkerBudget {
  std::string name;      // for messages: "w1" or "127.0.0.1:50062"
  uint64_t bytes = 0;    // weights + KV it may hold; 0: unknown (no limit)
  // Relative rate of work, in one unit for all workers (the coordinator:
  // measured read bandwidth in bytes/s when every worker reports one, else
  // compute threads); 0: unknown (the mean of the known ones, or all
  // equal).
  double speed = 0;
};

struct ShardPlan {
  int first = 0;  // blocks [first, last)
  int last = 0;
  bool embedding = false;  // first == 0
  bool head = false;       // last == n_layer
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t total() const { return weight_bytes + kv_bytes; }
};

// Bytes of weights a token reads on a stage of blocks [first, last): the
// blocks' active_bytes, and the output head on the last stage.
uint64_t stage_work(const ModelSizes& sizes, int first, int last);

// Weights a token multiplies on a stage of blocks [first, last): the
// blocks' active_params, and the output matrix on the last stage.
uint64_t stage_params(const ModelSizes& sizes, int first, int last);

// Matrices a token multiplies on a stage: the blocks' active_matmuls, and
// the head on the last stage.
int stage_matmuls(const ModelSizes& sizes, int first, int last);

// The plan of blocks [first, last) for a pipeline of n_layer blocks.
ShardPlan shard_plan(const ModelSizes& sizes, const KvShape& kv, int first,
                     int last);

// Contiguous ranges, one per worker in order, each at least one block, that
// fit every worker's budget and make the slowest stage as fast as possible:
// a pipeline moves at the pace of its slowest stage. A stage's work per
// token is the bytes of weights it reads (stage_work: its blocks, and the
// output head on the last stage; the token embedding is one row per token),
// divided by the worker's speed. Among the splits with the least such
// maximum, earlier workers take as many blocks as they can.
// Errors: InvalidArgument for no workers or more workers than blocks;
// ResourceExhausted when no split fits the budgets, saying what the model
// needs and what the budgets hold, and the tightest worker of the split
// that makes the largest ratio (shard bytes / budget) smallest.
absl::StatusOr<std::vector<ShardPlan>> plan_auto(
    const ModelSizes& sizes, const KvShape& kv,
    std::span<const WorkerBudget> workers);

struct Range {
  int first = 0;
  int last = 0;
};

// Checks explicit ranges: one per worker, the first starting at 0, each
// starting where the previous ended, non-empty, the last ending at n_layer;
// and each fitting its worker's budget (0: no limit). InvalidArgument
// naming the worker for a malformed range; ResourceExhausted with the
// numbers for one that does not fit.
absl::StatusOr<std::vector<ShardPlan>> check_explicit(
    const ModelSizes& sizes, const KvShape& kv,
    std::span<const WorkerBudget> workers, std::span<const Range> ranges);

// "1.9 GiB", "312.0 MiB", "12.5 KiB", "800 B".
std::string format_bytes(uint64_t bytes);

// A size in a config file or flag: bytes ("1000"), or a number with KiB,
// MiB, GiB, TiB (powers of 1024), KB/kB, MB, GB, TB (powers of 1000) or B;
// or a Kubernetes quantity (k8s.io/apimachinery resource.Quantity's
// suffixes): Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024), k, M, G, T, P, E
// (powers of 1000), or a decimal exponent ("2e9", "1.5E3"). Fractions are
// allowed ("1.5GiB", "0.5Gi"; rounded down to a byte). Refused, with
// InvalidArgument quoting the text: "500m" (milli: a thousandth of a
// byte), negatives, overflow and anything else.
absl::StatusOr<uint64_t> parse_byte_size(std::string_view text);

// A read bandwidth in a config file: a size (parse_byte_size's units)
// followed by "/s": "20GB/s" (2e10 bytes/s), "18.6GiB/s", "500MB/s".
// InvalidArgument quoting the text for anything else (no "/s", zero).
absl::StatusOr<double> parse_byte_rate(std::string_view text);

// A FLOP rate in a config file: a number, an optional SI prefix (k, M, G,
// T, P: powers of 1000) and "FLOP/s": "800GFLOP/s", "1.2TFLOP/s", "5e11FLOP/s".
// InvalidArgument quoting the text for anything else (zero, negative).
absl::StatusOr<double> parse_flop_rate(std::string_view text);

// "20.5 GB/s" (1e9 bytes), "1.23 TFLOP/s" / "812.0 GFLOP/s".
std::string format_rate(double bytes_per_s);
std::string format_flop_rate(double flops_per_s);

}  // namespace strata::placement
