// StepScheduler: the decisions of continuous batching with no thread, no
// lock and no link (vLLM's schedule() / update_from_output() is the model).
// Scheduler (scheduler.h) wraps it in a thread and a link; a test drives it
// step by step.
//
// The step contract, all on one thread:
//   add(handle, request)        a validated request joins the queue;
//   schedule()                  admits waiting requests into free slots and
//                               returns the next micro-batch to send, or
//                               nullopt (nothing to send, or max_in_flight
//                               micro-batches already out);
//   update_from_output(result)  a micro-batch came back: sampled tokens go
//                               through GenerationOutput and the Detokenizer
//                               to the handles as deltas, then done or error;
//   take_finished()             the sequences that ended and have nothing in
//                               flight: free them on every stage;
//   cancel(id), fail_all(status).
//
// A micro-batch (schedule()) is built in this order, within max_batch_rows
// rows and max_sequences slices:
//   1. decode steps: one row per sequence holding a sampled token (its last
//      token at start_pos = positions sent so far), at most
//      ceil(decoding / max_in_flight) of them, so the decoding sequences are
//      spread over the micro-batches in flight and every stage has work;
//   2. prompt chunks beside them, oldest request first (add() order): at most
//      prefill_chunk rows of one prompt (worker::prefill_in_chunks's
//      boundaries); while any sequence decodes, at most
//      prefill_chunk_beside_decode prompt rows in all, the next prompt
//      taking what an older one leaves (on the cpu backend a row's result
//      does not depend on its chunk: tests/worker/batch_invariance_test.cc).
//      The chunks of one prompt follow each other in consecutive
//      micro-batches without waiting for results; only the
//      last one samples, and the first carries the SamplingParams (with the
//      seed). An embedding's chunks (SequenceRequest::embed) sample
//      nothing: each asks for its rows' sum (mean pooling), or the last for
//      its last row (last pooling); the sequence ends with kDone when the
//      last chunk is back. A scored prompt's chunks (prompt_logprobs) ask the last stage
//      for their tokens' log-probabilities, each with the token after it
//      (next_token); they come back position by position, each taken once,
//      and the kDone event carries them.
// Prefix caching (options.prefix_cache_blocks > 0; prefix_index.h): when a
// prompt's first slice is built, the longest run of its full blocks in the
// index (at most (prompt - 1) / block_tokens of them: one row at least is
// prefilled, for the logits) is restored on every stage (restore_blocks)
// and the first chunk starts after them (those rows need no prefill); each
// prompt chunk asks the stages to save the full blocks it completes that
// the index lacks (save_blocks, slots recycled LRU). A failed micro-batch
// un-indexes the blocks it saved; one that restored clears the index.
// A result with UNAVAILABLE / DEADLINE_EXCEEDED / CANCELLED breaks the
// pipeline: update_from_output() returns it, and every request (active or
// waiting) ends with that status — or, with max_migrations > 0, the
// requests wait for the next pipeline (suspend()). Any other error code fails only the
// sequences of that micro-batch.
//
// Ownership: owns the sequences (request, Detokenizer, GenerationOutput) and
// the record of micro-batches in flight; shares each SequenceHandle with its
// consumer. Threads: not thread-safe; one thread at a time drives it (the
// hooks run on that thread). Handles may be read from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/generation.h"
#include "coordinator/prefix_index.h"
#include "strata/v1/worker.pb.h"

