// WorkerService: strata.v1.Worker (worker.proto) as `strata-worker` serves
// it. Handlers are thin: check the request, call the Stage / StageRelay,
// convert absl::Status to grpc::Status (proto/grpc_status.h).
//
//   Describe      the device, ISA, threads, memory budget, model dirs and
//                 the loaded shard.
//   LoadShard     model_path must resolve (realpath, symlinks followed)
//                 under one of the model dirs (a relative path is looked up
//                 in each); a path outside them gets one answer whether it
//                 exists or not (PERMISSION_DENIED "... is outside the model
//                 directories [...]"); the request's checks
//                 (worker/shard_plan.h); weights + KV cache must fit the
//                 memory budget (RESOURCE_EXHAUSTED with the numbers); rows
//                 of a full micro-batch must fit max_message_bytes; a
//                 shard_id equal to the loaded shard's is ALREADY_EXISTS (a
//                 second shard under a live id would take its micro-batches).
//                 Then the old shard is freed and the new one loaded; the
//                 link to next_stage is made (and remade after the next
//                 worker restarts).
//   MakeNcclId    a new id from the frame transport; the worker keeps the
//                 kMaxMadeIds newest ones no LinkNccl used (older ones are
//                 forgotten).
//   LinkNccl      once every stage loaded: the link to the next stage over
//                 NCCL (the frame link, worker/frame_link.h, replacing the
//                 gRPC one; its ids serve one join, so a broken one is not
//                 remade) and/or the previous stage's micro-batches over
//                 NCCL (worker/frame_upstream.h). FAILED_PRECONDITION without
//                 a frame transport (set_frame_transport) or when the shard
//                 is linked so already; the id this worker is rank 0 of must
//                 come from its MakeNcclId (INVALID_ARGUMENT otherwise).
//   Activations   each micro-batch read runs through the Stage on the
//                 stream's thread; its result (or the next stage's, relayed
//                 up) is written back in order, on the thread that has it.
//                 A stream that owes its peer kMaxOutstandingResults (256)
//                 results, or one whose Write waits answer_timeout_ms for
//                 the peer to read, is cut (RESOURCE_EXHAUSTED; the results
//                 still owed are dropped as they come: worker/stream_writer.h).
//   Results       the last stage's results straight to the coordinator:
//                 written on the stage's thread as each micro-batch ends;
//                 cut like an Activations stream when a Write waits
//                 answer_timeout_ms (the stage's thread is then free again).
//   FreeSequence  frees sequences of the loaded shard (not forwarded).
//   Health        "idle", "loading" or "serving", live sequences.
//
// Ownership: owns the loaded Stage and its relay. Threads: gRPC's; every
// method may be called concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_status.h"
#include "strata/v1/worker.grpc.pb.h"
#include "worker/frame_channel.h"
#include "worker/frame_upstream.h"
#include "worker/stage.h"
#include "worker/stage_relay.h"
#include "worker/stream_writer.h"
#include "worker/worker_config.h"

namespace strata::worker {

struct ShardPlan;  // worker/shard_plan.h

class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(WorkerConfig config);
  ~WorkerService() override;

