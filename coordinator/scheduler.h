// Scheduler: continuous batching of many generations over a pipeline of
// stages, reached through one ActivationLink to the first stage (gRPC to a
// worker, or in-process in single-node mode: the scheduler does not know).
//
// Each micro-batch carries slices of several sequences:
//   - decode steps: one row per sequence (its last sampled token), sample;
//   - prompt chunks: at most `prefill_chunk` rows of one prompt, cut at the
//     same boundaries as worker::prefill_in_chunks (so a split changes no
//     number); the chunks of one prompt follow each other through the
//     pipeline without waiting for each other's results.
// Up to `max_in_flight` micro-batches (one per stage) are in flight; the
// decoding sequences are spread over them so every stage has work.
//
// The last stage samples (its sampler gets the request's SamplingParams and
// seed with the slice at start_pos 0); the scheduler feeds each sampled
// token through GenerationOutput (end-of-generation ids, stop strings,
// max_tokens) and the sequence's Detokenizer, streams text deltas to the
// request's SequenceHandle, ends at the context, and frees the sequence on
// every worker (FreeFn) when it ends.
//
// Failure: a micro-batch result with UNAVAILABLE / DEADLINE_EXCEEDED means
// the pipeline is broken: every request ends with that status (it names
// the worker), the link is dropped, on_broken is called, and new requests
// are refused with UNAVAILABLE until attach() gives a new link. fail_all()
// does the same from outside (the health monitor). Any other error code
// fails only the sequences of that micro-batch.
//
// Threads: the scheduler runs its own thread; submit(), cancel(),
// fail_all(), attach() and stats() may be called from any thread. The
// link's result callback (result_callback()) only queues the result.
// FreeFn and on_broken run on the scheduler thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
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
#include "coordinator/generation.h"
#include "strata/v1/worker.pb.h"
#include "worker/activation_link.h"

namespace strata::coordinator {

struct SchedulerOptions {
  int max_sequences = 8;   // live sequences at once (the shards' limit)
  int max_queued = 256;    // waiting requests beyond that; more: refused
  int n_ctx = 0;           // positions per sequence
  int prefill_chunk = 512; // rows of one prompt chunk
  // Rows per micro-batch: at least prefill_chunk + max_sequences (the
  // shards' max_batch_rows), so a full chunk travels beside every decode.
  int max_batch_rows = 0;
  int max_in_flight = 1;   // micro-batches in flight: one per stage
  bool trace = false;      // ask the stages for BlockTrace entries
};

// One generation.
struct SequenceRequest {
  std::vector<int32_t> prompt;  // token ids, 1 .. n_ctx
  GenerationParams params;      // max_tokens >= 1, sampling with its seed
  bool logprobs = false;
  int top_logprobs = 0;
};

struct SequenceTimings {
  double queue_ms = 0;    // submitted -> first micro-batch sent
  double ttft_ms = 0;     // submitted -> first token back
  double prefill_ms = 0;  // first micro-batch sent -> first token back
  double decode_ms = 0;   // first token -> end
  int decode_steps = 0;   // decode micro-batches after the first token
};

// What a request receives, in order: deltas, then one kDone or kError.
struct SequenceEvent {
  enum class Kind { kDelta, kDone, kError };
  Kind kind = Kind::kDelta;
  // kDelta: the ids sampled and the text they made printable (maybe "").
  std::vector<int32_t> ids;
  std::string text;
  std::vector<v1::SampledToken> tokens;  // with logprobs when asked
  // kDone.
  FinishReason finish = FinishReason::kLength;
  std::vector<int32_t> all_ids;
  std::string all_text;
  SequenceTimings timings;
  // kError.
  absl::Status error;
};

// The consumer's end of a request. Shared by the scheduler and the caller.
class SequenceHandle {
 public:
  // The next event; nullopt when none came within `timeout`.
  std::optional<SequenceEvent> next(absl::Duration timeout);
  uint64_t seq_id() const { return seq_id_; }

 private:
  friend class Scheduler;
  void push(SequenceEvent event);

  uint64_t seq_id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
};

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
  worker::ActivationLink::ResultCallback result_callback();

  // Takes `link` to the first stage (its results must arrive through
  // result_callback()) and the first stage's shard id; serving resumes.
  void attach(std::unique_ptr<worker::ActivationLink> link,
              uint64_t shard_id);

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

  struct Stats {
    int active = 0;    // sequences on the workers
    int queued = 0;    // waiting for a slot
    uint64_t served = 0;  // requests that ended with kDone
    bool attached = false;
    std::string unavailable;  // why, when not attached
  };
  Stats stats() const;

 private:
  struct Sequence;
  struct InFlight;

  void loop();
  void process_result(v1::MicroBatchResult result);
  void fail_sequence(Sequence& seq, const absl::Status& status);
  void break_pipeline(const absl::Status& status);
  void finish(Sequence& seq);
  bool compose(v1::MicroBatch* batch, InFlight* record);
  void retire_finished(std::vector<uint64_t>* to_free);

  const SchedulerOptions options_;
  DetokenizerFactory detokenizers_;
  FreeFn free_sequences_;
  TraceFn trace_;
  BrokenFn on_broken_;

  // Shared with other threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Sequence>> submitted_;
  std::vector<uint64_t> cancelled_;
  std::deque<v1::MicroBatchResult> results_;
  std::optional<absl::Status> fail_request_;
  std::unique_ptr<worker::ActivationLink> new_link_;
  uint64_t new_shard_id_ = 0;
  bool have_new_link_ = false;
  uint64_t next_seq_id_ = 1;
  Stats stats_;  // published copy

  // The scheduler thread's own state.
  std::unique_ptr<worker::ActivationLink> link_;
  uint64_t shard_id_ = 0;
  uint64_t next_batch_id_ = 1;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::map<uint64_t, std::unique_ptr<Sequence>> active_;  // by seq_id
  std::map<uint64_t, InFlight> in_flight_;                 // by batch_id
  std::string unavailable_ = "starting: shards are loading";
  uint64_t served_ = 0;

  std::thread thread_;
};

// worker::SamplingParams as the wire carries them.
v1::SamplingParams to_proto(const worker::SamplingParams& params);

}  // namespace strata::coordinator
