// Cluster: the coordinator's view of its pipeline. It opens the model
// (tokenizer, hyperparameters, sizes), plans placement (auto by memory
// budget, or the config's explicit ranges, refused with numbers), loads the
// shards (LoadShard, last stage first; then, between two stages, NCCL or
// gRPC as activation_link says: MakeNcclId and LinkNccl, nccl_links.h),
// links the scheduler to the first stage, and watches the workers:
//
//   - every health_check_interval_ms a Health RPC with a deadline goes to
//     each worker; after health_check_failures misses in a row (dead:
//     UNAVAILABLE at once; hung: the deadline) or a worker that lost its
//     shard (restarted), every request ends with UNAVAILABLE naming the
//     worker and the cluster is DEGRADED;
//   - once every worker answers again (same address), all shards are
//     loaded afresh under a new shard id and serving resumes, without a
//     restart of the coordinator.
//
// Migration (config.migration_attempts > 0, after the first load): a
// failed worker does not fail the requests. The scheduler keeps them
// (Scheduler::suspend) while a new pipeline is built, first of these that
// works: a spare that answers takes the failed worker's place (its blocks,
// when they fit its budget; else a new plan over the new set); the same
// worker, once it answers again; a new auto placement over the workers
// left. Its shards are loaded under a new shard id (the epoch: a fenced-off
// worker's frames carry the old one and are refused) and the requests go on
// where they were (StepScheduler::suspend). A link that breaks wakes the
// monitor at once, so a killed worker is replaced within one health round.
// A worker that was replaced becomes a spare when it answers again.
//
// Startup is the same path: workers that are not up yet are waited for;
// Health says STARTING until the first load.
//
// Ownership: owns the workers' controls, the scheduler and the monitor
// thread. Threads: any thread may call the const methods and scheduler().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/cluster_config.h"
#include "coordinator/metrics.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_control.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/placement.h"
#include "model/tokenizer/tokenizer.h"
#include "strata/v1/inference.pb.h"
#include "worker/activation_link.h"

