// Scheduler: continuous batching of many generations over a pipeline of
// stages, reached through one ActivationLink to the first stage (gRPC to a
// worker, or in-process in single-node mode: the scheduler does not know).
//
// What goes into each micro-batch, and what comes of each result, is
// decided by a StepScheduler (step_scheduler.h): decode rows first, prompt
// chunks of at most `prefill_chunk` rows beside them, up to `max_in_flight`
// micro-batches (one per stage) in flight, sampled tokens through
// GenerationOutput and the request's Detokenizer to its SequenceHandle.
// This class adds the thread, the locks and the link: it sends what the
// core schedules, feeds it the results, and frees the sequences that ended
// on every worker (FreeFn).
//
// Failure: a micro-batch result with UNAVAILABLE / DEADLINE_EXCEEDED means
// the pipeline is broken: every request ends with that status (it names
// the worker), the link is dropped, on_broken is called, and new requests
// are refused with UNAVAILABLE until attach() gives a new link. fail_all()
// does the same from outside (the health monitor). Any other error code
// fails only the sequences of that micro-batch.
//
// Migration (options.max_migrations > 0): a broken pipeline (a result as
// above, a failed send, or suspend() from the health monitor) does not end
// the requests: the link is dropped, on_broken is called, and the requests
// wait (StepScheduler::suspend) — new ones are queued too — for attach() to
// give the next pipeline, where they continue where they were. Those that
// moved max_migrations times, and every request when no pipeline comes
// within migration_timeout_ms, end with the status that broke it.
// Results are stamped with the epoch (shard id) of the link they came
// through (result_callback(epoch)); those of an earlier link are dropped.
//
// Threads: the scheduler runs its own thread, which alone drives the
// StepScheduler and the link; submit(), cancel(), fail_all(), attach(),
// stats() and wait_stats() may be called from any thread. The link's result
// callback (result_callback()) only queues the result. FreeFn, on_broken
// and the trace sink run on the scheduler thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/step_scheduler.h"
#include "strata/v1/worker.pb.h"
#include "worker/activation_link.h"

namespace strata::coordinator {

class Scheduler {
 public:
  using DetokenizerFactory = std::function<std::unique_ptr<Detokenizer>()>;
  // Frees sequences on every stage (best effort; errors are the caller's to
  // log).
  using FreeFn = std::function<void(std::span<const uint64_t> seq_ids)>;
  using TraceFn = std::function<void(const v1::BlockTrace& trace)>;
  using BrokenFn = std::function<void(const absl::Status& status)>;

  Scheduler(const SchedulerOptions& options, DetokenizerFactory detokenizers,
            FreeFn free_sequences);
  ~Scheduler();  // ends every request (CANCELLED), closes the link
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void set_trace_sink(TraceFn sink);       // before the first submit
  void set_on_broken(BrokenFn on_broken);  // before the first attach

  // The callback to give the link's factory: results come back here.
  // With `epoch` (the shard id the link will be attached with), each result
  // is stamped with it, so that results of an older link are dropped.
  worker::ActivationLink::ResultCallback result_callback(uint64_t epoch = 0);

  // Takes `link` to the first stage (its results must arrive through
  // result_callback()) and the first stage's shard id; serving resumes.
  void attach(std::unique_ptr<worker::ActivationLink> link,
              uint64_t shard_id);
  // Before attach(): the prefix cache slots the new pipeline's stages hold
  // (the least of their ShardInfo.prefix_cache_blocks; 0 turns the cache
  // off, e.g. on a backend that cannot copy KV rows). The index is emptied
  // at every attach either way.
  void set_prefix_cache_blocks(int blocks);
  // Before attach(): the prompt rows of a micro-batch while a sequence
  // decodes on the new pipeline (StepScheduler::
  // set_prefill_chunk_beside_decode); without a call, as configured.
  void set_prefill_chunk_beside_decode(int rows);

