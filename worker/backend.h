// Backend: runs one shard of a model — a contiguous range of transformer
// blocks, plus the token embedding on the first stage and the output norm
// and head on the last — on one device, for many sequences, each with its
// own KV cache. The forward pass is written once against this seam
// (DESIGN.md); `cpu` is the implementation today (make_cpu_backend), and
// tests/worker/fake_backend.h is a second one for tests.
//
// One forward() runs a whole micro-batch: the slices of several sequences
// (decode rows and prompt chunks together), each appended to its own
// sequence. Every weight matrix runs once over all the rows; attention runs
// per slice against that sequence's KV cache. Batch invariance: a
// sequence's outputs (hidden rows, logits) are bit-identical whether its
// slice runs alone or beside any other slices, in any position of the
// micro-batch (tests/worker/batch_invariance_test.cc).
//
// Usage (one process holding the whole model):
//   auto backend = make_cpu_backend(model, hp, {0, hp.n_layer}, options);
//   (*backend)->add_sequence(/*seq=*/0, /*n_ctx=*/4096);
//   ForwardRequest req;
//   req.seq = 0;
//   req.tokens = prompt;                 // logits of the last row (default)
//   ForwardResult out;
//   (*backend)->forward(req, &out);      // out.logits: [1][n_vocab]
//   // Two sequences decoding in one step (rows in slice order):
//   ForwardSlice slices[] = {{.seq = 0, .rows = 1, .logits = Logits::kLast},
//                            {.seq = 1, .rows = 1, .logits = Logits::kLast}};
//   int32_t next[] = {id0, id1};
//   ForwardRequest step;
//   step.tokens = next;
//   step.slices = slices;
//   (*backend)->forward(step, &out);     // out.logits: [2][n_vocab], slice 0's first
//
// Threads: one call at a time per Backend (the worker serialises them).
// Ownership: the backend keeps the GgufModel it reads weights from alive.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

namespace strata {
class Progress;  // model/progress.h
}  // namespace strata

