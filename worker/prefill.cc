#include <algorithm>

#include "worker/backend.h"

namespace strata::worker {

absl::Status prefill_in_chunks(Backend& backend, int seq,
                               std::span<const int32_t> prompt,
                               ForwardResult* result) {
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
