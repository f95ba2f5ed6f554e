// Sampler: picks the next token from a row of logits — the last stage of
// the pipeline, so only token ids travel back to the coordinator.
//
// The chain (the order of llama.cpp's common sampler):
//   0. logit bias: logit += bias[id] for the ids `logit_bias` names
//      (OpenAI's logit_bias; llama.cpp's first sampler; -100 all but bans
//      a token, +100 all but forces it);
//   1. penalties over the last `penalty_last_n` accepted tokens:
//      repetition (CTRL, Keskar et al. 2019: a positive logit is divided by
//      it, a negative one multiplied), then logit -= count * frequency +
//      (count > 0) * presence (OpenAI's definition);
//   2. temperature <= 0: the argmax (lowest id on ties) — greedy;
//   3. top-k (0 = off), 4. top-p (nucleus, Holtzman et al. 2019; 1 = off),
//   5. min-p (p >= min_p * p_max; 0 = off), 6. temperature, 7. a draw from
//      the softmax with a seeded mt19937_64.
// The same seed and inputs give the same tokens on every platform (the
// draw uses the generator's raw bits, not a library distribution).
//
// The grammar hook: sample() may take `allowed`, one bit per token (bit i
// of word i / 64; structured output, model/grammar/grammar.h). A token
// whose bit is 0 is out before step 1, as if its logit were -inf; the
// chain then runs over the others unchanged. With no mask (an empty span)
// every token is a candidate, exactly as before.
//
// Ownership: owns buffers of n_vocab entries, made at construction; sample()
// and accept() do not allocate. Threads: one caller at a time.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace strata::worker {

// A logit bias: (token id, bias) pairs, ids increasing and distinct, each
// in [0, n_vocab), each bias finite (validate() checks all but the
// vocabulary). Copies share the pairs (a request's n choices hold one
// list, not n: up to n_vocab pairs apiece).
class LogitBias {
 public:
  using Entry = std::pair<int32_t, float>;
  LogitBias() = default;
  explicit LogitBias(std::vector<Entry> entries)
      : entries_(entries.empty() ? nullptr
                                 : std::make_shared<const std::vector<Entry>>(std::move(entries))) {}
  LogitBias(std::initializer_list<Entry> entries) : LogitBias(std::vector<Entry>(entries)) {}

  bool empty() const { return entries_ == nullptr; }
  std::span<const Entry> entries() const {
    return entries_ == nullptr ? std::span<const Entry>() : std::span<const Entry>(*entries_);
  }
  const Entry* begin() const { return entries().data(); }
  const Entry* end() const { return entries().data() + entries().size(); }

 private:
  std::shared_ptr<const std::vector<Entry>> entries_;
};

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
  int penalty_last_n = 64;         // tokens the penalties look back over
  uint64_t seed = 0;
  LogitBias logit_bias;  // empty: off
};

// The sampler's order of candidates (top-k, top-p, the draw): a larger
// logit first, equal logits by lower id (-0 equals +0).
inline bool logit_before(float a, int32_t id_a, float b, int32_t id_b) {
  return a > b || (a == b && id_a < id_b);
}

// InvalidArgument naming the field for a value out of range (negative
// top_k, top_p outside (0, 1], min_p outside [0, 1], non-positive repeat
// penalty, non-finite values, negative penalty_last_n, logit_bias ids
// negative or not increasing). A logit_bias id past the vocabulary is the
// caller's to refuse (sampling_proto.h); the sampler ignores it.
absl::Status validate(const SamplingParams& params);

class Sampler {
 public:
  // params must be valid (validate()).
  Sampler(const SamplingParams& params, int n_vocab);

  // The next token for `logits` ([n_vocab]); with `allowed` (empty or
  // [ceil(n_vocab / 64)] words), only among the tokens whose bit is set:
  // -1 when none is.
  int32_t sample(std::span<const float> logits,
                 std::span<const uint64_t> allowed = {});
  // The next token from the top-k step's candidates (Logits::kTopK,
  // worker/head_picks.h's top_candidates): ids and their logits, largest
  // first, equal ones by lower id, min(top_k, n_vocab) of them. For a
  // sampler with temperature > 0, 0 < top_k and no penalty or mask, the
  // token (and the draw) sample() takes from the whole row.
  int32_t sample_top(std::span<const int32_t> ids, std::span<const float> logits);
  // Records a token of the sequence (prompt or generated) for penalties.
  void accept(int32_t token);
  // Forgets the history and reseeds.
  void reset();
  // Migration (worker.proto SequenceSlice.generated_from): advances the
  // generator past the draw sample() made for one token generated before,
  // on another pipeline: one draw when temperature > 0 (sample() draws once
  // per token then), none when greedy. The token itself comes in through
  // accept(), like every position of the sequence.
  void replay_draw();

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };

  int32_t draw(size_t n);

  SamplingParams params_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // [n_vocab]
  std::vector<float> bias_;            // [n_vocab] when logit_bias is set, else empty
  std::vector<int32_t> counts_;        // [n_vocab] occurrences in the window
  std::vector<int32_t> history_;       // ring of the last penalty_last_n
  size_t history_next_ = 0;
  size_t history_size_ = 0;
};

}  // namespace strata::worker
