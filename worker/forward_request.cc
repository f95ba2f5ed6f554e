#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/backend.h"

namespace strata::worker {

absl::StatusOr<CheckedStep> check_forward(const ForwardRequest& req, const StepShape& shape,
                                          const SequenceExtent& extent, ForwardSlice* single) {
  const int64_t e = shape.n_embd;
  const int64_t n = shape.first ? static_cast<int64_t>(req.tokens.size())
                                : static_cast<int64_t>(req.hidden.size()) / e;
  if (!shape.first && static_cast<int64_t>(req.hidden.size()) != n * e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden rows: ", req.hidden.size(), " floats, not a multiple of n_embd ", e));
  }
  if (req.slices.empty()) {
    if (absl::StatusOr<std::pair<int, int>> one = extent(req.seq); !one.ok()) {
      return one.status();
    }
  }
  if (n < 1 || n > shape.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("a step takes 1 to ", shape.max_batch, " rows, got ", n));
  }
  *single = ForwardSlice{req.seq, static_cast<int>(n), req.logits, req.top_k};
  const std::span<const ForwardSlice> slices =
      req.slices.empty() ? std::span<const ForwardSlice>(single, 1) : req.slices;
  if (static_cast<int64_t>(slices.size()) > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("slices: ", slices.size(), " slices for ", n, " rows"));
  }
  int64_t rows = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const ForwardSlice& s = slices[i];
    if (s.rows < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("slices[", i, "]: ", s.rows, " rows (at least 1)"));
    }
    absl::StatusOr<std::pair<int, int>> length_ctx = extent(s.seq);
    if (!length_ctx.ok()) return length_ctx.status();
    for (size_t j = 0; j < i; ++j) {
      if (slices[j].seq == s.seq) {
        return absl::InvalidArgumentError(absl::StrCat(
            "slices[", i, "]: sequence ", s.seq, " is in an earlier slice too"));
      }
    }
    if (s.logits == Logits::kTopK &&
        (s.top_k < 1 || s.top_k > std::min(kMaxTopK, shape.n_vocab))) {
      return absl::InvalidArgumentError(absl::StrCat("slices[", i, "]: top_k ", s.top_k,
                                                     " is outside [1, ",
                                                     std::min(kMaxTopK, shape.n_vocab), "]"));
    }
    const auto [length, n_ctx] = *length_ctx;
    if (int64_t{length} + s.rows > n_ctx) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", s.seq, ": ", length, " + ",
                                                s.rows, " positions exceed the context of ",
                                                n_ctx));
    }
    rows += s.rows;
  }
  if (rows != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("slices: ", rows, " rows in all, but the step has ", n));
  }
  if (shape.first) {
    for (int64_t t = 0; t < n; ++t) {
      if (req.tokens[t] < 0 || req.tokens[t] >= shape.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", req.tokens[t], " at row ", t,
                                                       " is outside the vocabulary of ",
                                                       shape.n_vocab));
      }
    }
  }
  return CheckedStep{n, slices};
}

}  // namespace strata::worker
