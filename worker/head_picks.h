// Picks from a last stage's head rows on the host: the argmax the
// sampler's greedy path takes (worker/sampler.h), the top-k candidates its
// top-k step keeps, and the split of the head rows into the rows whose
// logits leave the backend and the rows that only need their pick
// (Logits::kArgmax) or candidates (Logits::kTopK, worker/backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/backend.h"
#include "worker/sampler.h"

namespace strata::worker {

// The first index of the largest of x, or -1 when none compares equal to
// it (every value NaN). A NaN is never the largest. Two passes: the
// maximum over 16 lanes, then the first lane equal to it; 49,152 logits
// (SmolLM2) take ~6 us on one core.
int32_t first_argmax(std::span<const float> x);

// The k largest of x (k <= x.size()) in the sampler's order
// (logit_before: a strict order for values that are not NaN): their
// indices to ids[0, k), their values to values[0, k).
void top_candidates(std::span<const float> x, int k, int32_t* ids, float* values);

// What a step's kArgmax and kTopK slices get instead of their logits rows,
// slice after slice (ForwardResult::argmax, top_ids, top_logits).
struct HeadPicks {
  std::vector<int32_t> argmax;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
  void clear() {
    argmax.clear();
    top_ids.clear();
    top_logits.clear();
  }
};

// A last stage's head rows, [rows][n_vocab] in `logits`, one per head row
// of `slices` in slice order (kLast, kArgmax and kTopK: 1, kAll: its rows,
// kNone: 0): appends each kArgmax slice's pick (first_argmax of its row)
// and each kTopK slice's top_candidates to `picks` and moves the other
// rows, in order, to the front. Returns the rows that stay.
int64_t take_picked_rows(std::span<const ForwardSlice> slices, float* logits, int64_t n_vocab,
                         HeadPicks* picks);

// The rows of logits a last stage's step gives slice s: its rows for kAll,
// one for kLast, none for the others (their picks come instead).
inline int64_t logits_rows(const ForwardSlice& s) {
  return s.logits == Logits::kAll ? s.rows : s.logits == Logits::kLast ? 1 : 0;
}

// Whether slice s gets a head row: kLast, kArgmax, kTopK (its last row).
inline bool one_head_row(Logits l) {
  return l == Logits::kLast || l == Logits::kArgmax || l == Logits::kTopK;
}

// What the backend gives a sampler of parameters `p` (worker/backend.h's
// Logits): kArgmax when the next token is the argmax of its raw logits
// (greedy, no bias or penalties), which the backend may pick where the logits are
// (the sampler's greedy path takes exactly that pick: worker/sampler.cc's
// first_argmax); kTopK with *top_k = min(top_k, n_vocab) when it samples
// (temperature > 0, no bias or penalties) from a top-k of at most kMaxTopK, whose
// candidates are all its chain reads (Sampler::sample_top); else kLast,
// the row. `needs_row` (a grammar, log-probabilities): kLast.
Logits head_pick(const SamplingParams& p, bool needs_row, int n_vocab, int* top_k);

}  // namespace strata::worker
