#include "worker/sampling_proto.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::worker {
namespace {

// A value as a message shows it: integers as integers, floats with the
// digits that tell them apart (100.0001 is not "100").
std::string shown(float v) { return absl::StrFormat("%.9g", v); }
template <typename T>
std::string shown(T v) {
  return absl::StrCat(v);
}

}  // namespace

absl::Status sampling_from_proto(const v1::SamplingParams& p, int n_vocab,
                                 absl::string_view field, SamplingParams* out) {
  auto range = [&](absl::string_view member, auto v, absl::string_view r) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", member, ": ", shown(v), " is out of range ", r));
  };
  if (!std::isfinite(p.temperature()) || p.temperature() > 100.0f) {
    return range("temperature", p.temperature(), "(-inf, 100]");
  }
  if (p.top_k() < 0 || p.top_k() > n_vocab) {
    return range("top_k", p.top_k(), absl::StrCat("[0, ", n_vocab, "]"));
  }
  const float top_p = p.has_top_p() ? p.top_p() : 1.0f;
  if (!(top_p > 0.0f && top_p <= 1.0f)) return range("top_p", top_p, "(0, 1]");
  if (!(p.min_p() >= 0.0f && p.min_p() <= 1.0f)) {
    return range("min_p", p.min_p(), "[0, 1]");
  }
  const float repeat = p.has_repeat_penalty() ? p.repeat_penalty() : 1.0f;
  if (!(repeat > 0.0f && repeat <= 100.0f)) {
    return range("repeat_penalty", repeat, "(0, 100]");
  }
  if (!(p.presence_penalty() >= -100.0f && p.presence_penalty() <= 100.0f)) {
    return range("presence_penalty", p.presence_penalty(), "[-100, 100]");
  }
  if (!(p.frequency_penalty() >= -100.0f && p.frequency_penalty() <= 100.0f)) {
    return range("frequency_penalty", p.frequency_penalty(), "[-100, 100]");
  }
  const int last_n = p.has_repeat_last_n() ? p.repeat_last_n() : 64;
  if (last_n < 0 || last_n > 4096) {
    return range("repeat_last_n", last_n, "[0, 4096]");
  }
  if (p.logit_bias_ids_size() != p.logit_bias_values_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".logit_bias_values: ", p.logit_bias_values_size(), " values for ",
        p.logit_bias_ids_size(), " logit_bias_ids"));
  }
  std::vector<LogitBias::Entry> bias_entries;
  bias_entries.reserve(static_cast<size_t>(p.logit_bias_ids_size()));
  for (int i = 0; i < p.logit_bias_ids_size(); ++i) {
    const int32_t id = p.logit_bias_ids(i);
    const float bias = p.logit_bias_values(i);
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".logit_bias: token id ", id, " is out of range [0, ", n_vocab, ")"));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".logit_bias: ", shown(bias), " for token id ", id,
          " is out of range [-100, 100]"));
    }
    bias_entries.emplace_back(id, bias);
  }
  std::sort(bias_entries.begin(), bias_entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < bias_entries.size(); ++i) {
    if (bias_entries[i].first == bias_entries[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".logit_bias: token id ", bias_entries[i].first, " appears twice"));
    }
  }
  out->logit_bias = LogitBias(std::move(bias_entries));
  out->temperature = p.temperature();
  out->top_k = p.top_k();
  out->top_p = top_p;
  out->min_p = p.min_p();
  out->repeat_penalty = repeat;
  out->presence_penalty = p.presence_penalty();
  out->frequency_penalty = p.frequency_penalty();
  out->penalty_last_n = last_n;
  out->seed = p.has_seed() ? p.seed() : 0;
  return validate(*out);
}

}  // namespace strata::worker
