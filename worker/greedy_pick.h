// Greedy picks from logits: the argmax the sampler's greedy path takes
// (worker/sampler.h), and the split of a last stage's head rows into the
// rows whose logits leave the backend and the rows that only need their
// pick (Logits::kArgmax, worker/backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/backend.h"

namespace strata::worker {

// The first index of the largest of x, or -1 when none compares equal to
// it (every value NaN). A NaN is never the largest. Two passes: the
// maximum over 16 lanes, then the first lane equal to it; 49,152 logits
// (SmolLM2) take ~6 us on one core.
int32_t first_argmax(std::span<const float> x);

// A last stage's head rows, [rows][n_vocab] in `logits`, one per head row
// of `slices` in slice order (kLast and kArgmax: 1, kAll: its rows, kNone:
// 0): appends each kArgmax slice's pick (first_argmax of its row) to
// `picks` and moves the other rows, in order, to the front. Returns the
// rows that stay.
int64_t take_greedy_rows(std::span<const ForwardSlice> slices, float* logits, int64_t n_vocab,
                         std::vector<int32_t>* picks);

}  // namespace strata::worker
