#include "worker/embedding_pool.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::worker {

int embedding_rows(Logits how, int rows, int* first) {
  *first = how == Logits::kEmbedLast ? rows - 1 : 0;
  return how == Logits::kEmbedLast ? 1 : rows;
}

void pool_normed_rows(const float* normed, int rows, int64_t n_embd, Logits how, float* out) {
  if (how == Logits::kEmbedLast) {
    std::copy_n(normed + int64_t{rows - 1} * n_embd, n_embd, out);
    return;
  }
  std::vector<double> sum(static_cast<size_t>(n_embd), 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* row = normed + int64_t{r} * n_embd;
    for (int64_t c = 0; c < n_embd; ++c) sum[static_cast<size_t>(c)] += row[c];
  }
  for (int64_t c = 0; c < n_embd; ++c) out[c] = static_cast<float>(sum[static_cast<size_t>(c)]);
}

void norm_and_pool_rows(const float* x, int rows, int64_t n_embd, const float* weight, float eps,
                        Logits how, std::vector<float>* scratch, float* out) {
  scratch->resize(static_cast<size_t>(int64_t{rows} * n_embd));
  for (int r = 0; r < rows; ++r) {
    const float* in = x + int64_t{r} * n_embd;
    float* y = scratch->data() + int64_t{r} * n_embd;
    double squares = 0.0;
    for (int64_t c = 0; c < n_embd; ++c) squares += static_cast<double>(in[c]) * in[c];
    const float scale =
        1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(n_embd)) + eps);
    for (int64_t c = 0; c < n_embd; ++c) y[c] = in[c] * scale * weight[c];
  }
  pool_normed_rows(scratch->data(), rows, n_embd, how, out);
}

}  // namespace strata::worker
