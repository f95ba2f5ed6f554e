#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/backend.h"

namespace strata::worker {

absl::Status prefill_in_chunks(Backend& backend, int seq,
                               std::span<const int32_t> prompt,
                               ForwardResult* result) {
  // A prompt longer than the context is refused before its first chunk
  // runs, not after (nothing is changed).
  absl::StatusOr<int> length = backend.sequence_length(seq);
  if (!length.ok()) return length.status();
  absl::StatusOr<int> n_ctx = backend.sequence_context(seq);
  if (!n_ctx.ok()) return n_ctx.status();
  if (static_cast<int64_t>(*length) + static_cast<int64_t>(prompt.size()) > *n_ctx) {
    return absl::OutOfRangeError(absl::StrCat(
        "sequence ", seq, ": a prompt of ", prompt.size(), " tokens after ", *length,
        " positions exceeds the context of ", *n_ctx));
  }
  const size_t batch = static_cast<size_t>(backend.max_batch());
  for (size_t i = 0; i < prompt.size(); i += batch) {
    const size_t n = std::min(batch, prompt.size() - i);
    ForwardRequest req;
    req.seq = seq;
    req.tokens = prompt.subspan(i, n);
    req.logits = i + n == prompt.size() ? Logits::kLast : Logits::kNone;
    if (absl::Status st = backend.forward(req, result); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace strata::worker
