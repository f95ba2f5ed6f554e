#include "kernels/cpu/reference/ops/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/reference/ops/elementwise.h"

namespace strata::reference::ops {
namespace {

// Softmax of one row in place as ggml_soft_max computes it in the CPU
// backend that llama.cpp's oracle runs here (built for AVX-512:
// ggml_vec_soft_max_f32's 16-lane loop, ggml_v_expf on each lane and the
// lanes added as _mm512_reduce_add_ps does, then expf one by one for the
// last n mod 16, every partial sum added in double), then times the f32
// value of 1 / sum. A router of 8 experts takes only the expf path.
void routing_softmax(float* x, int n) {
  float max = -INFINITY;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    float v[16];
    for (int l = 0; l < 16; ++l) v[l] = x[i + l] = exp_ggml(x[i + l] - max);
    float t3[8], t6[4];
    for (int l = 0; l < 8; ++l) t3[l] = v[8 + l] + v[l];
    for (int l = 0; l < 4; ++l) t6[l] = t3[4 + l] + t3[l];
    sum += static_cast<double>((t6[2] + t6[0]) + (t6[3] + t6[1]));
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);  // expf
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < n; ++j) x[j] *= inv;
}

}  // namespace

void moe_route(const float* logits, int64_t n_tokens, const MoeRouting& r,
               int32_t* experts, float* weights, float* scratch) {
  const int n = r.n_expert;
  const int k = r.n_expert_used;
  float* probs = scratch;  // [n_expert]
  int32_t order[512];      // expert ids sorted by probability (n <= 512)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* lt = logits + t * n;
    int32_t* et = experts + t * k;
    float* wt = weights + t * k;
    std::memcpy(probs, lt, sizeof(float) * static_cast<size_t>(n));
    if (r.gating == MoeGating::kSoftmax) {
      routing_softmax(probs, n);
    } else if (r.gating == MoeGating::kSigmoid) {
      for (int i = 0; i < n; ++i) probs[i] = 1.0f / (1.0f + std::exp(-probs[i]));
    }
    // Top-k, largest first; a tie keeps the lower index first (ggml's
    // std::sort leaves ties unspecified; a tie of two f32 probabilities
    // does not happen on real logits).
    std::iota(order, order + n, 0);
    std::stable_sort(order, order + n,
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    for (int j = 0; j < k; ++j) {
      et[j] = order[j];
      wt[j] = probs[order[j]];
    }
    if (r.gating == MoeGating::kSoftmaxWeight) routing_softmax(wt, k);
    if (r.norm_weights) {
      double sum = 0.0;  // ggml_sum_rows: ggml_vec_sum_f32 adds in double
      for (int j = 0; j < k; ++j) sum += wt[j];
      // Clamped to the smallest normal f16, as llama.cpp does.
      const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
      for (int j = 0; j < k; ++j) wt[j] /= s;
    }
    if (r.weights_scale != 0.0f && r.weights_scale != 1.0f) {
      for (int j = 0; j < k; ++j) wt[j] *= r.weights_scale;
    }
  }
}

}  // namespace strata::reference::ops
