// The last stage's half that turns a slice's logits into its SampledToken
// (worker/stage.cc runs it): the slice's sampling parameters, the grammar's
// vocabulary and pick, and the token's log-probabilities (what the backend
// gives the sampler: worker/head_picks.h's head_pick).
//
// Threads: none of its own; the stage's one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gguf_reader.h"
#include "model/grammar/grammar.h"
#include "model/grammar/vocabulary_table.h"
#include "strata/v1/worker.pb.h"
#include "worker/sampler.h"

namespace strata::worker {

// The most SequenceSlice.top_logprobs asks for (OpenAI's bound).
inline constexpr int kMaxTopLogprobs = 20;
// The most rows of scored slices (SequenceSlice.prompt_logprobs) one
// micro-batch may hold: the last stage keeps logits for each of them,
// [rows][n_vocab] floats (the coordinator sends 32: kScoredChunkRows).
inline constexpr int kMaxScoredRows = 256;

// The vocabulary as grammars see it (each token's bytes, end of
// generation), built once per shard load on the last stage. Errors:
// FailedPrecondition when there is no model or its tokenizer's size is not
// the head's n_vocab; the tokenizer's own errors.
absl::StatusOr<std::shared_ptr<const grammar::TokenTable>> grammar_vocabulary(
    const gguf::GgufModel* model, int n_vocab);

// The slice's sampling parameters (sampling_from_proto's bounds). The
// coordinator picks (and reports) the seed of a request that gave none; a
// stage never invents one for a random draw: InvalidArgument naming
// `field` ("slices[i].sampling") when temperature > 0 has no seed.
absl::Status to_sampling_params(const v1::SamplingParams& p, int n_vocab,
                                const std::string& field, SamplingParams* out);

// The grammar's pick of the sampler's chain over `logits` ([n_vocab]),
// accepted by `matcher`; `mask` is scratch ([ceil(n_vocab / 64)]).
// Greedy tries the unmasked argmax first (the masked argmax whenever the
// grammar allows it). Errors: FailedPrecondition when no token can
// continue; the matcher's.
absl::StatusOr<int32_t> sample_with_grammar(std::span<const float> logits, Sampler& sampler,
                                            grammar::GrammarMatcher& matcher,
                                            grammar::TokenMask* mask);

// Appends the slice's SampledToken to `result`: `id`, or, when `failed` is
// not OK, id -1 with the error's code and "worker NAME: sequence ID: ...".
v1::SampledToken* add_sampled_token(const v1::SequenceSlice& slice, int32_t id,
                                    const absl::Status& failed, const std::string& worker_name,
                                    v1::MicroBatchResult* result);

// The log-softmax at T = 1 of the raw logits (before bias and penalties):
// token `id`'s log-probability to *logprob, and its `top_logprobs` most
// likely tokens (ties: lower id first) appended to *top. `order` is scratch
// of n_vocab entries.
void token_logprobs(std::span<const float> logits, int32_t id, int top_logprobs,
                    std::vector<int32_t>& order, float* logprob,
                    google::protobuf::RepeatedPtrField<v1::TokenLogprob>* top);

// A scored slice (SequenceSlice.prompt_logprobs): `rows` is its logits,
// [tokens][n_vocab]; row r scores the token after it (the slice's token
// r + 1, or next_token after the last row) with token_logprobs and
// prompt_logprobs top tokens, into a PromptLogprobs entry of `result`
// (pos = start_pos + 1).
void add_prompt_logprobs(const v1::SequenceSlice& slice, std::span<const float> rows,
                         std::vector<int32_t>& order, v1::MicroBatchResult* result);

// token_logprobs for a sampled token: `tok`'s id, into its logprob and top.
void add_logprobs(std::span<const float> logits, int top_logprobs, std::vector<int32_t>& order,
                  v1::SampledToken* tok);

}  // namespace strata::worker
