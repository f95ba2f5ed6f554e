#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/head_picks.h"

namespace strata::worker {

absl::Status validate(const SamplingParams& p) {
  auto bad = [](const char* field, auto v, const char* range) {  // ints as ints
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", v, " is out of range ", range));
  };
  if (!std::isfinite(p.temperature)) return bad("temperature", p.temperature, "(finite)");
  if (p.top_k < 0) return bad("top_k", p.top_k, "[0, inf)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "(0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "[0, 1]");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
    return bad("repeat_penalty", p.repeat_penalty, "(0, inf)");
  }
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", p.presence_penalty, "(finite)");
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", p.frequency_penalty, "(finite)");
  if (p.penalty_last_n < 0 || p.penalty_last_n > (1 << 20)) {
    return bad("penalty_last_n", p.penalty_last_n, "[0, 1048576]");
  }
  const std::span<const LogitBias::Entry> bias_entries = p.logit_bias.entries();
  for (size_t i = 0; i < bias_entries.size(); ++i) {
    const auto [id, bias] = bias_entries[i];
    if (id < 0 || (i > 0 && id <= bias_entries[i - 1].first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: token id ", id, " is negative or not after the one before"));
    }
    if (!std::isfinite(bias)) return bad("logit_bias", bias, "(finite)");
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params, int n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      rng_(params.seed),
      candidates_(n_vocab),
      counts_(n_vocab, 0),
      history_(static_cast<size_t>(params.penalty_last_n)) {
  if (params.logit_bias.empty()) return;
  bias_.assign(static_cast<size_t>(n_vocab), 0.0f);
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && id < n_vocab) bias_[static_cast<size_t>(id)] = bias;
  }
}

void Sampler::reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  history_next_ = 0;
  history_size_ = 0;
  rng_.seed(params_.seed);
}

void Sampler::replay_draw() {
  if (params_.temperature > 0.0f) rng_.discard(1);
}

void Sampler::accept(int32_t token) {
  if (history_.empty() || token < 0 || token >= n_vocab_) return;
  if (history_size_ == history_.size()) {
    --counts_[history_[history_next_]];  // the oldest leaves the window
  } else {
    ++history_size_;
  }
  history_[history_next_] = token;
  ++counts_[token];
  history_next_ = (history_next_ + 1) % history_.size();
}


int32_t Sampler::sample(std::span<const float> logits,
                        std::span<const uint64_t> allowed) {
  const SamplingParams& p = params_;
  const bool masked = !allowed.empty();
  auto out = [&](size_t i) {
    return masked && !((allowed[i >> 6] >> (i & 63)) & 1);
  };
  const bool penalize = history_size_ > 0 &&
                        (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f ||
                         p.frequency_penalty != 0.0f);
  const bool biased = !bias_.empty();
  // Steps 0 and 1 for token i: its bias, then its penalties.
  auto adjusted = [&](size_t i) {
    float l = logits[i];
    if (biased) l += bias_[i];
    if (penalize && counts_[i] > 0) {
      l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
      l -= static_cast<float>(counts_[i]) * p.frequency_penalty + p.presence_penalty;
    }
    return l;
  };
  size_t n = static_cast<size_t>(n_vocab_);
  if (p.temperature <= 0.0f && !masked && !penalize && !biased) {
    // Greedy on the raw logits: the first id of the highest.
    const int32_t best = first_argmax(logits.first(n));
    if (best >= 0) return best;  // else every logit is NaN: the loop below
  }
  if (p.temperature <= 0.0f) {
    // Greedy: the first id of the highest (biased, penalised) logit, in
    // one pass over the logits (no candidate list: a decode step of many
    // sequences samples each of them, 49,152 logits apiece for SmolLM2).
    int32_t best = -1;
    float best_logit = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      if (out(i)) continue;
      const float l = adjusted(i);
      if (best < 0 || l > best_logit) {
        best = static_cast<int32_t>(i);
        best_logit = l;
      }
    }
    return best;
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out(i)) continue;
    candidates_[kept++] = {static_cast<int32_t>(i), adjusted(i), 0.0f};
  }
  n = kept;
  if (n == 0) return -1;
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return logit_before(a.logit, a.id, b.logit, b.id);
  };

  // Top-k: keep the k highest, sorted.
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + p.top_k,
                      candidates_.begin() + n, by_logit);
    n = static_cast<size_t>(p.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.begin() + n, by_logit);
  }
  return draw(n);
}

int32_t Sampler::sample_top(std::span<const int32_t> ids, std::span<const float> logits) {
  const size_t n = std::min({ids.size(), logits.size(), static_cast<size_t>(n_vocab_)});
  if (n == 0) return -1;
  if (params_.temperature <= 0.0f) return ids[0];  // greedy: the first of the largest
  for (size_t i = 0; i < n; ++i) candidates_[i] = {ids[i], logits[i], 0.0f};
  return draw(n);
}

// The chain after top-k over candidates_[0, n), sorted (largest logit
// first, equal ones by lower id): top-p, min-p, temperature, a draw.
int32_t Sampler::draw(size_t n) {
  const SamplingParams& p = params_;
  // Probabilities of what is left (softmax of the untempered logits).
  auto normalize = [&](float temperature) {
    const float max = candidates_[0].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      candidates_[i].p = std::exp((candidates_[i].logit - max) / temperature);
      sum += candidates_[i].p;
    }
    for (size_t i = 0; i < n; ++i) {
      candidates_[i].p = static_cast<float>(candidates_[i].p / sum);
    }
  };
  normalize(1.0f);
  // Top-p: the shortest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += candidates_[i].p;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  // Min-p: tokens at least min_p times as likely as the best.
  if (p.min_p > 0.0f) {
    const float floor = candidates_[0].p * p.min_p;
    size_t keep = 1;
    while (keep < n && candidates_[keep].p >= floor) ++keep;
    n = keep;
  }
  // Temperature, then a draw.
  normalize(p.temperature);
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += candidates_[i].p;
    if (u < cum) return candidates_[i].id;
  }
  return candidates_[n - 1].id;
}

}  // namespace strata::worker
