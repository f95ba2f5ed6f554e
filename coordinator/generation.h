// The generation loop of one process: prefill a prompt, then sample one
// token at a time until an end-of-generation token, a stop string, max
// tokens or the end of the context.
//
// Stop strings may span tokens. Text that might be the start of a stop
// string is held back (not streamed) until it can no longer be; a stop
// string that appears is never emitted, nor anything after it; held text
// is flushed when the generation ends for another reason.
//
// Usage:
//   auto detok = make_detokenizer(*tokenizer);
//   GenerationParams params;  params.max_tokens = 64;  params.stop = {"\n\n"};
//   absl::StatusOr<GenerationResult> r = generate(
//       *backend, /*seq=*/0, prompt_ids, params, *detok,
//       [](std::string_view text) { std::cout << text << std::flush; });
//
// Errors: the sampling parameters' (worker::validate), InvalidArgument for
// an empty prompt, OutOfRange when the prompt does not fit the sequence's
// context (the backend's message), and any backend error. Reaching the
// context while generating is not an error: finish_reason is kLength.
//
// Threads: one generate() per backend at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend.h"
#include "worker/sampler.h"

namespace strata::tokenizer {
class Tokenizer;
}  // namespace strata::tokenizer

namespace strata::coordinator {

// What the loop needs from a tokenizer: streaming text and the ids that end
// a turn. make_detokenizer() adapts tokenizer::Tokenizer; tests use fakes.
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // The text `id` completes (valid UTF-8, maybe empty).
  virtual std::string push(int32_t id) = 0;
  // Ends the stream: what is still held back.
  virtual std::string finish() = 0;
  virtual bool is_end_of_generation(int32_t id) const = 0;
  // Before the first push: render control tokens as their text (a fake may
  // ignore it).
  virtual void set_render_special(bool) {}
};

// Borrows `tokenizer` (which must outlive the result).
std::unique_ptr<Detokenizer> make_detokenizer(
    const tokenizer::Tokenizer& tokenizer);

enum class FinishReason {
  kStop,    // an end-of-generation token or a stop string
  kLength,  // max_tokens, or the context is full
};
const char* finish_reason_name(FinishReason reason);  // "stop", "length"

struct GenerationParams {
  int max_tokens = 128;
  worker::SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (empty ones are ignored)
  bool ignore_eos = false;        // keep going past end-of-generation ids
};

struct Timings {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int decode_steps = 0;  // forward passes of one token after the prefill
  double prefill_s = 0;  // prompt forward passes (first token's logits)
  double decode_s = 0;   // sampling and the decode steps after it
  double prefill_tok_s() const {
    return prefill_s > 0 ? prompt_tokens / prefill_s : 0;
  }
  double decode_tok_s() const {
    return decode_s > 0 ? decode_steps / decode_s : 0;
  }
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated ids (an end-of-generation id that
                             // ended the loop is not included)
  std::string text;          // what was streamed (stop string excluded)
  FinishReason finish = FinishReason::kLength;
  Timings timings;
};

using TextCallback = std::function<void(std::string_view)>;

// Runs the loop for sequence `seq` of `backend` (a whole-model backend: it
// takes token ids and gives logits). The sequence must exist; it is
// truncated to 0 first. on_text may be empty.
absl::StatusOr<GenerationResult> generate(worker::Backend& backend, int seq,
                                          std::span<const int32_t> prompt,
                                          const GenerationParams& params,
                                          Detokenizer& detokenizer,
                                          const TextCallback& on_text);

// Stop-string matching over streamed text (used by GenerationOutput;
// public for tests). push() returns the text that can be emitted now.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  std::string push(std::string_view text);
  bool stopped() const { return stopped_; }
  // The stop string that matched (the earliest in the text; of two there,
  // the first given); "" before one did.
  const std::string& matched() const { return matched_; }
  // The held text, at the end of a generation that did not stop.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

// What becomes of each sampled token, wherever it was sampled: the part of
// the loop that generate() and the cluster's scheduler share. It applies
// the end-of-generation ids, stop strings and max_tokens, and collects the
// ids and text.
//
//   GenerationOutput out(params, *detok);
//   while (!out.done()) {
//     std::string text = out.push(sample());   // stream `text`
//     if (!out.done() && context_full) text += out.end_at_context();
//   }
//
// Borrows `detokenizer` (one per sequence: it holds streaming state).
class GenerationOutput {
 public:
  GenerationOutput(const GenerationParams& params, Detokenizer& detokenizer);

  // Takes the next sampled token; returns the text that may be streamed now
  // (with the held-back tail when this token ended the generation). An
  // end-of-generation id (unless ignore_eos) ends it without being kept.
  std::string push(int32_t token);
  // Ends a generation that push() did not end (the context is full):
  // finish reason kLength; returns the held-back text.
  std::string end_at_context();

  bool done() const { return done_; }
  FinishReason finish_reason() const { return finish_; }
  // The stop string that ended the generation; "" for any other end.
  const std::string& stop_word() const { return stops_.matched(); }
  const std::vector<int32_t>& ids() const { return ids_; }
  const std::string& text() const { return text_; }

 private:
  std::string end(FinishReason reason);

  const GenerationParams& params_;
  Detokenizer& detok_;
  StopMatcher stops_;
  std::vector<int32_t> ids_;
  std::string text_;
  FinishReason finish_ = FinishReason::kLength;
  bool done_ = false;
};

}  // namespace strata::coordinator
