// The forward pass of the cpu backend: one function per block recipe, each
// readable against its paper, and the shared attention and feed-forward
// steps. Buffers and their shapes are declared in cpu_backend.h; n is the
// number of rows (tokens) in the step.
#include <algorithm>
#include <cstring>

#include "worker/cpu/cpu_backend.h"

namespace strata::worker {

namespace ops = reference::ops;

// Of a decode step's K and V rows each, the most asked for ahead of time
// (KvCache::prefetch): a few hundred KB fit L2 beside the weight stream.
constexpr int64_t kDecodeKvPrefetchBytes = 192 * 1024;

// Llama (Touvron et al. 2023) and the families that share its block:
// qwen2 (q/k/v biases), qwen3 (QK-norm), phi3 (fused projections), and
// the mixture-of-experts ones (Mixtral, qwen2moe, qwen3moe, olmoe), whose
// FFN is moe_step.
//   x = x + Attention(RMSNorm(x))
//   x = x + FFN(RMSNorm(x)),  FFN(h) = W_down (silu(W_gate h) * W_up h)
//                             or Σ_j w_j FFN_{e_j}(h) (moe.cc)
void CpuBackend::llama_block(int il, int n) {
  const LayerWeights& w = w_->layers[il - range_.first];
  const int64_t e = hp_.n_embd;
  float* x = x_.data();  // [n][n_embd]

  rms_norm(x, w.attn_norm, n, e, xn_.data());
  attention_step(il, n);  // proj = Attention(xn)
  residual_add(proj_.data(), n, w.ffn_norm);  // x += proj; xn = RMSNorm(x)

  if (hp_.moe.n_expert > 0) {
    moe_step(il, n);  // proj = MoE(xn) (moe.cc)
  } else {
    feed_forward_step(il, n);  // proj = FFN(xn)
  }
  residual_add(proj_.data(), n, nullptr);
}

// Gemma 2 and 3 (Gemma Team 2024, 2025): norms before and after each
// sublayer; GeGLU feed-forward; gemma3 adds QK-norm (in attention_step).
//   x = x + RMSNorm_post(Attention(RMSNorm(x)))
//   x = x + RMSNorm_post(FFN(RMSNorm(x))),  FFN(h) = W_down (gelu(W_gate h) * W_up h)
void CpuBackend::gemma_block(int il, int n) {
  const LayerWeights& w = w_->layers[il - range_.first];
  const int64_t e = hp_.n_embd;
  float* x = x_.data();      // [n][n_embd]
  float* p = proj_.data();   // [n][n_embd]

  rms_norm(x, w.attn_norm, n, e, xn_.data());
  attention_step(il, n);
  rms_norm(p, w.post_attn_norm, n, e, p);
  residual_add(p, n, w.ffn_norm);  // x += p; xn = RMSNorm(x)

  feed_forward_step(il, n);
  rms_norm(p, w.post_ffn_norm, n, e, p);
  residual_add(p, n, nullptr);
}

// proj = W_o · Attention(q, k, v) for xn, with q = W_q xn (+ b_q), etc.
// QK-norm and RoPE on q and k; k and v are appended to the cache first.
// The projections run once over every row of the step; each slice stores
// its keys and values in its own sequence's cache and attends to it alone.
void CpuBackend::attention_step(int il, int n) {
  const LayerWeights& w = w_->layers[il - range_.first];
  const arch::BlockRecipe& r = hp_.recipe;
  const int dk = hp_.head_dim_k;
  const int64_t q_width = int64_t{hp_.n_head} * dk;          // per row
  const int64_t k_width = int64_t{hp_.n_head_kv} * dk;
  const int64_t v_width = int64_t{hp_.n_head_kv} * hp_.head_dim_v;
  float* q = q_.data();  // [n][n_head][dk]
  float* k = k_.data();  // [n][n_head_kv][dk]
  float* v = v_.data();  // [n][n_head_kv][dv]

  const int layer = il - range_.first;
  // A step of one decode row (one sequence) prefetches its keys; a step
  // of several sequences reads several caches, more than L2 holds beside
  // the weight stream, and does not.
  const bool decode = n == 1;
  const int pos0 = positions_[0];
  const int window = hp_.sliding[il] ? hp_.sliding_window : 0;
  // A decode step: the keys it will attend to, ahead of time. The first
  // block of the stage asks here; each block asks for the next block's
  // rows after its own attention, so that the next block's feed-forward
  // and projections hide the misses.
  if (decode && layer == 0) prefetch_kv(il, pos0, *step_slices_[0].cache);
  if (w.wqkv.present() || w.wqk.present()) {
    // One matrix gives [q | k | v] (or [q | k], v from its own) per row;
    // split it.
    const bool with_v = w.wqkv.present();
    matmul(with_v ? w.wqkv : w.wqk, xn_.data(), n, qkv_.data());
    const int64_t width = q_width + k_width + (with_v ? v_width : 0);
    pool_.parallel_for(n, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        const float* row = qkv_.data() + t * width;
        std::copy(row, row + q_width, q + t * q_width);
        std::copy(row + q_width, row + q_width + k_width, k + t * k_width);
        if (with_v) std::copy(row + q_width + k_width, row + width, v + t * v_width);
      }
    }, std::max<int64_t>(1, 4096 / width));
    if (!with_v) matmul(w.wv, xn_.data(), n, v);
  } else {
    matmul(w.wq, xn_.data(), n, q);
    matmul(w.wk, xn_.data(), n, k);
    matmul(w.wv, xn_.data(), n, v);
  }
  if (w.bq != nullptr) ops::add_bias(q, w.bq, n, q_width);
  if (w.bk != nullptr) ops::add_bias(k, w.bk, n, k_width);
  if (w.bv != nullptr) ops::add_bias(v, w.bv, n, v_width);
  if (r.qk_norm) {
    rms_norm(q, w.q_norm, int64_t{n} * hp_.n_head, dk, q);
    rms_norm(k, w.k_norm, int64_t{n} * hp_.n_head_kv, dk, k);
  }
  if (r.qk_norm_full) {  // olmoe: over each whole row
    rms_norm(q, w.q_norm, n, q_width, q);
    rms_norm(k, w.k_norm, n, k_width, k);
  }

  kernels::RopeParams rope;
  rope.order = r.rope == arch::RopeStyle::kNeox ? kernels::RopeOrder::kNeox
                                                : kernels::RopeOrder::kNormal;
  rope.n_rot = hp_.n_rot;
  rope.freq_base = hp_.rope[il].freq_base;
  rope.freq_scale = hp_.rope[il].freq_scale;
  rope.freq_factors = w_->rope_freqs;
  rope.ext_factor = hp_.yarn_ext_factor;
  rope.attn_factor = hp_.yarn_attn_factor;
  rope.beta_fast = hp_.yarn_beta_fast;
  rope.beta_slow = hp_.yarn_beta_slow;
  rope.n_ctx_orig = hp_.n_ctx_orig;
  rotate_qk(rope, n, q, k);

  const int64_t attn_width = int64_t{hp_.n_head} * hp_.head_dim_v;
  for (const StepSlice& s : step_slices_) {
    s.cache->store(layer, s.pos0, s.rows, k + s.row0 * k_width, v + s.row0 * v_width);
  }

  kernels::AttentionParams a;
  a.n_head = hp_.n_head;
  a.n_head_kv = hp_.n_head_kv;
  a.head_dim_k = dk;
  a.head_dim_v = hp_.head_dim_v;
  a.softcap = hp_.attn_softcap;
  a.sliding_window = window;
  a.sinks = w.attn_sinks;  // gpt-oss; null otherwise
  if (r.scale_query) {
    ops::scale(q, n * q_width, hp_.attention_scale);
    a.scale = 1.0f;
  } else {
    a.scale = hp_.attention_scale;
  }
  auto attend = [&](const StepSlice& s, kernels::simd::AttentionBuffers* buffers,
                    ThreadPool& pool) {
    const float* qs = q + s.row0 * q_width;          // [rows][n_head][dk]
    const int* ps = positions_.data() + s.row0;      // [rows]
    float* out = attn_.data() + s.row0 * attn_width;  // [rows][n_head][dv]
    const kernels::KvView kv = s.cache->view(layer, s.pos0 + s.rows);
    if (buffers != nullptr) {
      kernels::simd::attention(qs, ps, s.rows, kv, a, out, *buffers, pool);
    } else {
      ops::attention(qs, ps, s.rows, kv, a, out, *attention_scratch_, pool);
    }
  };
  // Several decode rows (one-row slices): one loop over them, each slice's
  // attention on one thread (its own buffers and a pool of one), instead
  // of a loop over the threads per slice, whose dispatch costs more than a
  // decode row's attention. The same code in the same order computes each
  // slice either way (kernels/cpu/simd/attention.h: results do not depend
  // on the thread count), so a sequence's outputs do not change.
  decode_slices_.clear();
  if (simd_attention_ && pool_.size() > 1 && !serial_attention_.empty()) {
    for (const StepSlice& s : step_slices_) {
      if (s.rows == 1) decode_slices_.push_back(&s);
    }
    if (decode_slices_.size() < 2) decode_slices_.clear();
  }
  if (!decode_slices_.empty()) {
    pool_.parallel_for_dynamic(
        static_cast<int64_t>(decode_slices_.size()), [&](int64_t b, int64_t e, int thread) {
          SerialAttention& own = *serial_attention_[static_cast<size_t>(thread)];
          for (int64_t i = b; i < e; ++i) attend(*decode_slices_[i], &own.buffers, own.pool);
        });
  }
  for (const StepSlice& s : step_slices_) {
    if (decode_slices_.empty() || s.rows > 1) {
      attend(s, simd_attention_ ? simd_attention_buffers_.get() : nullptr, pool_);
    }
  }
  if (decode && il + 1 < range_.last) prefetch_kv(il + 1, pos0, *step_slices_[0].cache);
  matmul(w.wo, attn_.data(), n, proj_.data());
  if (w.bo != nullptr) ops::add_bias(proj_.data(), w.bo, n, hp_.n_embd);
}

