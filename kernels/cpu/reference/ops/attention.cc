#include "kernels/cpu/reference/ops/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/elementwise.h"

namespace strata::reference::ops {

using kernels::AttentionParams;
using kernels::KvView;

namespace {

// f16 -> f32 for every bit pattern (256 KiB, built once on first use).
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      t[h] = f16_to_f32(static_cast<uint16_t>(h));
    }
    return t;
  }();
  return table.data();
}

// Row `j`, head `g` of a cache as f32.
void load_row(const KvView& kv, const void* base, int64_t j, int g,
              int n_head_kv, int dim, float* dst) {
  const int64_t offset = (j * n_head_kv + g) * dim;
  if (kv.type == GgmlType::kF32) {
    const float* src = static_cast<const float*>(base) + offset;
    std::copy(src, src + dim, dst);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
    const float* table = f16_table();
    for (int d = 0; d < dim; ++d) dst[d] = table[src[d]];
  }
}

float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// Softmax of the scores of keys [first, first + n) in place, summed as
// ggml_vec_soft_max_f32 sums a row that starts at key 0 (masked keys are
// zeros in it): lanes of 8 aligned to key 0, added pairwise in f32, the
// lane sums in double. `sink`: a logit that joins the maximum and the
// denominator (attention sinks); -inf: none (it then changes nothing).
void softmax_keys(float* x, int64_t n, int64_t first, float sink) {
  float max = sink;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  for (int64_t i = 0; i < n; ++i) x[i] = exp_ggml(x[i] - max);
  double sum = 0.0;
  for (int64_t chunk = first / 8 * 8; chunk < first + n; chunk += 8) {
    float v[8];
    for (int l = 0; l < 8; ++l) {
      const int64_t i = chunk + l - first;
      v[l] = i >= 0 && i < n ? x[i] : 0.0f;
    }
    const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6],
                a3 = v[3] + v[7];
    sum += static_cast<double>((a0 + a2) + (a1 + a3));
  }
  if (sink != -std::numeric_limits<float>::infinity()) {
    sum += static_cast<double>(std::exp(sink - max));  // expf, as ggml
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace

AttentionScratch::AttentionScratch(int64_t max_kv, const AttentionParams& s,
                                   int n_threads)
    : max_kv_(max_kv) {
  const int64_t group = s.n_head / std::max(1, s.n_head_kv);
  // scores [group][max_kv] | q [group][head_dim_k] | k row | v row
  per_thread_ = group * max_kv + group * s.head_dim_k + s.head_dim_k +
                s.head_dim_v;
  buffer_.resize(static_cast<size_t>(per_thread_) * std::max(1, n_threads));
}

void attention(const float* q, const int32_t* positions, int64_t n_tokens,
               const KvView& kv, const AttentionParams& p, float* out,
               AttentionScratch& scratch, ThreadPool& pool) {
  assert(kv.n_kv <= scratch.max_kv_);
  assert(p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0);
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = kv.type == GgmlType::kF16;
  const int64_t n_items = n_tokens * p.n_head_kv;

  pool.parallel_for(n_items, [&](int64_t begin, int64_t end, int thread) {
    float* buf = scratch.buffer_.data() + thread * scratch.per_thread_;
    float* scores = buf;                                   // [group][n_kv]
    float* qr = scores + group * scratch.max_kv_;          // [group][dk]
    float* krow = qr + group * p.head_dim_k;               // [dk]
    float* vrow = krow + p.head_dim_k;                     // [dv]
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / p.n_head_kv;
      const int g = static_cast<int>(item % p.n_head_kv);
      const int64_t pos = positions[t];
      assert(pos < kv.n_kv);
      const int64_t j_end = pos + 1;  // causal: keys 0..pos
      const int64_t j_begin =
          p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1)
                               : 0;
      const int64_t n = j_end - j_begin;

      // Query heads of this group, as the cache's type represents them.
      for (int hh = 0; hh < group; ++hh) {
        const float* qh = q + (t * p.n_head + g * group + hh) * p.head_dim_k;
        float* dst = qr + hh * p.head_dim_k;
        for (int d = 0; d < p.head_dim_k; ++d) {
          dst[d] = f16 ? round_f16(qh[d]) : qh[d];
        }
      }
      // Scores.
      for (int64_t j = j_begin; j < j_end; ++j) {
        load_row(kv, kv.k, j, g, p.n_head_kv, p.head_dim_k, krow);
        for (int hh = 0; hh < group; ++hh) {
          const float* qh = qr + hh * p.head_dim_k;
          float s = 0.0f;
          for (int d = 0; d < p.head_dim_k; ++d) s += qh[d] * krow[d];
          if (p.softcap > 0.0f) s = std::tanh(s * (1.0f / p.softcap)) * p.softcap;
          scores[hh * scratch.max_kv_ + (j - j_begin)] = s * p.scale;
        }
      }
      // Probabilities, then the weighted sum of values.
      for (int hh = 0; hh < group; ++hh) {
        float* sh = scores + hh * scratch.max_kv_;
        const int h = g * group + hh;
        softmax_keys(sh, n, j_begin,
                     p.sinks != nullptr ? p.sinks[h]
                                        : -std::numeric_limits<float>::infinity());
        if (f16) {
          for (int64_t j = 0; j < n; ++j) sh[j] = round_f16(sh[j]);
        }
        float* oh = out + (t * p.n_head + g * group + hh) * p.head_dim_v;
        std::fill(oh, oh + p.head_dim_v, 0.0f);
      }
      for (int64_t j = j_begin; j < j_end; ++j) {
        load_row(kv, kv.v, j, g, p.n_head_kv, p.head_dim_v, vrow);
        for (int hh = 0; hh < group; ++hh) {
          const float w = scores[hh * scratch.max_kv_ + (j - j_begin)];
          float* oh = out + (t * p.n_head + g * group + hh) * p.head_dim_v;
          for (int d = 0; d < p.head_dim_v; ++d) oh[d] += w * vrow[d];
        }
      }
    }
  });
}

}  // namespace strata::reference::ops
