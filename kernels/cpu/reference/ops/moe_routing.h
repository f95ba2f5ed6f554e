// Mixture-of-experts routing (Shazeer et al. 2017; Mixtral, Jiang et al.
// 2024): from the router's logits of each token, the experts it uses and
// the weights their outputs are summed with. A pure function over f32; the
// expert matmuls and the weighted sum are the caller's (worker/cpu/moe.cc).
//
// Per token, as llama.cpp's build_moe_ffn (src/llama-graph.cpp) computes it:
//   probs   = softmax(logits)             (kSoftmax; as ggml_soft_max in the
//                                          AVX-512 CPU backend: expf and
//                                          double sums, moe_routing.cc)
//           | sigmoid(logits)             (kSigmoid)
//           | logits                      (kSoftmaxWeight)
//   experts = the k indices of the largest probs, largest first
//             (ggml_argsort descending; equal probs: the lower index first)
//   weights = probs[experts]
//           ; softmax over the k          (kSoftmaxWeight only)
//           ; / max(Σ weights, 2^-14)     (when norm_weights; the sum in
//                                          double, as ggml_sum_rows)
//           ; * weights_scale             (when not 0 or 1)
//
// Threads: none; any thread, on its own buffers.
#pragma once

#include <cstdint>

namespace strata::reference::ops {

enum class MoeGating {
  kSoftmax,        // softmax over all experts, then top-k
  kSigmoid,        // 1 / (1 + e^-x) of each logit, then top-k
  kSoftmaxWeight,  // top-k of the logits, then softmax over the k
};

struct MoeRouting {
  int n_expert = 0;       // logits per token
  int n_expert_used = 0;  // k, in [1, n_expert]
  MoeGating gating = MoeGating::kSoftmax;
  bool norm_weights = false;    // renormalise the k weights to sum 1
  float weights_scale = 1.0f;   // 0 or 1: no scaling
};

// logits: [n_tokens][n_expert] (not changed). experts: [n_tokens][k],
// weights: [n_tokens][k], slot 0 the most probable expert. scratch: at
// least 2 * n_expert floats. n_expert <= 512.
void moe_route(const float* logits, int64_t n_tokens, const MoeRouting& routing,
               int32_t* experts, float* weights, float* scratch);

}  // namespace strata::reference::ops