void CpuBackend::prefetch_kv(int il, int pos, const KvCache& cache) const {
  const int window = hp_.sliding[il] ? hp_.sliding_window : 0;
  cache.prefetch(il - range_.first, window > 0 ? pos + 1 - window : 0, pos,
                 kDecodeKvPrefetchBytes);
}

// proj = W_down · (act(W_gate xn) * W_up xn).
void CpuBackend::feed_forward_step(int il, int n) {
  const LayerWeights& w = w_->layers[il - range_.first];
  const int64_t f = hp_.n_ff;
  float* gate = gate_.data();  // [n][n_ff] (fused: [n][2 n_ff])
  float* up = up_.data();      // [n][n_ff]
  const bool gelu = hp_.recipe.activation == arch::FfnActivation::kGeluTanh;
  if (hp_.recipe.fused_gate_up || w.w_gate_up.present()) {
    // One matrix (the family's, or fused at load) gives [gate | up] per
    // row.
    matmul(hp_.recipe.fused_gate_up ? w.w_up : w.w_gate_up, xn_.data(), n, gate);
    if (simd_ffn_activation_) {  // straight from the fused rows into `up`
      (gelu ? kernels::simd::geglu_rows : kernels::simd::swiglu_rows)(gate, n, f, up, pool_,
                                                                     simd_isa_);
      matmul(w.w_down, up, n, proj_.data());
      return;
    }
    // Compact the gates in place (row t's gate moves to [t f, (t+1) f),
    // inside rows already split).
    for (int t = 0; t < n; ++t) {
      const float* row = gate + t * 2 * f;
      std::copy(row + f, row + 2 * f, up + t * f);
      std::memmove(gate + t * f, row, f * sizeof(float));
    }
  } else {
    matmul(w.w_gate, xn_.data(), n, gate);
    matmul(w.w_up, xn_.data(), n, up);
  }
  if (simd_ffn_activation_) {
    (gelu ? kernels::simd::geglu : kernels::simd::swiglu)(gate, up, n * f, gate, pool_,
                                                          simd_isa_);
  } else {
    (gelu ? ops::geglu : ops::swiglu)(gate, up, n * f, gate, pool_);
  }
  matmul(w.w_down, gate, n, proj_.data());
}