  // Queues a request. Errors: InvalidArgument (empty prompt, max_tokens <
  // 1, bad sampling), OutOfRange (the prompt does not fit n_ctx),
  // ResourceExhausted (the queue is full), Unavailable (no pipeline: the
  // message says why).
  absl::StatusOr<std::shared_ptr<SequenceHandle>> submit(
      SequenceRequest request);
  // Ends a request early (the client went away). Its handle gets CANCELLED.
  void cancel(uint64_t seq_id);
  // Ends every request with `status` and drops the link (see above).
  void fail_all(const absl::Status& status);
  // The pipeline is broken (`status` names the worker): drops the link and,
  // with migration on, keeps the requests for the next attach(); without
  // it, fail_all(status).
  void suspend(const absl::Status& status);

  struct Stats {
    int active = 0;    // sequences on the workers
    int queued = 0;    // waiting for a slot
    uint64_t served = 0;  // requests that ended with kDone
    bool attached = false;
    bool recovering = false;  // migration: waiting for a new pipeline
    // The stall watchdog's view: micro-batches in flight, and when the
    // pipeline last answered (or had nothing in flight).
    int in_flight = 0;
    std::chrono::steady_clock::time_point progress{};
    uint64_t migrated = 0;    // sequences moved to a new pipeline
    std::string unavailable;  // why, when not attached
  };
  Stats stats() const;
  // The options it runs with (normalized); any thread.
  const SchedulerOptions& options() const { return core_.options(); }
  // Waits until `until(stats())` holds or `timeout` passed, and returns the
  // last stats seen. The scheduler thread publishes them after each step
  // (after freeing the sequences that ended), so a test or a drain can wait
  // for "nothing active" without polling.
  Stats wait_stats(const std::function<bool(const Stats&)>& until,
                   absl::Duration timeout) const;

 private:
  // A request accepted by submit(), not yet seen by the scheduler thread.
  struct Submitted {
    std::shared_ptr<SequenceHandle> handle;
    SequenceRequest request;
    StepScheduler::Clock::time_point at;
  };

  void loop();
  static void fail_submitted(Submitted& s, const absl::Status& status);
  // Publishes "unavailable: <status>" unless a new link is already waiting.
  void publish_broken(const absl::Status& status);
  void publish_counts(bool answered);
  // Closes the link, remembers why, calls on_broken.
  void drop_link(const absl::Status& status);
  // publish_broken, then the core fails (or suspends, with migration) its
  // requests, then drop_link.
  void break_pipeline(const absl::Status& status);
  void start_recovery(const absl::Status& status);  // under mu_
  void send_scheduled();

  FreeFn free_sequences_;
  TraceFn trace_;
  BrokenFn on_broken_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;                // wakes the scheduler thread
  mutable std::condition_variable stats_cv_;  // stats_ changed
  bool stop_ = false;
  std::deque<Submitted> submitted_;
  std::vector<uint64_t> cancelled_;
  std::deque<v1::MicroBatchResult> results_;
  std::optional<absl::Status> fail_request_;
  std::optional<absl::Status> suspend_request_;
  // Migration: the status that broke the pipeline, and when waiting for a
  // new one ends.
  std::optional<absl::Status> recovering_;
  std::chrono::steady_clock::time_point recovery_deadline_;
  std::unique_ptr<worker::ActivationLink> new_link_;
  uint64_t new_shard_id_ = 0;
  bool have_new_link_ = false;
  int new_prefix_blocks_ = -1;  // for the next link; -1: as configured
  std::optional<int> new_beside_decode_rows_;  // for the next link
  // Sequence ids a peer cannot guess (worker.proto names sequences by
  // them): the splitmix64 finaliser, a bijection, of a counter xor a
  // random key — distinct for every request, unpredictable without the key.
  uint64_t next_seq_id_ = 1;
  uint64_t seq_id_key_ = 0;
  Stats stats_;  // published copy

  // The scheduler thread's own state (core_.options() is read anywhere).
  StepScheduler core_;
  std::unique_ptr<worker::ActivationLink> link_;
  uint64_t shard_id_ = 0;
  std::string unavailable_ = "starting: shards are loading";

  std::thread thread_;
};

}  // namespace strata::coordinator
