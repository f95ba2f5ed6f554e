// `strata plan --config cluster.yaml [--model M.gguf] [--json]`: what a
// cluster config would do with a model, before anything loads: the blocks
// each worker would hold, its weights, KV cache and scratch, and the
// predicted decode and prefill tok/s (coordinator/cluster_plan.h). Reads
// only the GGUF's header (and its split parts' headers) and, for each
// running worker, its Describe over gRPC with the config's tls / insecure
// settings, as the coordinator connects; a worker declared in the config
// (`declared: true`, coordinator/cluster_config.h) is planned from its
// declared memory_budget, read_bandwidth, flop_rate and threads.
//
// Exit status: 0 the plan fits; 1 it does not (the numbers on stderr, or
// {"fits": false, "error": ...} with --json), or the config, the model or
// a worker's Describe failed; 2 usage.
//
// --json prints one object:
//   {"model", "architecture", "n_layer", "n_expert", "n_expert_used",
//    "n_ctx", "max_sequences", "prefix_positions", "kv_type",
//    "max_batch_rows", "model_weight_bytes", "fits": true,
//    "workers": [{"name", "declared", "first", "last", "embedding", "head",
//                 "weight_bytes", "kv_bytes", "scratch_bytes",
//                 "budget_bytes", "threads", "read_bytes_per_s" (the
//                 large-working-set rate), "stage_read_bytes_per_s" (the
//                 rate at the stage's bytes a token, which decode uses),
//                 "flops_per_s", "read_bytes_per_token", "params_per_token",
//                 "matmuls_per_token", "matmul_overhead_s",
//                 "decode_ms_per_token", "prefill_tok_s"}],
//    "decode_tok_s", "prefill_tok_s"}   (0: unknown)
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "coordinator/cluster_config.h"
#include "coordinator/cluster_plan.h"
#include "coordinator/worker_control.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/placement.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct PlanOptions {
  std::string config;
  std::string model;
  bool json = false;
};

using coordinator::WorkerFigures;

// Figures of every worker of `config`: declared ones from the config, the
// others from their Describe.
absl::StatusOr<std::vector<WorkerFigures>> gather_figures(
    coordinator::ClusterConfig& config) {
  bool any_running = false;
  for (const coordinator::WorkerConfig& w : config.workers)
    any_running |= !w.declared;
  if (any_running) {
    if (absl::Status st =
            coordinator::resolve_link_security(config, "strata plan");
        !st.ok())
      return st;
  }
  std::vector<WorkerFigures> out;
  for (const coordinator::WorkerConfig& w : config.workers) {
    WorkerFigures f;
    // "w1 (10.0.0.5:50061)", "10.0.0.5:50061" (no name), "w2" (declared).
    f.name = w.address.empty() || w.name == w.address
                 ? w.name
                 : absl::StrCat(w.name, " (", w.address, ")");
    f.declared = w.declared;
    f.memory_budget = w.memory_budget;
    if (w.declared) {
      f.threads = w.threads;
      f.read_bytes_per_s = w.read_bandwidth;
      f.flops_per_s = w.flop_rate;
    } else {
      std::unique_ptr<coordinator::WorkerControl> control =
          coordinator::make_grpc_worker_control(
              w.address, coordinator::worker_label(w), config.tls, w.name);
      absl::StatusOr<v1::DescribeResponse> d =
          control->describe(absl::Seconds(5));
      if (!d.ok()) {
        return absl::Status(
            d.status().code(),
            absl::StrCat(d.status().message(),
                         " (a machine not yet running can be planned with "
                         "`declared: true` and its figures)"));
      }
      if (f.memory_budget == 0) f.memory_budget = d->memory_budget_bytes();
      f.threads = d->threads();
      f.read_bytes_per_s = d->read_bandwidth_bytes_per_s();
      f.flops_per_s = d->flops_per_s();
      f.matmul_overhead_s = d->matmul_overhead_s();
      for (const v1::ReadRate& r : d->read_rates()) {
        f.read_points.push_back({r.working_set_bytes(), r.bytes_per_s()});
      }
    }
    out.push_back(f);
  }
  return out;
}