  grpc::Status Describe(grpc::ServerContext* context,
                        const v1::DescribeRequest* request,
                        v1::DescribeResponse* response) override;
  grpc::Status LoadShard(grpc::ServerContext* context,
                         const v1::LoadShardRequest* request,
                         v1::LoadShardResponse* response) override;
  grpc::Status MakeNcclId(grpc::ServerContext* context,
                          const v1::MakeNcclIdRequest* request,
                          v1::MakeNcclIdResponse* response) override;
  grpc::Status LinkNccl(grpc::ServerContext* context,
                        const v1::LinkNcclRequest* request,
                        v1::LinkNcclResponse* response) override;
  grpc::Status Activations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::MicroBatchResult, v1::MicroBatch>* stream)
      override;
  grpc::Status Results(grpc::ServerContext* context,
                       const v1::ResultsRequest* request,
                       grpc::ServerWriter<v1::MicroBatchResult>* writer) override;
  grpc::Status FreeSequence(grpc::ServerContext* context,
                            const v1::FreeSequenceRequest* request,
                            v1::FreeSequenceResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context,
                      const v1::WorkerHealthRequest* request,
                      v1::WorkerHealthResponse* response) override;

  // Unloads the shard (closing the link to the next stage: its pending
  // micro-batches are answered UNAVAILABLE "... link closed: worker <id>
  // is stopping"); from then on every micro-batch and call that needs the
  // shard is answered UNAVAILABLE "worker <id> is stopping" instead of
  // FAILED_PRECONDITION "no shard loaded". For the process's own stop.
  void shutdown();

  // The transport of NCCL links (worker/nccl_channel.h on a GPU worker; a
  // fake in tests); null (the default): the worker makes none, and
  // Describe says so. Set before serving.
  void set_frame_transport(std::shared_ptr<FrameTransport> transport) {
    transport_ = std::move(transport);
  }
  // The GPU this worker's backend runs on (CudaDevice::uuid), which
  // Describe reports; "" (the default): none.
  void set_gpu_uuid(std::string uuid) {
    std::lock_guard<std::mutex> lock(mu_);
    gpu_uuid_ = std::move(uuid);
  }
  // Ids MakeNcclId keeps for LoadShards to come.
  static constexpr size_t kMaxMadeIds = 8;

  // Where a LoadShard's weight repack reports progress (model/progress.h);
  // null (the default): silent. Not owned; set before serving.
  void set_progress(Progress* progress) { progress_ = progress; }

  // Where the server listens (its port resolved): the worker's name when
  // the config gives none. Call once, right after the server started.
  void set_bound_address(const std::string& address);
  // The machine's measured read bandwidth (bytes/s) and FLOP rate (FLOP/s)
  // that Describe reports (kernels/cpu/machine_rates.h); 0: unknown.
  void set_machine_rates(double read_bytes_per_s, double flops_per_s,
                         double matmul_overhead_s = 0) {
    read_bytes_per_s_ = read_bytes_per_s;
    flops_per_s_ = flops_per_s;
    matmul_overhead_s_ = matmul_overhead_s;
  }
  // The decode matmul's read rate by working-set size that Describe reports
  // (read_rates, smallest first). Call before serving.
  void set_read_rates(std::vector<v1::ReadRate> rates) {
    std::lock_guard<std::mutex> lock(read_rates_mu_);
    read_rates_ = std::move(rates);
  }
  // The config's name, else the bound address.
  std::string worker_id() const;

  // Called with whether a shard is loaded after every LoadShard and at
  // shutdown (the health service's "strata.v1.Worker.shard"), one call at
  // a time, on the gRPC thread of the call.
  void set_on_shard(std::function<void(bool loaded)> on_shard);

  // Streams cut because their peer did not read (see Activations), and the
  // most results an Activations stream owed its peer at once.
  struct StreamStats {
    int cut = 0;
    size_t max_owed = 0;
  };
  StreamStats stream_stats() const;

 private:
  struct Loaded {
    std::unique_ptr<Stage> stage;
    std::unique_ptr<StageRelay> relay;  // destroyed before stage: borrows it
    // NCCL from the previous stage (LinkNccl); destroyed first: borrows
    // the relay. Set and taken under the service's mu_ (after publication).
    std::unique_ptr<FrameUpstream> upstream;
    std::string next_label;  // "worker NAME (ADDRESS)" of the next stage
    std::atomic<bool> next_over_nccl{false};  // LinkNccl linked the next stage
    ~Loaded() {
      upstream.reset();
      relay.reset();
    }
  };
  // The loaded shard as Describe and LinkNccl report it (next_link as
  // linked now).
  static v1::ShardInfo shard_of(const Loaded& loaded);
  // LinkNccl as absl::Status; the shard as linked.
  absl::StatusOr<v1::ShardInfo> link_nccl(const v1::LinkNcclRequest& request);
  // Takes the ids this worker is rank 0 of out of made_ids_
  // (INVALID_ARGUMENT naming one it did not make).
  absl::Status take_nccl_ids(const v1::LinkNcclRequest& request);

  std::shared_ptr<Loaded> current() const;
  // Why there is no shard to use: UNAVAILABLE while stopping, else
  // FAILED_PRECONDITION `no_shard` (prefixed "worker <id>: ").
  absl::Status no_shard(const std::string& message) const;
  // LoadShard's checks and load, as absl::Status.
  absl::StatusOr<v1::ShardInfo> load(const v1::LoadShardRequest& request);
  absl::StatusOr<std::string> resolve_model_path(const std::string& path) const;
  // A split model with parts absent from this disk: which, in the log.
  void log_absent_parts(const ShardPlan& plan) const;

  const WorkerConfig config_;
  Progress* progress_ = nullptr;  // set_progress
  std::shared_ptr<FrameTransport> transport_;  // set_frame_transport
  std::string gpu_uuid_;  // guarded by mu_ (declared below)
  std::mutex ids_mu_;
  std::deque<LinkId> made_ids_;  // guarded by ids_mu_; newest last
  // Read bandwidth (bytes/s) and FLOP rate (FLOP/s) reported by Describe;
  // 0: unknown. Set before serving (set_machine_rates).
  std::atomic<double> read_bytes_per_s_{0};
  std::atomic<double> flops_per_s_{0};
  std::atomic<double> matmul_overhead_s_{0};
  std::mutex read_rates_mu_;
  std::vector<v1::ReadRate> read_rates_;  // guarded by read_rates_mu_
  std::string device_;  // CPU model
  std::string isa_;     // "avx512vnni", "avx512", "avx2", "baseline"

  std::mutex load_mu_;  // one LoadShard at a time
  mutable std::mutex mu_;
  std::shared_ptr<Loaded> loaded_;  // guarded by mu_
  std::string state_ = "idle";      // guarded by mu_
  bool stopping_ = false;           // guarded by mu_ (shutdown() was called)
  std::string worker_id_;           // guarded by mu_
  std::function<void(bool)> on_shard_;  // guarded by mu_

  void tell_shard();  // calls on_shard_ with whether a shard is loaded

  // Streams whose writes the watchdog times (StreamWriter): one whose
  // Write has waited answer_timeout_ms for the peer to read is cut.
  void watch(const std::shared_ptr<StreamWriter>& writer);
  void watch_writers();  // the watchdog thread's loop
  // On the watchdog thread: malloc_trim once the shard ran no micro-batch
  // for a second after it last did.
  void trim_when_idle(std::chrono::steady_clock::time_point now);
  uint64_t idle_steps_ = 0;
  std::chrono::steady_clock::time_point idle_since_{};
  bool trimmed_ = true;
  void count_owed(size_t owed);   // updates max_owed_ (no lock: per micro-batch)
  std::atomic<size_t> max_owed_{0};
  std::atomic<int> cut_{0};
  std::mutex writers_mu_;
  std::condition_variable writers_cv_;
  std::vector<std::weak_ptr<StreamWriter>> writers_;  // guarded by writers_mu_
  bool writers_stop_ = false;                         // guarded by writers_mu_
  std::thread watchdog_;
};

}  // namespace strata::worker
