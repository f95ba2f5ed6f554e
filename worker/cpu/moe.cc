// The mixture-of-experts feed-forward of the cpu backend (arch::MoeParams):
// router, routing (kernels/cpu/reference/ops/moe_routing.h), grouped expert
// matmuls, the weighted sum, and qwen2moe's shared expert.
//
// Grouping: the rows of a step routed to expert e are gathered and go
// through e's gate|up and down matrices as one matmul of m rows, so a
// prefill step (or a step of several sequences) reads each used expert's
// weights once, not once per row. A row's outputs do not depend on which
// other rows share its matmul (every generated tile computes an output
// with the same operations in the same order, kernels/cpu/jit), so a
// sequence's results do not change with what shares its step.
//
// The weighted sum follows llama.cpp's build_moe_ffn: each expert's output
// times its weight (one f32 product), added slot after slot, the most
// probable expert first; then qwen2moe adds the shared expert's output
// times sigmoid(ffn_gate_inp_shexp · x), the sigmoid computed as ggml does,
// silu(g) / g.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/reference/ops/moe_routing.h"
#include "kernels/cpu/reference/ops/swiglu_oai.h"
#include "worker/cpu/cpu_backend.h"

namespace strata::worker {

namespace ops = reference::ops;

namespace {
ops::MoeGating routing_gating(arch::ExpertGating g) {
  switch (g) {
    case arch::ExpertGating::kSoftmax: return ops::MoeGating::kSoftmax;
    case arch::ExpertGating::kSigmoid: return ops::MoeGating::kSigmoid;
    case arch::ExpertGating::kSoftmaxWeight: return ops::MoeGating::kSoftmaxWeight;
  }
  return ops::MoeGating::kSoftmax;
}
}  // namespace

// y = W_down act(W_gate x + b_gate, W_up x + b_up) + b_down for n rows of
// x [n][n_embd] into y [n][n_embd]; f is the FFN width. gate_up: the fused
// [gate | up] matrix when present, else gate and up. Uses gate_ and up_.
// The biases are added as llama.cpp's ggml_add_id adds them, after each
// matmul; gpt-oss's activation is ops::swiglu_oai (expf, as ggml).
void CpuBackend::swiglu_ffn(const Linear& gate_up, const Linear& gate_w, const Linear& up_w,
                            const Linear& down, int64_t f, const float* x, int n, float* y,
                            const FfnBias& bias) {
  float* gate = gate_.data();  // [n][f] (fused: [n][2 f])
  float* up = up_.data();      // [n][f]
  const bool oai = hp_.recipe.activation == arch::FfnActivation::kSwigluOai;
  const bool plain =
      !oai && bias.gate == nullptr && bias.up == nullptr && bias.down == nullptr;
  if (gate_up.present()) {
    matmul(gate_up, x, n, gate);
    if (simd_ffn_activation_ && plain) {
      kernels::simd::swiglu_rows(gate, n, f, up, pool_, simd_isa_);
      matmul(down, up, n, y);
      return;
    }
    for (int t = 0; t < n; ++t) {
      const float* row = gate + t * 2 * f;
      std::copy(row + f, row + 2 * f, up + t * f);
      std::memmove(gate + t * f, row, f * sizeof(float));
    }
  } else {
    matmul(gate_w, x, n, gate);
    matmul(up_w, x, n, up);
  }
  if (bias.gate != nullptr) ops::add_bias(gate, bias.gate, n, f);
  if (bias.up != nullptr) ops::add_bias(up, bias.up, n, f);
  if (oai) {
    ops::swiglu_oai(gate, up, n * f, ops::kGptOssAlpha, ops::kGptOssLimit, gate, pool_);
  } else if (simd_ffn_activation_) {
    kernels::simd::swiglu(gate, up, n * f, gate, pool_, simd_isa_);
  } else {
    ops::swiglu(gate, up, n * f, gate, pool_);
  }
  matmul(down, gate, n, y);
  if (bias.down != nullptr) ops::add_bias(y, bias.down, n, hp_.n_embd);
}

// The routed experts of n rows (xn [n][n_embd], their slots' experts and
// weights [n][k]) into proj [n][n_embd].
void CpuBackend::moe_experts(const ExpertWeights& x, const float* xn, int n,
                             const int32_t* route_experts, const float* route_weights,
                             float* proj) {
  const arch::MoeParams& moe = hp_.moe;
  const int64_t e = hp_.n_embd;
  const int k = moe.n_expert_used;
  const int n_expert = moe.n_expert;
  // Group the n·k slots by expert (counting sort, tokens ascending within
  // an expert): expert_slots_[expert_begin_[ex] .. expert_begin_[ex + 1]).
  std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
  const int64_t n_slots = int64_t{n} * k;
  for (int64_t s = 0; s < n_slots; ++s) ++expert_begin_[route_experts[s] + 1];
  for (int ex = 0; ex < n_expert; ++ex) expert_begin_[ex + 1] += expert_begin_[ex];
  std::copy(expert_begin_.begin(), expert_begin_.end() - 1, expert_fill_.begin());
  for (int64_t s = 0; s < n_slots; ++s) {
    expert_slots_[expert_fill_[route_experts[s]]++] = static_cast<int32_t>(s);
  }

  // Each used expert once over its rows: gather, FFN, scatter to the slots
  // (expert_out_ [n][k][n_embd]).
  float* gathered = moe_x_.data();  // [m][n_embd]
  float* out = moe_y_.data();       // [m][n_embd]
  for (int ex = 0; ex < n_expert; ++ex) {
    const int32_t begin = expert_begin_[ex];
    const int m = expert_begin_[ex + 1] - begin;
    if (m == 0) continue;
    const int32_t* slots = expert_slots_.data() + begin;
    for (int i = 0; i < m; ++i) {
      std::memcpy(gathered + i * e, xn + (slots[i] / k) * e, sizeof(float) * e);
    }
    FfnBias bias;  // gpt-oss
    if (x.gate_bias != nullptr) {
      bias.gate = x.gate_bias + int64_t{ex} * moe.n_ff_expert;
      bias.up = x.up_bias + int64_t{ex} * moe.n_ff_expert;
      bias.down = x.down_bias + int64_t{ex} * e;
    }
    swiglu_ffn(x.gate_up[ex], x.gate[ex], x.up[ex], x.down[ex], moe.n_ff_expert, gathered, m,
               out, bias);
    for (int i = 0; i < m; ++i) {
      std::memcpy(expert_out_.data() + int64_t{slots[i]} * e, out + i * e, sizeof(float) * e);
    }
  }

  // The weighted sum in slot order, as ggml adds the views of
  // ggml_mul(experts, weights).
  pool_.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* y = proj + t * e;
      const float* w = route_weights + t * k;
      const float* o = expert_out_.data() + t * k * e;
      for (int64_t c = 0; c < e; ++c) y[c] = o[c] * w[0];
      for (int j = 1; j < k; ++j) {
        const float* oj = o + j * e;
        for (int64_t c = 0; c < e; ++c) y[c] += oj[c] * w[j];
      }
    }
  }, std::max<int64_t>(1, 16384 / e));
}