void CpuBackend::rms_norm(const float* x, const float* weight, int64_t n,
                          int64_t dim, float* y) {
  if (simd_norm_rope_) {
    kernels::simd::rms_norm(x, weight, n, dim, hp_.rms_eps, y, pool_);
  } else {
    ops::rms_norm(x, weight, n, dim, hp_.rms_eps, y, pool_);
  }
}

void CpuBackend::residual_add(const float* delta, int n, const float* weight) {
  const int64_t e = hp_.n_embd;
  float* x = x_.data();
  if (simd_norm_rope_) {
    kernels::simd::add_rms_norm(x, delta, weight, n, e, hp_.rms_eps,
                                weight != nullptr ? xn_.data() : nullptr, pool_);
    return;
  }
  ops::add(x, delta, n * e, x);
  if (weight != nullptr) rms_norm(x, weight, n, e, xn_.data());
}

void CpuBackend::rotate_qk(const kernels::RopeParams& rope, int n, float* q, float* k) {
  auto same = [](const kernels::RopeParams& a, const kernels::RopeParams& b) {
    return a.order == b.order && a.n_rot == b.n_rot && a.freq_base == b.freq_base &&
           a.freq_scale == b.freq_scale && a.freq_factors == b.freq_factors &&
           a.ext_factor == b.ext_factor && a.attn_factor == b.attn_factor &&
           a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
           a.n_ctx_orig == b.n_ctx_orig;
  };
  RopeTable* table = nullptr;
  for (RopeTable& t : rope_tables_) {
    if (t.step == step_ && same(t.params, rope)) table = &t;
  }
  if (table == nullptr) {
    table = &rope_tables_[rope_table_next_];
    rope_table_next_ = (rope_table_next_ + 1) % 2;
    table->params = rope;
    table->step = step_;
    ops::rope_angles(positions_.data(), n, rope, table->cs.data(), pool_);
  }
  const int dk = hp_.head_dim_k;
  const float* cs = table->cs.data();
  if (simd_norm_rope_) {
    kernels::simd::rope_rotate(q, n, hp_.n_head, dk, rope.order, rope.n_rot, cs, pool_);
    kernels::simd::rope_rotate(k, n, hp_.n_head_kv, dk, rope.order, rope.n_rot, cs, pool_);
  } else {
    ops::rope_rotate(q, n, hp_.n_head, dk, rope.order, rope.n_rot, cs, pool_);
    ops::rope_rotate(k, n, hp_.n_head_kv, dk, rope.order, rope.n_rot, cs, pool_);
  }
}

// logits[i] = W_out · RMSNorm(x[rows[i]]) for each listed row, soft-capped
// when the family caps its final logits.
void CpuBackend::head(std::span<const int> rows) {
  const int64_t e = hp_.n_embd;
  const int n = static_cast<int>(rows.size());
  const size_t need = static_cast<size_t>(n) * w_->n_vocab;
  if (logits_.size() < need) logits_.resize(need);
  // The rows, gathered into proj_ (free after the blocks) unless they are
  // already consecutive: [n][n_embd].
  const float* x = x_.data() + int64_t{rows[0]} * e;
  if (rows.back() - rows.front() != n - 1) {
    for (int i = 0; i < n; ++i) {
      std::copy_n(x_.data() + int64_t{rows[i]} * e, e, proj_.data() + i * e);
    }
    x = proj_.data();
  }
  float* xn = xn_.data();  // [n][n_embd]
  rms_norm(x, w_->output_norm, n, e, xn);
  matmul(w_->output, xn, n, logits_.data());
  if (hp_.final_softcap > 0.0f) {
    ops::soft_cap(logits_.data(), static_cast<int64_t>(need),
                  hp_.final_softcap);
  }
}

}  // namespace strata::worker
