// The sampler's parameters from the wire: inference.proto's SamplingParams
// (which worker.proto's slices carry too) checked against the bounds that
// proto documents, then mapped to worker::SamplingParams. The coordinator
// checks a client's request with it and a stage checks each slice with it,
// so both accept and refuse the same values with the same message.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "strata/v1/inference.pb.h"
#include "worker/sampler.h"

namespace strata::worker {

// Bounds (inference.proto): temperature finite and <= 100; top_k in
// [0, n_vocab]; top_p in (0, 1] (absent: 1); min_p in [0, 1];
// repeat_penalty in (0, 100] (absent: 1); presence and frequency penalties
// in [-100, 100]; repeat_last_n in [0, 4096] (absent: 64); logit_bias_ids
// distinct and in [0, n_vocab), as many logit_bias_values, each in
// [-100, 100] (to *out sorted by id). `seed` is
// copied when present (else 0); the caller decides what an absent seed
// means. On success fills *out; otherwise InvalidArgument
// "<field>.<member>: <value> is out of range <range>" (`field` is the
// message's path, say "sampling" or "slices[2].sampling"; integers print
// as integers; logit_bias: "<field>.logit_bias: <bias> for token id <id>
// is out of range [-100, 100]", "... token id <id> is out of range [0,
// n_vocab)" or "... appears twice") and leaves *out unspecified.
absl::Status sampling_from_proto(const v1::SamplingParams& p, int n_vocab,
                                 absl::string_view field, SamplingParams* out);

}  // namespace strata::worker