namespace strata::coordinator {

// The model the cluster serves, as the coordinator holds it (no weights are
// touched: the mapping is only read for metadata and the tokenizer).
struct ServedModel {
  std::shared_ptr<const gguf::GgufModel> gguf;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  arch::Hyperparameters hp;
  placement::ModelSizes sizes;
  v1::ModelInfo info;   // name, path, architecture, n_layer, n_vocab, n_ctx
  int n_ctx = 0;        // positions per sequence the cluster serves
  // A chat template that overrides the GGUF's (--chat-template FILE,
  // `chat_template:` in the config), and its file name for messages.
  std::optional<std::string> chat_template;
  std::string chat_template_source;
};

// Reads the chat template in `path` into model.chat_template, checked
// against the Jinja subset: InvalidArgument "chat_template: PATH: ..." when
// the file cannot be read or its template does not parse.
absl::Status set_chat_template(ServedModel& model, const std::string& path);

// The name clients give as `model` (ModelInfo.name; vLLM's
// --served-model-name, llama.cpp's --alias), replacing the GGUF's
// general.name: 1 .. 256 bytes of UTF-8 without control characters, else
// InvalidArgument "served_model_name: ...".
absl::Status set_served_model_name(ServedModel& model, const std::string& name);

// Opens `path` and fills a ServedModel. `context_length` 0: the model's;
// InvalidArgument naming context_length when it exceeds the model's. With
// need_tokenizer false (tests that bring their own Detokenizer), a
// tokenizer that cannot be built leaves `tokenizer` null.
absl::StatusOr<std::unique_ptr<ServedModel>> open_served_model(
    const std::string& path, int context_length, bool need_tokenizer = true);

// Makes the link to the first stage of the pipeline loaded as `shard_id`,
// whose results go to `on_result` (the gRPC one also reads the last stage's
// Results stream: worker/grpc_link.h). `members` are the pipeline's workers
// in stage order, as indices into the pool: the config's `workers`, then
// its `spares`.
using FirstLinkFactory =
    std::function<absl::StatusOr<std::unique_ptr<worker::ActivationLink>>(
        worker::ActivationLink::ResultCallback on_result, uint64_t shard_id,
        const std::vector<int>& members)>;

struct ClusterOptions {
  ClusterConfig config;      // model is opened by the caller (ServedModel)
  bool monitor = true;       // health checks and reloads (off: single-node)
  absl::Duration load_deadline = absl::Minutes(5);  // one LoadShard
  absl::Duration call_deadline = absl::Seconds(5);  // Describe, FreeSequence
  // Empty: the model's tokenizer. Tests may bring fakes.
  Scheduler::DetokenizerFactory detokenizers;
};

class Cluster {
 public:
  // The pool: workers[i] is config.workers[i] for i < workers.size(), then
  // config.spares. Starts the monitor thread, which loads the shards as
  // soon as every worker of the pipeline answers.
  Cluster(ClusterOptions options, std::unique_ptr<ServedModel> model,
          std::vector<std::unique_ptr<WorkerControl>> workers,
          FirstLinkFactory first_link);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Waits until the pipeline serves; the last load error (or
  // DeadlineExceeded) when it does not within `timeout`. Permanent errors
  // (a placement that does not fit) return at once.
  absl::Status wait_serving(absl::Duration timeout);

  Scheduler& scheduler() { return *scheduler_; }
  const ServedModel& model() const { return *model_; }

  v1::HealthResponse health() const;
  v1::ClusterStatusResponse status() const;

  // Calls `listener` with whether the cluster serves (health() is SERVING)
  // now, and again after every change of that state, one call at a time
  // (so the last call always carries the latest state), on the thread that
  // changed it. A listener must not call add/remove_serving_listener.
  // Returns its id for remove_serving_listener, which waits for a call in
  // progress.
  int add_serving_listener(std::function<void(bool serving)> listener);
  void remove_serving_listener(int id);

  // The Prometheus text page of the cluster's metrics (metrics.h): the
  // scheduler's counters and histograms, the gauges of this moment, and
  // each worker's state at its last health check. Any thread.
  std::string render_prometheus();
  ServingMetrics& metrics() { return metrics_; }

 private:
  struct WorkerState {
    std::string state = "unknown";  // "serving", "loading", "unreachable",
                                    // "idle", "unknown"
    int misses = 0;
    std::optional<absl::Time> last_seen;
    std::string last_error;
    std::optional<v1::DescribeResponse> described;
    std::optional<v1::ShardInfo> shard;
    int live_sequences = 0;   // at the last health check
    double step_seconds = 0;  // the shard's forward passes, ditto
    uint64_t steps = 0;
  };

  void monitor_loop();
  // One round of Health RPCs; may fail the pipeline.
  void check_workers();
  // Plans (once) and loads every shard, then attaches the scheduler.
  absl::Status load_pipeline();
  // Plans over members_; `final_on_failure`: a plan that cannot fit stops
  // the cluster (at startup), else it is only reported.
  absl::Status plan(bool final_on_failure = true);
  // Migration: replaces members that do not answer by spares that do, or
  // plans over the members left. True when members_ changed.
  bool replace_failed_members();
  bool answers(int i) const;  // under mu_
  bool migrating() const;     // migration on and served once (under mu_)
  const WorkerConfig& worker_config(int i) const { return pool_[i]; }
  void free_sequences(std::span<const uint64_t> seq_ids);
  void on_broken(const absl::Status& status);
  void write_trace(const v1::BlockTrace& trace);
  // Tells the serving listeners (call without mu_ held).
  void notify_serving();
  std::string worker_label(int i) const;
  // Prefix cache slots for the scheduler and every shard (config, or auto).
  int prefix_blocks() const;

  const ClusterOptions options_;
  std::unique_ptr<ServedModel> model_;
  std::vector<std::unique_ptr<WorkerControl>> workers_;  // the pool
  std::vector<WorkerConfig> pool_;  // config.workers, then config.spares
  FirstLinkFactory first_link_;

  mutable std::mutex mu_;  // guards everything below but the scheduler
  std::condition_variable cv_;
  bool stop_ = false;
  bool wake_ = false;
  bool serving_ = false;
  bool ever_served_ = false;
  std::string problem_ = "starting: waiting for the workers";
  bool permanent_error_ = false;
  std::vector<WorkerState> states_;  // of the pool
  std::vector<int> members_;  // the pipeline, in stage order (pool indices)
  std::optional<std::vector<placement::ShardPlan>> plan_;  // of members_
  uint64_t migrations_ = 0;  // pipelines rebuilt while requests waited
  std::atomic<uint64_t> shard_id_{0};
  uint64_t next_shard_id_ = 0;

  std::mutex trace_mu_;
  std::ofstream trace_out_;

  // Serialises the listeners' calls; never held with mu_.
  mutable std::mutex listeners_mu_;
  std::map<int, std::function<void(bool)>> listeners_;
  int next_listener_ = 0;

  mutable ServingMetrics metrics_;  // before scheduler_, which feeds it
  std::unique_ptr<Scheduler> scheduler_;
  std::thread monitor_;
};

}  // namespace strata::coordinator