std::string or_unknown(double v, const std::string& text) {
  return v > 0 ? text : "?";
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void print_text(const std::string& model_path,
                const coordinator::ClusterPlan& p) {
  std::printf("model:    %s (%s, %d blocks, %s of weights", model_path.c_str(),
              p.architecture.c_str(), p.n_layer,
              placement::format_bytes(p.model_weight_bytes).c_str());
  if (p.n_expert > 0)
    std::printf("; %d of %d experts a token", p.n_expert_used, p.n_expert);
  std::printf(")\n");
  std::printf(
      "KV cache: %d positions x %d sequences + %lld prefix cache positions, "
      "%s; "
      "micro-batch %d rows\n",
      p.kv.n_ctx, p.kv.max_sequences,
      static_cast<long long>(p.kv.prefix_positions),
      p.kv.kv_type == GgmlType::kF32 ? "f32" : "f16", p.max_batch_rows);
  std::printf("\n%-22s %-11s %10s %10s %10s %10s %10s %11s %14s %10s %10s\n",
              "worker", "blocks", "weights", "KV", "scratch", "total", "budget",
              "read", "FLOP rate", "ms/token", "prefill");
  for (const coordinator::StagePlan& s : p.stages) {
    const std::string name =
        s.worker.name + (s.worker.declared ? " (declared)" : "");
    const std::string blocks =
        absl::StrCat("[", s.shard.first, ", ", s.shard.last, ")");
    std::printf(
        "%-22s %-11s %10s %10s %10s %10s %10s %11s %14s %10s %10s\n",
        name.c_str(), blocks.c_str(),
        placement::format_bytes(s.shard.weight_bytes).c_str(),
        placement::format_bytes(s.shard.kv_bytes).c_str(),
        placement::format_bytes(s.scratch_bytes).c_str(),
        placement::format_bytes(s.shard.total() + s.scratch_bytes).c_str(),
        s.worker.memory_budget > 0
            ? placement::format_bytes(s.worker.memory_budget).c_str()
            : "?",
        or_unknown(s.read_bytes_per_s,
                   placement::format_rate(s.read_bytes_per_s))
            .c_str(),
        or_unknown(s.worker.flops_per_s,
                   placement::format_flop_rate(s.worker.flops_per_s))
            .c_str(),
        or_unknown(s.decode_s_per_token, fixed(s.decode_s_per_token * 1e3, 2))
            .c_str(),
        or_unknown(s.prefill_tok_s, fixed(s.prefill_tok_s, 1)).c_str());
  }
  std::printf("\n");
  for (const coordinator::StagePlan& s : p.stages) {
    if (s.worker.memory_budget > 0 &&
        s.shard.total() + s.scratch_bytes > s.worker.memory_budget) {
      std::printf(
          "note: %s: weights + KV fit its budget, with the scratch they pass "
          "it by %s\n",
          s.worker.name.c_str(),
          placement::format_bytes(s.shard.total() + s.scratch_bytes -
                                  s.worker.memory_budget)
              .c_str());
    }
  }
  if (p.decode_tok_s > 0) {
    std::printf(
        "decode:   %s tok/s for one stream (%.2f ms a token: each stage's "
        "weight reads "
        "/ its read bandwidth, summed)\n",
        fixed(p.decode_tok_s, p.decode_tok_s < 10 ? 2 : 1).c_str(),
        1e3 / p.decode_tok_s);
  } else {
    std::printf("decode:   unknown (a worker's read bandwidth is unknown)\n");
  }
  if (p.prefill_tok_s > 0) {
    std::printf(
        "prefill:  %s tok/s for a long prompt (the slowest stage: 2 FLOPs a "
        "weight / "
        "its FLOP rate)\n",
        fixed(p.prefill_tok_s, p.prefill_tok_s < 10 ? 2 : 1).c_str());
  } else {
    std::printf("prefill:  unknown (a worker's FLOP rate is unknown)\n");
  }
  std::printf("fits:     every worker's weights + KV within its budget\n");
}

nlohmann::json to_json(const std::string& model_path,
                       const coordinator::ClusterPlan& p) {
  nlohmann::json j;
  j["model"] = model_path;
  j["architecture"] = p.architecture;
  j["n_layer"] = p.n_layer;
  j["n_expert"] = p.n_expert;
  j["n_expert_used"] = p.n_expert_used;
  j["n_ctx"] = p.kv.n_ctx;
  j["max_sequences"] = p.kv.max_sequences;
  j["prefix_positions"] = p.kv.prefix_positions;
  j["kv_type"] = p.kv.kv_type == GgmlType::kF32 ? "f32" : "f16";
  j["max_batch_rows"] = p.max_batch_rows;
  j["model_weight_bytes"] = p.model_weight_bytes;
  j["fits"] = true;
  nlohmann::json workers = nlohmann::json::array();
  for (const coordinator::StagePlan& s : p.stages) {
    workers.push_back({{"name", s.worker.name},
                       {"declared", s.worker.declared},
                       {"first", s.shard.first},
                       {"last", s.shard.last},
                       {"embedding", s.shard.embedding},
                       {"head", s.shard.head},
                       {"weight_bytes", s.shard.weight_bytes},
                       {"kv_bytes", s.shard.kv_bytes},
                       {"scratch_bytes", s.scratch_bytes},
                       {"budget_bytes", s.worker.memory_budget},
                       {"threads", s.worker.threads},
                       {"read_bytes_per_s", s.worker.read_bytes_per_s},
                       {"stage_read_bytes_per_s", s.read_bytes_per_s},
                       {"flops_per_s", s.worker.flops_per_s},
                       {"read_bytes_per_token", s.read_bytes_per_token},
                       {"params_per_token", s.params_per_token},
                       {"matmuls_per_token", s.matmuls_per_token},
                       {"matmul_overhead_s", s.worker.matmul_overhead_s},
                       {"decode_ms_per_token", s.decode_s_per_token * 1e3},
                       {"prefill_tok_s", s.prefill_tok_s}});
  }
  j["workers"] = workers;
  j["decode_tok_s"] = p.decode_tok_s;
  j["prefill_tok_s"] = p.prefill_tok_s;
  return j;
}

int run(const PlanOptions& o) {
  absl::StatusOr<coordinator::ClusterConfig> config =
      coordinator::load_cluster_config(o.config);
  if (!config.ok()) return report_failure("plan", "", config.status());
  if (!o.model.empty()) config->model = o.model;
  if (config->model.empty()) {
    std::fprintf(stderr, "strata plan: %s: model: missing (or give --model)\n",
                 o.config.c_str());
    return 1;
  }
  // Headers only: the reader maps the files and decodes metadata and tensor
  // infos; no tensor data is read.
  absl::StatusOr<std::unique_ptr<gguf::GgufModel>> model =
      gguf::GgufModel::open(config->model);
  if (!model.ok()) return report_failure("plan", config->model, model.status());
  absl::StatusOr<arch::Hyperparameters> hp =
      arch::read_hyperparameters((*model)->first());
  if (!hp.ok()) return report_failure("plan", config->model, hp.status());
  absl::StatusOr<std::vector<WorkerFigures>> figures = gather_figures(*config);
  if (!figures.ok()) return report_failure("plan", o.config, figures.status());
  absl::StatusOr<coordinator::ClusterPlan> plan =
      coordinator::plan_cluster(*config, **model, *hp, *figures);
  if (!plan.ok()) {
    if (o.json) {
      nlohmann::json j = {{"fits", false},
                          {"error", std::string(plan.status().message())}};
      std::cout << j.dump(2) << "\n";
    }
    const bool refused =
        plan.status().code() == absl::StatusCode::kResourceExhausted;
    return report_failure("plan", refused ? "does not fit" : "", plan.status());
  }
  if (o.json) {
    std::cout << to_json(config->model, *plan).dump(2) << "\n";
  } else {
    print_text(config->model, *plan);
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Plan a cluster before loading anything: blocks, memory and predicted "
      "tok/s per worker "
      "(reads GGUF headers and each worker's Describe, or declared figures)");
  cmd->add_option("--config", o->config,
                  "cluster config (YAML, as strata-coordinator's)")
      ->required();
  cmd->add_option("--model", o->model,
                  "GGUF model (default: the config's `model`)");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace strata::cli
