#include "coordinator/single_node.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/isa.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/in_process_link.h"
#include "worker/shard_plan.h"
#include "worker/stage.h"
#include "worker/step_totals.h"

namespace strata::coordinator {
namespace {

// A Stage whose run() and free_sequences() are serialised: the link's
// thread runs micro-batches while the scheduler frees finished sequences.
class LockedStage final : public worker::Stage {
 public:
  explicit LockedStage(std::unique_ptr<worker::Stage> stage)
      : stage_(std::move(stage)) {}
  const v1::ShardInfo& shard() const override { return stage_->shard(); }
  int live_sequences() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stage_->live_sequences();
  }
  absl::Status run(const v1::MicroBatch& batch, v1::MicroBatch* next,
                   v1::MicroBatchResult* result) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto started = std::chrono::steady_clock::now();
    absl::Status st = stage_->run(batch, next, result);
    steps_.add(std::chrono::steady_clock::now() - started);
    return st;
  }
  const worker::StepTotals& step_totals() const { return steps_; }
  int free_sequences(const uint64_t* seq_ids, int n) override {
    std::lock_guard<std::mutex> lock(mu_);
    return stage_->free_sequences(seq_ids, n);
  }

 private:
  mutable std::mutex mu_;
  std::unique_ptr<worker::Stage> stage_;
  worker::StepTotals steps_;
};

// One stage of this process as a worker.
class InProcessWorker final : public WorkerControl {
 public:
  InProcessWorker(int index, int n_threads, std::string backend, Progress* progress)
      : address_(absl::StrCat("in-process ", index)),
        name_(absl::StrCat("stage ", index)),
        n_threads_(n_threads),
        backend_(std::move(backend)),
        progress_(progress) {
    WorkerConfig named;
    named.address = address_;
    named.name = name_;
    label_ = worker_label(named);
  }

  const std::string& address() const override { return address_; }