namespace strata::coordinator {

class ServingMetrics;  // metrics.h

struct SchedulerOptions {
  int max_sequences = 8;    // live sequences at once (the shards' limit)
  int max_queued = 256;     // waiting requests beyond that; more: refused
  int n_ctx = 0;            // positions per sequence
  int prefill_chunk = 512;  // rows of one prompt chunk
  // While any sequence decodes (or has its last prompt chunk in flight),
  // the prompt chunks of one micro-batch hold at most this many rows in all
  // (Sarathi-Serve's token budget, stall-free batching): a decode step that shares a micro-batch with a prompt chunk
  // takes as long as the chunk, so this bounds the inter-token latency of
  // every decoding sequence while long prompts arrive. Prompts alone still
  // go prefill_chunk rows at a time. 0 or more than prefill_chunk: whole
  // chunks (a chunk that does not fit waits whole, so prompts are cut at
  // multiples of prefill_chunk whatever the load). On the cpu backend
  // tokens and logits do not depend on it (a row's result does not depend
  // on the chunk it travels in: ChunkInvariance); docs/cluster.md says what
  // may (mean-pooled embeddings by float rounding, the cuda backend). The
  // deployed default is ClusterConfig's.
  int prefill_chunk_beside_decode = 0;
  // Rows per micro-batch: at least prefill_chunk + max_sequences (the
  // shards' max_batch_rows), so a full chunk travels beside every decode.
  // 0: exactly that.
  int max_batch_rows = 0;
  int max_in_flight = 1;  // micro-batches in flight: one per stage
  bool trace = false;     // ask the stages for BlockTrace entries
  // Fed on the driving thread (tokens, TTFT, inter-token latency, request
  // ends, micro-batch round trips); null: none. Borrowed: must outlive the
  // scheduler.
  ServingMetrics* metrics = nullptr;
  // Prefix caching (prefix_index.h): slots of every stage's block store
  // (LoadShardRequest.prefix_cache_blocks; 0: off) and tokens a block.
  int prefix_cache_blocks = 0;
  int prefix_block_tokens = kDefaultPrefixBlockTokens;
  // Migration (suspend()): pipelines a request may move to after the one
  // it ran on broke; 0: a broken pipeline fails its requests at once.
  int max_migrations = 0;
  // How long requests wait for a new pipeline before they fail (Scheduler).
  int migration_timeout_ms = 60000;
};

// Rows of scored prompts' chunks (SequenceRequest.prompt_logprobs) in one
// micro-batch, all sequences together: the last stage computes logits for
// every row of them, [rows][n_vocab] floats (32 x 49,152 x 4 bytes = 6 MiB
// for SmolLM2), where a chunk of another prompt needs one row.
inline constexpr int kScoredChunkRows = 32;

// An embedding request's pooling (SequenceRequest::embed): its prompt is
// prefilled and nothing is generated; kDone carries the pooled hidden state
// after the output norm (worker/embedding_pool.h), as llama.cpp's embedding
// mode computes it.
enum class Pooling {
  kNone,  // a generation
  kMean,  // the mean over every prompt position: each chunk's sum comes back
          // (EMBED_SUM), the sums are added in position order and divided
  kLast,  // the last prompt position's (EMBED_LAST on the last chunk)
};

// One generation (or, with embed, one embedding).
struct SequenceRequest {
  std::vector<int32_t> prompt;  // token ids, 1 .. n_ctx
  GenerationParams params;      // max_tokens >= 1, sampling with its seed
  bool logprobs = false;
  int top_logprobs = 0;
  // >= 0: score the prompt (GenerateRequest.prompt_logprobs) with that many
  // most likely tokens a position; the prefix cache is not used for it.
  int prompt_logprobs = -1;
  // Structured output: GBNF the generated tokens must follow ("" = none);
  // sent in the sequence's first slice (SequenceSlice.grammar). A sampled
  // token that comes back with an error (a grammar the last stage refused)
  // ends only this sequence, with that error.
  std::string grammar;
  // Control tokens are rendered as their text ("<tool_call>",
  // "<|python_tag|>") for a tool-call parser; end-of-generation ids still end
  // the sequence and are not rendered.
  bool render_special = false;
  // Prefix caching: only requests of one salt share cached blocks
  // (GenerateRequest.cache_salt; prefix_index.h); "" the shared cache.
  std::string cache_salt;
  // Not kNone: an embedding (see Pooling); params, logprobs, grammar and
  // prompt_logprobs are not used. A mean-pooled prompt restores nothing
  // from the prefix cache (restored rows are not pooled); it still saves.
  Pooling embed = Pooling::kNone;
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
  // A scored prompt (SequenceRequest.prompt_logprobs), on the first event
  // after its first token (a kDelta, or the kDone): `scored` true and
  // prompt[i + 1]'s log-probability for i in [0, prompt - 1).
  bool scored = false;
  std::vector<v1::TokenChoice> prompt_logprobs;
  // kDone.
  // An embedding request's vector (SequenceRequest::embed), [n_embd], not
  // normalized.
  std::vector<float> embedding;
  int cached_tokens = 0;  // prompt tokens restored from the prefix cache
  FinishReason finish = FinishReason::kLength;
  std::string stop_word;  // the stop string that ended it; "" otherwise
  std::vector<int32_t> all_ids;
  std::string all_text;
  SequenceTimings timings;
  // kError.
  absl::Status error;
};

// The consumer's end of a request. Shared by the scheduler and the caller;
// any thread.
class SequenceHandle {
 public:
  SequenceHandle() = default;
  explicit SequenceHandle(uint64_t seq_id) : seq_id_(seq_id) {}
  // The next event; nullopt when none came within `timeout`.
  std::optional<SequenceEvent> next(absl::Duration timeout);
  uint64_t seq_id() const { return seq_id_; }

 private:
  friend class Scheduler;
  friend class StepScheduler;
  void push(SequenceEvent event);

  uint64_t seq_id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SequenceEvent> events_;
};

class StepScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  using DetokenizerFactory = std::function<std::unique_ptr<Detokenizer>()>;

  // Called on the driving thread before the handles hear of the change, so
  // whoever sees the event sees the caller's published state too. Each may
  // be empty.
  struct Hooks {
    std::function<void(const v1::BlockTrace&)> trace;  // from each result
    std::function<void(uint64_t served)> served;       // a request ended kDone
    std::function<void(const absl::Status&)> broken;   // before all fail
  };

