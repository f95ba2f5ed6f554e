// Stage: one shard of the pipeline, independent of transport. It checks a
// strata.v1.MicroBatch against the loaded shard, runs its slices through
// the Backend (embedding on the first stage, blocks, and on the last stage
// the norm, head and sampler), and produces either the activations for the
// next stage or the sampled tokens.
//
// Checks (INVALID_ARGUMENT naming the field, nothing changed on error):
// shard_id equals the loaded one; 1 <= slices <= max_sequences with
// distinct seq_ids; each slice has 1..max_batch_rows tokens, the total too;
// token ids in [0, n_vocab); start_pos is 0 or the sequence's length here
// (NOT_FOUND for an unknown sequence with start_pos > 0); start_pos + rows
// <= n_ctx (OUT_OF_RANGE); hidden is exactly rows x n_embd x 4 bytes on
// stages after the first and empty on the first; sampling params valid;
// top_logprobs in 0..20; a new sequence beyond max_sequences is
// RESOURCE_EXHAUSTED.
//
// Prefix caching (worker.proto SequenceSlice fields 20..24, LoadShard
// prefix_cache_blocks): a slice that restores blocks starts its sequence
// with the block store's rows (worker/prefix_store.h), copied in before the
// forward pass; saves copy rows out after it. Wrong ids, empty slots or
// another key are INVALID_ARGUMENT; a failed micro-batch empties the slots
// it would have saved.
//
// Embeddings (last stage): a slice with `embed` gets no logits and no
// token; MicroBatchResult.embeddings carries its hidden state after the
// output norm, its last row's (EMBED_LAST) or the sum of its rows'
// (EMBED_SUM) (worker/embedding_pool.h). `embed` with sample or
// prompt_logprobs is INVALID_ARGUMENT.
//
// Structured output (last stage): a slice that starts its sequence (start_pos 0, or restoring cached blocks) may carry a GBNF
// grammar (docs/structured-output.md); the stage masks, at each sampled
// slice of that sequence, the tokens the grammar does not allow before the
// sampler's chain. A grammar that does not parse (or is over 64 KiB, or a
// stage without a vocabulary) does NOT fail the micro-batch: that
// sequence's SampledToken carries error_code INVALID_ARGUMENT (or
// FAILED_PRECONDITION / RESOURCE_EXHAUSTED) naming slices[i].grammar, id -1.
//
// Threads: one run() at a time (the caller serialises).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "strata/v1/worker.pb.h"
#include "worker/backend.h"

namespace strata::worker {

struct StageOptions {
  std::string worker_name;  // in error messages and traces
  // The weight repack's progress (CpuBackendOptions::progress); null:
  // silent. Not owned.
  Progress* progress = nullptr;
};

class Stage {
 public:
  virtual ~Stage() = default;

  virtual const v1::ShardInfo& shard() const = 0;
  virtual int live_sequences() const = 0;

  // Runs `batch`. On a stage that is not the last, `next` receives the
  // micro-batch for the next stage (same ids and slices, hidden replaced by
  // this shard's output, traces appended to `result`); on the last stage
  // `result` receives the sampled tokens. Errors as above.
  virtual absl::Status run(const v1::MicroBatch& batch, v1::MicroBatch* next,
                           v1::MicroBatchResult* result) = 0;

  // Frees sequences; returns how many existed.
  virtual int free_sequences(const uint64_t* seq_ids, int n) = 0;
};

// Loads the shard `request` describes (checked against the model and the
// limits in worker.proto) onto a cpu backend with `n_threads`.
absl::StatusOr<std::unique_ptr<Stage>> load_stage(
    const v1::LoadShardRequest& request, int n_threads,
    const StageOptions& options);

}  // namespace strata::worker