namespace strata::worker {

// Blocks [first, last) of a model with n_layer blocks.
struct BlockRange {
  int first = 0;
  int last = 0;
};

// Which rows of a step get logits (last stage only).
enum class Logits {
  kNone,  // none (a middle stage, or a prefill chunk that is not the end)
  kLast,  // the last row of the step
  kAll,   // every row (teacher forcing, evaluation)
  // The last row's greedy pick only (ForwardResult::argmax): the first
  // index of its largest logit (worker/head_picks.h's first_argmax). A
  // backend that can picks it where the logits are (the cuda backend: on
  // the device) and keeps the row; the row's values are checked as
  // kLast's are.
  kArgmax,
  // The last row's top_k largest logits only (ForwardResult::top_ids and
  // top_logits), largest first, equal ones by lower id (the order of
  // worker/sampler.cc's top-k: worker/head_picks.h's top_candidates). A
  // backend that can selects them where the logits are (the cuda backend:
  // on the device); the row's values are checked as kLast's are.
  kTopK,
  // Embeddings (ForwardResult::embeddings; no logits): the hidden state
  // after the output norm, pooled as llama.cpp's embedding mode pools it
  // (src/llama-graph.cpp build_pooling, over result_norm):
  kEmbedLast,  // the last row's, [n_embd] (last-token pooling)
  kEmbedSum,   // the sum of the slice's rows', [n_embd] (mean pooling: the
               // caller adds the chunks' sums and divides by the rows)
};

// Whether `l` asks for an embedding rather than logits.
inline bool is_embedding(Logits l) { return l == Logits::kEmbedLast || l == Logits::kEmbedSum; }

// The most candidates a kTopK slice asks for.
inline constexpr int kMaxTopK = 1024;

// One sequence's rows inside a micro-batch: `rows` consecutive positions
// appended at the sequence's length.
struct ForwardSlice {
  int seq = 0;
  int rows = 0;  // >= 1
  Logits logits = Logits::kLast;
  // kTopK: how many candidates, 1 to min(kMaxTopK, n_vocab).
  int top_k = 0;
};

struct ForwardRequest {
  // One sequence (when `slices` is empty): all rows belong to `seq`, and
  // `logits` says which get logits.
  int seq = 0;
  // First stage: the step's token ids, [n] (slice after slice). Other
  // stages: empty.
  std::span<const int32_t> tokens;
  // Stages after the first: the previous stage's output, [n][n_embd].
  std::span<const float> hidden;
  Logits logits = Logits::kLast;
  int top_k = 0;  // kTopK (ForwardSlice::top_k)
  // Several sequences: their slices in row order (distinct seqs; rows sum
  // to n). Empty: the one sequence above.
  std::span<const ForwardSlice> slices;
  // Debug (split-invariance tracing, worker/trace.h): when set, forward()
  // appends, after each block of the shard in order, the FNV-1a 64 hash of
  // each row's output: [n_blocks][n] entries. Nullptr (the default): off.
  std::vector<uint64_t>* block_hashes = nullptr;
};

struct ForwardResult {
  int n_rows = 0;  // rows of the step (tokens, all slices)
  // Not the last stage: this shard's output, [n_rows][n_embd].
  std::span<const float> hidden;
  // Last stage: the rows each slice asked for (kLast: 1, kAll: its rows,
  // kNone, kArgmax and kTopK: 0), slice after slice, [rows][n_vocab]. Valid
  // until the next forward() on this backend.
  std::span<const float> logits;
  // Last stage: each kArgmax slice's pick, slice after slice (as long).
  std::span<const int32_t> argmax;
  // Last stage: each kTopK slice's top_k candidates, slice after slice
  // ([sum of top_k] ids and their logits; as long).
  std::span<const int32_t> top_ids;
  std::span<const float> top_logits;
  // Last stage: each kEmbedLast / kEmbedSum slice's vector, slice after
  // slice, [slices][n_embd] (worker/embedding_pool.h).
  std::span<const float> embeddings;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu"
  virtual const arch::Hyperparameters& hyperparameters() const = 0;
  virtual BlockRange range() const = 0;
  virtual int n_vocab() const = 0;
  // The most rows one forward() takes; longer prompts go in chunks.
  virtual int max_batch() const = 0;

  // Creates sequence `seq` with a KV cache of n_ctx positions.
  // AlreadyExists, InvalidArgument (n_ctx <= 0), ResourceExhausted.
  virtual absl::Status add_sequence(int seq, int n_ctx) = 0;
  // Frees it; NotFound when absent.
  virtual absl::Status remove_sequence(int seq) = 0;
  // Positions already in its cache; NotFound when absent.
  virtual absl::StatusOr<int> sequence_length(int seq) const = 0;
  // Positions its KV cache holds (the n_ctx it was added with); NotFound
  // when absent.
  virtual absl::StatusOr<int> sequence_context(int seq) const = 0;
  // Forgets positions >= n (to reuse a prefix). InvalidArgument when
  // n > length.
  virtual absl::Status truncate_sequence(int seq, int n) = 0;

  // Prefix caching (worker/prefix_store.h): the raw KV rows of a sequence,
  // every layer of the shard, kv_row_bytes() bytes a position (the layout
  // is the backend's own; only the same backend reads it back). read_kv
  // copies positions [pos, pos + n) (< length) into `out`; append_kv
  // appends n positions from `in` at the sequence's length. Restored rows
  // are the bytes forward() stored, so what follows computes exactly as if
  // the rows had been prefilled. Errors: NotFound, OutOfRange (rows outside
  // the length or the context); Unimplemented by default.
  virtual int64_t kv_row_bytes() const { return 0; }
  virtual absl::Status read_kv(int seq, int pos, int n, uint8_t* out) const {
    (void)seq, (void)pos, (void)n, (void)out;
    return absl::UnimplementedError("this backend cannot copy KV rows");
  }
  virtual absl::Status append_kv(int seq, int n, const uint8_t* in) {
    (void)seq, (void)n, (void)in;
    return absl::UnimplementedError("this backend cannot copy KV rows");
  }

