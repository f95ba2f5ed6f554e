#include "coordinator/generation.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "worker/head_picks.h"

namespace strata::coordinator {
namespace {

class TokenizerDetokenizer final : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(const tokenizer::Tokenizer& t)
      : tokenizer_(t) { stream_.emplace(t); }
  std::string push(int32_t id) override {
    absl::StatusOr<std::string> s = stream_->push(id);
    return s.ok() ? *s : std::string();
  }
  std::string finish() override { return stream_->finish(); }
  void set_render_special(bool on) override {
    tokenizer::DecodeOptions o;
    o.render_special = on;
    stream_.emplace(tokenizer_, o);
  }
  bool is_end_of_generation(int32_t id) const override {
    return tokenizer_.is_end_of_generation(id);
  }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  std::optional<tokenizer::StreamDecoder> stream_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

std::unique_ptr<Detokenizer> make_detokenizer(
    const tokenizer::Tokenizer& tokenizer) {
  return std::make_unique<TokenizerDetokenizer>(tokenizer);
}

const char* finish_reason_name(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  // A complete stop string: emit what precedes the earliest one, then stop.
  size_t first = std::string::npos;
  const std::string* word = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      word = &s;
    }
  }
  if (first != std::string::npos) {
    matched_ = *word;
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail of held_ that begins some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

GenerationOutput::GenerationOutput(const GenerationParams& params,
                                   Detokenizer& detokenizer)
    : params_(params), detok_(detokenizer), stops_(params.stop) {
  if (params_.max_tokens <= 0) done_ = true;
}

std::string GenerationOutput::push(int32_t token) {
  if (done_) return "";
  if (!params_.ignore_eos && detok_.is_end_of_generation(token)) {
    return end(FinishReason::kStop);
  }
  ids_.push_back(token);
  std::string out = stops_.push(detok_.push(token));
  text_ += out;
  if (stops_.stopped()) {
    done_ = true;
    finish_ = FinishReason::kStop;
    return out;
  }
  if (static_cast<int>(ids_.size()) >= params_.max_tokens) {
    out += end(FinishReason::kLength);
  }
  return out;
}

std::string GenerationOutput::end_at_context() {
  if (done_) return "";
  return end(FinishReason::kLength);
}

std::string GenerationOutput::end(FinishReason reason) {
  done_ = true;
  finish_ = reason;
  std::string out = stops_.push(detok_.finish());
  if (stops_.stopped()) {
    finish_ = FinishReason::kStop;
  } else {
    out += stops_.flush();
  }
  text_ += out;
  return out;
}

absl::StatusOr<GenerationResult> generate(worker::Backend& backend, int seq,
                                          std::span<const int32_t> prompt,
                                          const GenerationParams& params,
                                          Detokenizer& detok,
                                          const TextCallback& on_text) {
  if (absl::Status st = worker::validate(params.sampling); !st.ok()) return st;
  for (const auto& [id, bias] : params.sampling.logit_bias) {
    if (id >= backend.n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: token id ", id,
                                                     " is out of range [0, ",
                                                     backend.n_vocab(), ")"));
    }
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: ", params.max_tokens, " is negative"));
  }
  if (absl::Status st = backend.truncate_sequence(seq, 0); !st.ok()) return st;

  GenerationResult result;
  result.timings.prompt_tokens = static_cast<int>(prompt.size());
  worker::Sampler sampler(params.sampling, backend.n_vocab());
  for (int32_t id : prompt) sampler.accept(id);
  GenerationOutput output(params, detok);
  auto emit = [&](const std::string& text) {
    if (!text.empty() && on_text) on_text(text);
  };

  // Prefill, in chunks of the backend's batch.
  const auto t0 = std::chrono::steady_clock::now();
  worker::ForwardResult out;
  if (absl::Status st = worker::prefill_in_chunks(backend, seq, prompt, &out);
      !st.ok()) {
    return st;
  }
  result.timings.prefill_s = seconds_since(t0);

  // Decode: the first token from the prefill's logits, the next from what
  // the sampler reads (the backend's pick, its top-k candidates or the row:
  // worker/head_picks.h's head_pick).
  int top_k = 0;
  const worker::Logits wanted =
      worker::head_pick(params.sampling, /*needs_row=*/false, backend.n_vocab(), &top_k);
  const auto t1 = std::chrono::steady_clock::now();
  // The token from what the step gave for `head` (the prefill: the row).
  auto next_token = [&](worker::Logits head) -> absl::StatusOr<int32_t> {
    switch (head) {
      case worker::Logits::kArgmax:
        if (out.argmax.size() == 1) return out.argmax[0];
        break;
      case worker::Logits::kTopK:
        if (out.top_ids.size() == static_cast<size_t>(top_k) &&
            out.top_logits.size() == out.top_ids.size()) {
          return sampler.sample_top(out.top_ids, out.top_logits);
        }
        break;
      default:
        if (out.logits.size() == static_cast<size_t>(backend.n_vocab())) {
          return sampler.sample(out.logits);
        }
    }
    return absl::InternalError(absl::StrCat("the backend ", std::string(backend.name()),
                                            " did not give the step's head (", out.logits.size(),
                                            " logits, ", out.argmax.size(), " picks, ",
                                            out.top_ids.size(), " candidates)"));
  };
  worker::Logits head = worker::Logits::kLast;  // the prefill's
  while (!output.done()) {
    const absl::StatusOr<int32_t> next = next_token(head);
    if (!next.ok()) return next.status();
    const int32_t token = *next;
    head = wanted;
    sampler.accept(token);
    emit(output.push(token));
    if (output.done()) break;
    worker::ForwardRequest req;
    req.seq = seq;
    req.tokens = std::span<const int32_t>(&output.ids().back(), 1);
    req.logits = wanted;
    req.top_k = top_k;
    absl::Status st = backend.forward(req, &out);
    if (absl::IsOutOfRange(st)) {  // the context is full: kLength
      emit(output.end_at_context());
      break;
    }
    if (!st.ok()) return st;
    ++result.timings.decode_steps;
  }
  result.timings.decode_s = seconds_since(t1);
  result.ids = output.ids();
  result.text = output.text();
  result.finish = output.finish_reason();
  result.timings.generated_tokens = static_cast<int>(result.ids.size());
  return result;
}

}  // namespace strata::coordinator
