// The last stage's sampling of a slice's token (stage_sampling.h).
#include "worker/stage_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "worker/sampling_proto.h"

namespace strata::worker {

absl::StatusOr<std::shared_ptr<const grammar::TokenTable>> grammar_vocabulary(
    const gguf::GgufModel* model, int n_vocab) {
  if (model == nullptr) {
    return absl::FailedPreconditionError("the stage has no model file to read its vocabulary from");
  }
  auto tok = tokenizer::Tokenizer::from_gguf(model->first());
  if (!tok.ok()) return tok.status();
  std::shared_ptr<const grammar::TokenTable> table = grammar::token_table(**tok);
  if (table->n_tokens() != n_vocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the tokenizer's ", table->n_tokens(), " tokens differ from the head's ", n_vocab));
  }
  return table;
}

absl::Status to_sampling_params(const v1::SamplingParams& p, int n_vocab,
                                const std::string& field, SamplingParams* out) {
  if (absl::Status st = sampling_from_proto(p, n_vocab, field, out); !st.ok()) {
    return st;
  }
  if (p.temperature() > 0.0f && !p.has_seed()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".seed: absent with temperature ", p.temperature(),
                     " (the coordinator must choose the seed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> sample_with_grammar(std::span<const float> logits, Sampler& sampler,
                                            grammar::GrammarMatcher& matcher,
                                            grammar::TokenMask* mask) {
  int32_t id = -1;
  // Greedy: the argmax is the masked argmax whenever the grammar allows it
  // (ties too: it is the lowest id of the highest logit), so one token is
  // checked before the whole vocabulary is.
  if (sampler.params().temperature <= 0.0f) {
    id = sampler.sample(logits);
    if (!matcher.allows(id)) id = -1;
  }
  if (id < 0) {
    if (absl::Status st = matcher.fill_mask(mask); !st.ok()) return st;
    id = sampler.sample(logits, *mask);
    if (id < 0) {
      return absl::FailedPreconditionError(
          "grammar: no token of the vocabulary can continue the output");
    }
  }
  if (absl::Status st = matcher.accept(id); !st.ok()) return st;
  return id;
}

v1::SampledToken* add_sampled_token(const v1::SequenceSlice& slice, int32_t id,
                                    const absl::Status& failed, const std::string& worker_name,
                                    v1::MicroBatchResult* result) {
  v1::SampledToken* tok = result->add_tokens();
  tok->set_seq_id(slice.seq_id());
  tok->set_pos(slice.start_pos() + slice.tokens_size());
  if (!failed.ok()) {
    tok->set_id(-1);
    tok->set_error_code(static_cast<int>(failed.code()));
    tok->set_error_message(absl::StrCat("worker ", worker_name, ": sequence ", slice.seq_id(),
                                        ": ", failed.message()));
    return tok;
  }
  tok->set_id(id);
  return tok;
}

void token_logprobs(std::span<const float> logits, int32_t id, int top_logprobs,
                    std::vector<int32_t>& order, float* logprob,
                    google::protobuf::RepeatedPtrField<v1::TokenLogprob>* top) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  auto lp = [&](int32_t t) {
    return static_cast<float>(static_cast<double>(logits[t]) - log_z);
  };
  *logprob = lp(id);
  const int n_vocab = static_cast<int>(logits.size());
  const int k = std::min(top_logprobs, n_vocab);
  if (k <= 0) return;
  order.resize(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int r = 0; r < k; ++r) {
    v1::TokenLogprob* t = top->Add();
    t->set_id(order[static_cast<size_t>(r)]);
    t->set_logprob(lp(order[static_cast<size_t>(r)]));
  }
}

void add_logprobs(std::span<const float> logits, int top_logprobs, std::vector<int32_t>& order,
                  v1::SampledToken* tok) {
  float logprob = 0.0f;
  token_logprobs(logits, tok->id(), top_logprobs, order, &logprob, tok->mutable_top());
  tok->set_logprob(logprob);
}

void add_prompt_logprobs(const v1::SequenceSlice& slice, std::span<const float> rows,
                         std::vector<int32_t>& order, v1::MicroBatchResult* result) {
  const int n = slice.tokens_size();
  const size_t n_vocab = n > 0 ? rows.size() / static_cast<size_t>(n) : 0;
  v1::PromptLogprobs* out = result->add_prompt_logprobs();
  out->set_seq_id(slice.seq_id());
  out->set_pos(slice.start_pos() + 1);
  for (int r = 0; r < n; ++r) {
    const int32_t next = r + 1 < n                 ? slice.tokens(r + 1)
                         : slice.has_next_token() ? slice.next_token()
                                                  : -1;
    if (next < 0 || static_cast<size_t>(next) >= n_vocab) continue;
    v1::TokenChoice* t = out->add_tokens();
    t->set_id(next);
    float logprob = 0.0f;
    token_logprobs(rows.subspan(static_cast<size_t>(r) * n_vocab, n_vocab), next,
                   slice.prompt_logprobs(), order, &logprob, t->mutable_top());
    t->set_logprob(logprob);
  }
}

}  // namespace strata::worker