  // `options` are normalized (at least one sequence, chunk row and
  // micro-batch in flight; max_batch_rows 0 -> prefill_chunk +
  // max_sequences; prefill_chunk <= max_batch_rows).
  StepScheduler(const SchedulerOptions& options,
                DetokenizerFactory detokenizers);
  ~StepScheduler();
  StepScheduler(const StepScheduler&) = delete;
  StepScheduler& operator=(const StepScheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }  // any thread
  void set_hooks(Hooks hooks);

  // Queues a request that passed Scheduler::submit's checks (prompt 1 ..
  // n_ctx tokens, max_tokens >= 1, valid sampling). Its id is
  // handle->seq_id(), unique among the live ones.
  void add(std::shared_ptr<SequenceHandle> handle, SequenceRequest request,
           Clock::time_point submitted = Clock::now());
  // Ends a request with CANCELLED; an active one is in take_finished() once
  // its micro-batches in flight came back. Unknown ids are ignored.
  void cancel(uint64_t seq_id);
  // Ends every request with `status` and forgets the micro-batches in flight
  // (their results are ignored). Nothing is left to free.
  void fail_all(const absl::Status& status);
  // Migration: the pipeline broke (`status`) and a new one will come. The
  // micro-batches in flight are forgotten; every active sequence that has
  // been through fewer than `max_migrations` pipelines keeps its prompt,
  // its generated tokens and its sampler's seed, and starts again on the
  // next pipeline: prompt + generated tokens prefilled in chunks, the first
  // slice naming where the generated ones start (generated_from), so the
  // last stage replays its sampler and grammar and the next token is the
  // one an undisturbed run samples. The others end with `status`. Waiting
  // requests stay queued. Returns the sequences kept.
  int suspend(const absl::Status& status, int max_migrations);

  // The next micro-batch to send (batch_id set, shard_id left to the
  // caller), or nullopt. See the top of the file.
  std::optional<v1::MicroBatch> schedule();
  // Takes the result of a micro-batch from schedule(); results of unknown
  // batch ids (forgotten by fail_all) are ignored. Returns OK, or the status
  // that broke the pipeline (every request has then failed with it).
  absl::Status update_from_output(v1::MicroBatchResult result);
  // The ids of the sequences that ended and have nothing in flight, in id
  // order; they leave the active set (their slots are free).
  std::vector<uint64_t> take_finished();

  int active() const { return static_cast<int>(active_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  // Positions held in the stages' KV caches by the active sequences.
  int64_t kv_positions() const;
  // Forgets the prefix index: the stages' block stores are new (the
  // shards were loaded again). `capacity` >= 0: their slots now (at most
  // the configured prefix_cache_blocks); -1: as before.
  void reset_prefix_cache(int capacity = -1);
  // Prompt rows of a micro-batch while a sequence decodes, from the next
  // schedule() on (normalized as SchedulerOptions::
  // prefill_chunk_beside_decode; options() keeps the configured value).
  void set_prefill_chunk_beside_decode(int rows);
  int prefill_chunk_beside_decode() const { return beside_decode_rows_; }
  const PrefixIndex& prefix_index() const { return prefix_; }
  uint64_t served() const { return served_; }  // requests that ended kDone
  uint64_t migrated() const { return migrated_; }  // sequences suspend() kept

 private:
  struct Sequence;
  struct InFlight {
    std::vector<uint64_t> seqs;  // slice order
    std::vector<bool> sample;    // whether each slice samples
    Clock::time_point sent;
    std::vector<PrefixBlock> saved;  // prefix blocks it saves
    bool restores = false;        // a slice restores cached blocks
  };

  void admit();
  void fail_sequence(Sequence& seq, const absl::Status& status);
  void finish(Sequence& seq);
  void take_token(Sequence& seq, const v1::SampledToken& token);
  void take_prompt_logprobs(Sequence& seq, const v1::PromptLogprobs& scored);
  bool attach_prompt_logprobs(Sequence& seq, SequenceEvent& event);
  void take_embedding(Sequence& seq, const v1::SliceEmbedding& part);
  void finish_embedding(Sequence& seq);
  void deliver_done(Sequence& seq, SequenceEvent e, Clock::time_point now);
  void save_decoded_block(Sequence& seq, v1::SequenceSlice& slice, InFlight& record);

  const SchedulerOptions options_;
  DetokenizerFactory detokenizers_;
  Hooks hooks_;
  uint64_t next_batch_id_ = 1;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::map<uint64_t, std::unique_ptr<Sequence>> active_;  // by seq_id
  std::map<uint64_t, InFlight> in_flight_;                // by batch_id
  uint64_t served_ = 0;
  uint64_t migrated_ = 0;
  uint64_t added_ = 0;
  PrefixIndex prefix_;
  int beside_decode_rows_;  // set_prefill_chunk_beside_decode()
};

// worker::SamplingParams as the wire carries them.
v1::SamplingParams to_proto(const worker::SamplingParams& params);

}  // namespace strata::coordinator