// proj = Σ_j w_j · Expert_{e_j}(xn) (+ sigmoid(g · xn) · Shared(xn)).
void CpuBackend::moe_step(int il, int n) {
  const ExpertWeights& x = w_->layers[il - range_.first].experts;
  const arch::MoeParams& moe = hp_.moe;
  const int64_t e = hp_.n_embd;
  const int k = moe.n_expert_used;
  const int n_expert = moe.n_expert;
  const float* xn = xn_.data();  // [n][n_embd]
  float* proj = proj_.data();    // [n][n_embd]

  // Router and routing: experts_ and weights_ [n][k], slot 0 the most
  // probable.
  matmul(x.router, xn, n, router_logits_.data());  // [n][n_expert]
  if (x.router_bias != nullptr) ops::add_bias(router_logits_.data(), x.router_bias, n, n_expert);
  ops::MoeRouting routing;
  routing.n_expert = n_expert;
  routing.n_expert_used = k;
  routing.gating = routing_gating(moe.gating);
  routing.norm_weights = moe.norm_weights;
  routing.weights_scale = moe.weights_scale;
  ops::moe_route(router_logits_.data(), n, routing, route_experts_.data(),
                 route_weights_.data(), route_scratch_.data());

  // Rows in blocks of moe_block_rows (all n for realistic k), each block's
  // experts once over their rows.
  const int block = moe_block_rows(options_.max_batch, k, options_.moe_max_slots);
  for (int r0 = 0; r0 < n; r0 += block) {
    moe_experts(x, xn + int64_t{r0} * e, std::min(block, n - r0),
                route_experts_.data() + int64_t{r0} * k, route_weights_.data() + int64_t{r0} * k,
                proj + int64_t{r0} * e);
  }

  if (!x.shared_down.present()) return;
  // The shared expert on every row, scaled by sigmoid(g), g the
  // one-row router's logit.
  float* shared = moe_y_.data();  // [n][n_embd]
  swiglu_ffn(x.shared_gate_up, x.shared_gate, x.shared_up, x.shared_down, moe.n_ff_shared, xn, n,
             shared, FfnBias{});
  matmul(x.shared_router, xn, n, router_logits_.data());  // [n][1]
  for (int t = 0; t < n; ++t) {
    const float g = router_logits_[t];
    const float gate = g / (1.0f + std::exp(-g)) / g;  // ggml: silu(g) / g
    float* y = proj + int64_t{t} * e;
    const float* s = shared + int64_t{t} * e;
    for (int64_t c = 0; c < e; ++c) y[c] += s[c] * gate;
  }
}

}  // namespace strata::worker