  absl::StatusOr<v1::DescribeResponse> describe(absl::Duration) override {
    v1::DescribeResponse d;
    d.set_worker_id(name_);
    d.set_backend(backend_);
    // As a worker process reports itself (its CPU, the tier its kernels
    // run on), with "this process" saying where the stage lives.
    d.set_device(absl::StrCat(kernels::cpu_model_name(), ", this process"));
    absl::StatusOr<std::optional<kernels::IsaTier>> isa = kernels::engine_isa();
    d.set_isa(!isa.ok() ? "unknown" : isa->has_value() ? kernels::isa_name(**isa) : "reference");
    d.set_threads(n_threads_);
    d.set_protocol_version(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (stage_) *d.mutable_shard() = stage_->shard();
    return d;
  }

  absl::StatusOr<v1::ShardInfo> load_shard(const v1::LoadShardRequest& request,
                                           absl::Duration) override {
    v1::LoadShardRequest r = request;
    // No sockets between stages here; the field only has to be well formed.
    if (!r.head()) r.set_next_stage("in-process:1");
    worker::StageOptions options;
    options.worker_name = name_;
    options.progress = progress_;  // the Cluster loads stages one at a time
    absl::StatusOr<worker::ShardPlan> plan = worker::plan_shard(r);
    if (plan.ok() && !r.head()) plan->info.set_next_link("in-process");
    absl::StatusOr<std::unique_ptr<worker::Stage>> stage =
        plan.ok() ? worker::load_planned_stage(*std::move(plan), n_threads_, options, backend_)
                  : absl::StatusOr<std::unique_ptr<worker::Stage>>(plan.status());
    if (!stage.ok()) {  // named, as WorkerControl's errors are
      return absl::Status(stage.status().code(),
                          absl::StrCat(label_, ": ", stage.status().message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = std::make_unique<LockedStage>(*std::move(stage));
    return stage_->shard();
  }

  // Stages of one process hand activations over by function calls.
  absl::StatusOr<std::string> make_nccl_id(absl::Duration) override {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": stages in this process make no NCCL links"));
  }
  absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest&, absl::Duration) override {
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": stages in this process make no NCCL links"));
  }

  absl::StatusOr<int> free_sequences(uint64_t,
                                     std::span<const uint64_t> seq_ids,
                                     absl::Duration) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stage_) return 0;
    return stage_->free_sequences(seq_ids.data(),
                                  static_cast<int>(seq_ids.size()));
  }

  absl::StatusOr<v1::WorkerHealthResponse> health(absl::Duration) override {
    v1::WorkerHealthResponse h;
    std::lock_guard<std::mutex> lock(mu_);
    h.set_state(stage_ ? "serving" : "idle");
    if (stage_) {
      h.set_shard_id(stage_->shard().shard_id());
      h.set_live_sequences(stage_->live_sequences());
      h.set_step_seconds(stage_->step_totals().seconds());
      h.set_steps(stage_->step_totals().steps());
    }
    return h;
  }

  worker::Stage* stage() {
    std::lock_guard<std::mutex> lock(mu_);
    return stage_.get();
  }

 private:
  std::string address_;
  std::string name_;
  std::string label_;  // in messages: worker_label()
  int n_threads_;
  std::string backend_;  // "cpu", "cuda", "cuda:N"
  Progress* progress_;  // the weight repack's; may be null; not owned
  std::mutex mu_;
  std::unique_ptr<LockedStage> stage_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> make_single_node(
    const SingleNodeOptions& o) {
  auto model = open_served_model(o.model, o.context_length,
                                 /*need_tokenizer=*/!o.detokenizers);
  if (!model.ok()) return model.status();
  if (!o.chat_template.empty()) {
    if (absl::Status st = set_chat_template(**model, o.chat_template); !st.ok()) return st;
  }
  if (!o.served_model_name.empty()) {
    if (absl::Status st = set_served_model_name(**model, o.served_model_name); !st.ok()) {
      return st;
    }
  }
  if (absl::StatusOr<worker::BackendChoice> choice = worker::parse_backend_choice(o.backend);
      !choice.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--backend: ", choice.status().message()));
  }
  const int n_layer = (*model)->hp.n_layer;
  if (o.workers < 1 || o.workers > n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers: ", o.workers, " is out of range [1, ",
                     n_layer, "] (the model's blocks)"));
  }
  if (!o.ranges.empty() && static_cast<int>(o.ranges.size()) != o.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ranges: ", o.ranges.size(), " for ", o.workers, " workers"));
  }
  const int total = o.threads > 0 ? o.threads : cpu::usable_threads();
  ClusterOptions options;
  ClusterConfig& c = options.config;
  c.model = o.model;
  c.listen = "";
  c.context_length = o.context_length;
  c.max_sequences = o.max_sequences;
  c.prefill_chunk = o.prefill_chunk;
  c.prefill_chunk_beside_decode = o.prefill_chunk_beside_decode;
  c.kv_type = o.kv_type;
  c.trace = o.trace;
  c.prefix_cache_blocks = o.prefix_cache_blocks;
  if (!c.trace.empty()) {
    if (absl::Status st = check_trace_writable(c.trace); !st.ok()) return st;
  }
  c.explicit_placement = !o.ranges.empty();
  c.migration_attempts = 0;  // the stages live and die with this process
  options.monitor = false;
  options.detokenizers = o.detokenizers;
  std::vector<std::unique_ptr<WorkerControl>> controls;
  std::vector<InProcessWorker*> workers;
  for (int i = 0; i < o.workers; ++i) {
    // The threads shared out: stage i gets total / n, the first ones one
    // more while the remainder lasts.
    const int threads =
        std::max(1, total / o.workers + (i < total % o.workers ? 1 : 0));
    auto w = std::make_unique<InProcessWorker>(i, threads, o.backend, o.progress);
    workers.push_back(w.get());
    WorkerConfig wc;
    wc.address = w->address();
    wc.name = absl::StrCat("stage ", i);
    if (!o.ranges.empty()) wc.blocks = o.ranges[i];
    c.workers.push_back(wc);
    controls.push_back(std::move(w));
  }
  FirstLinkFactory first_link =
      [workers](worker::ActivationLink::ResultCallback on_result, uint64_t,
                const std::vector<int>&)
      -> absl::StatusOr<std::unique_ptr<worker::ActivationLink>> {
    // In one process the last stage's results already reach the callback
    // on its own thread, through function calls (no hop to save).
    std::vector<worker::Stage*> stages;
    for (InProcessWorker* w : workers) {
      worker::Stage* s = w->stage();
      if (s == nullptr) return absl::FailedPreconditionError("stage not loaded");
      stages.push_back(s);
    }
    return worker::make_in_process_chain(stages, std::move(on_result));
  };
  return std::make_unique<Cluster>(std::move(options), *std::move(model),
                                   std::move(controls), std::move(first_link));
}

}  // namespace strata::coordinator
