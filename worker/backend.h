// Backend: runs one shard of a model — a contiguous range of transformer
// blocks, plus the token embedding on the first stage and the output norm
// and head on the last — on one device, for many sequences, each with its
// own KV cache. The forward pass is written once against this seam
// (DESIGN.md); `cpu` is the implementation today (make_cpu_backend).
//
// Usage (one process holding the whole model):
//   auto backend = make_cpu_backend(model, hp, {0, hp.n_layer}, options);
//   (*backend)->add_sequence(/*seq=*/0, /*n_ctx=*/4096);
//   ForwardRequest req{.seq = 0, .tokens = prompt, .logits = Logits::kLast};
//   ForwardResult out;
//   (*backend)->forward(req, &out);  // out.logits: [1][n_vocab]
//
// Threads: one call at a time per Backend (the worker serialises them).
// Ownership: the backend keeps the GgufModel it reads weights from alive.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/architecture/architecture.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"

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
};

struct ForwardRequest {
  int seq = 0;
  // First stage: the step's token ids, [n]. Other stages: empty.
  std::span<const int32_t> tokens;
  // Stages after the first: the previous stage's output, [n][n_embd].
  std::span<const float> hidden;
  Logits logits = Logits::kLast;
  // Debug (split-invariance tracing, worker/trace.h): when set, forward()
  // appends, after each block of the shard in order, the FNV-1a 64 hash of
  // each row's output: [n_blocks][n] entries. Nullptr (the default): off.
  std::vector<uint64_t>* block_hashes = nullptr;
};

struct ForwardResult {
  int n_rows = 0;  // rows of the step (tokens)
  // Not the last stage: this shard's output, [n_rows][n_embd].
  std::span<const float> hidden;
  // Last stage: [1 or n_rows][n_vocab] as requested. Valid until the next
  // forward() on this backend.
  std::span<const float> logits;
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

  // Appends the request's rows to the sequence at positions length ..
  // length + n - 1 and runs them through the shard. Errors: NotFound (no
  // such sequence), InvalidArgument (empty step, more than max_batch()
  // rows, a token id outside the vocabulary, wrong hidden size),
  // OutOfRange when the sequence would pass its context: "sequence 0:
  // 4090 + 10 positions exceed the context of 4096". Nothing is changed on
  // error.
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