  // Appends each slice's rows to its sequence at positions length ..
  // length + rows - 1 and runs all of them through the shard. Errors:
  // NotFound (no such sequence), InvalidArgument (empty step or slice,
  // more than max_batch() rows in all, a sequence in two slices, slices
  // whose rows do not sum to the step's, a token id outside the
  // vocabulary, wrong hidden size), OutOfRange when a sequence would pass
  // its context: "sequence 0: 4090 + 10 positions exceed the context of
  // 4096". Nothing is changed on error.
  virtual absl::Status forward(const ForwardRequest& request,
                               ForwardResult* result) = 0;
};

// Runs `prompt` (token ids) through `backend` for sequence `seq` in chunks of
// backend.max_batch() rows, asking for the logits of the last position only;
// `result` then holds them ([1][n_vocab] on the last stage). An empty prompt
// runs nothing. Errors: OutOfRange before any chunk runs when the prompt
// does not fit the sequence's context ("sequence 0: a prompt of 934 tokens
// after 0 positions exceeds the context of 600"); NotFound (no such
// sequence); those of forward(), from the chunk that failed.
// What every Backend::forward checks before it changes anything, in this
// order, with forward()'s errors: the hidden rows are whole rows of n_embd;
// a one-sequence request names a known sequence; 1 to max_batch rows; the
// slices (or the one sequence, as a slice of every row) each have a row, a
// known sequence (`extent` gives its length and context, or NotFound), no
// sequence twice, room in its context, and the rows sum to the step's; on
// the first stage every token id is within n_vocab.
struct StepShape {
  bool first = false;  // the stage embeds tokens
  int64_t n_embd = 0;
  int max_batch = 0;
  int n_vocab = 0;
};
struct CheckedStep {
  int64_t rows = 0;                     // of the step
  std::span<const ForwardSlice> slices;  // request.slices, or *single
};
using SequenceExtent = std::function<absl::StatusOr<std::pair<int, int>>(int seq)>;
absl::StatusOr<CheckedStep> check_forward(const ForwardRequest& request, const StepShape& shape,
                                          const SequenceExtent& extent, ForwardSlice* single);

absl::Status prefill_in_chunks(Backend& backend, int seq,
                               std::span<const int32_t> prompt,
                               ForwardResult* result);

struct CpuBackendOptions {
  int n_threads = 1;
  GgmlType kv_type = GgmlType::kF16;  // kF16 or kF32
  int max_batch = 512;                // rows per forward()
  // ISA tier of the generated kernels ("avx2", "avx512", "avx512vnni"; as
  // kernels::parse_isa): empty takes STRATA_ISA, else CPUID. A tier the CPU
  // lacks or an unknown name is an error of make_cpu_backend.
  std::string isa;
  // True: the kernels' default parameters, no tuning (reproducible runs);
  // false tunes unless STRATA_NO_TUNE=1.
  bool no_tune = false;
  // Slots (row x used expert) the mixture-of-experts step runs at once: a
  // step with more rows x n_expert_used runs its experts over blocks of
  // rows, so its buffer of slot outputs stays moe_max_slots x n_embd
  // floats (worker/cpu/cpu_backend.h, moe_block_rows). Results do not
  // depend on it.
  int moe_max_slots = 8192;
  // Where the weight repack (and the tuner's first run) reports progress,
  // one step a layer (model/progress.h); null: silent. Not owned; must
  // outlive make_cpu_backend.
  Progress* progress = nullptr;
};

// Loads the shard's weights (views into the GGUF mapping; small vectors are
// converted to f32) and checks every tensor's presence, type and shape.
// Errors name the tensor: "blk.3.attn_q.weight: missing", "blk.0.ffn_up
// .weight: shape [576, 1000], expected [576, 1536]".
absl::StatusOr<std::unique_ptr<Backend>> make_cpu_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CpuBackendOptions& options);

}  // namespace strata::worker
