// FakeBackend: the second implementation of the Backend seam (backend.h),
// for tests and for measuring what the pipeline around a backend costs
// (the per-hop benchmark). No weights: each row's output is a hash of the
// sequence's history, so it depends, as a transformer's does, on every
// earlier position of its own sequence and on nothing else, and a wrong
// position, a row handed to the wrong sequence or a lost KV entry changes
// every later output.
//
//   state(seq, pos) = mix(state(seq, pos - 1), input row, pos, shard range)
//   input row: the token id (first stage) or the hash of the hidden row
//   hidden row: n_embd floats in [-1, 1) drawn from the state
//   logits row: n_vocab floats in [0, 1) drawn from the state
//   embedding: the hidden rows (of the last stage) pooled (embedding_pool.h)
//
// The state of each position is kept (the fake KV cache), so
// truncate_sequence() goes back exactly. With record_calls it records what
// each forward() was given (slices and rows), so a test can see that a
// micro-batch ran as one call. The same checks and errors as the cpu
// backend's forward() (check_forward, backend.h).
//
// Threads: one call at a time. Cost: O(rows x (n_embd + n_vocab)).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "worker/backend.h"
#include "worker/head_picks.h"

namespace strata::worker {

struct FakeBackendOptions {
  int n_layer = 4;
  int n_embd = 8;
  int n_vocab = 32;
  BlockRange range{0, 4};
  int max_batch = 64;
  // Keep what each forward() ran (calls()): tests; off in a worker, whose
  // memory must not grow with the micro-batches it serves.
  bool record_calls = false;
};

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(const FakeBackendOptions& options);

  std::string_view name() const override { return "fake"; }
  const arch::Hyperparameters& hyperparameters() const override { return hp_; }
  BlockRange range() const override { return options_.range; }
  int n_vocab() const override { return options_.n_vocab; }
  int max_batch() const override { return options_.max_batch; }

  absl::Status add_sequence(int seq, int n_ctx) override;
  absl::Status remove_sequence(int seq) override;
  absl::StatusOr<int> sequence_length(int seq) const override;
  absl::StatusOr<int> sequence_context(int seq) const override;
  absl::Status truncate_sequence(int seq, int n) override;
  // A position's "KV" is its state (8 bytes).
  int64_t kv_row_bytes() const override { return 8; }
  absl::Status read_kv(int seq, int pos, int n, uint8_t* out) const override;
  absl::Status append_kv(int seq, int n, const uint8_t* in) override;
  absl::Status forward(const ForwardRequest& request,
                       ForwardResult* result) override;

  // What each successful forward() ran, in order (with record_calls).
  const std::vector<std::vector<ForwardSlice>>& calls() const { return calls_; }

 private:
  struct Sequence {
    int n_ctx = 0;
    std::vector<uint64_t> states;  // [length] state after each position
  };

  FakeBackendOptions options_;
  arch::Hyperparameters hp_;
  std::map<int, Sequence> sequences_;
  std::vector<std::vector<ForwardSlice>> calls_;
  std::vector<float> hidden_;  // [rows][n_embd]
  std::vector<float> logits_;  // [rows][n_vocab]
  std::vector<float> embeddings_;  // [embedding slices][n_embd]
  HeadPicks picks_;  // the kArgmax and kTopK slices' (take_picked_rows)
};

}  // namespace strata::worker
