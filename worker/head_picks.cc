#include "worker/head_picks.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace strata::worker {

int32_t first_argmax(std::span<const float> x) {
  const size_t n = x.size();
  const float* p = x.data();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float best = kNegInf;
  size_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {  // maxps(a, m) keeps m when a is NaN
    m0 = _mm_max_ps(_mm_loadu_ps(p + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(p + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(p + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(p + i + 12), m3);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (float v : lanes) best = std::max(best, v);
#endif
  for (; i < n; ++i) best = p[i] > best ? p[i] : best;
  size_t j = 0;
#if defined(__SSE2__)
  const __m128 b = _mm_set1_ps(best);
  for (; j + 4 <= n; j += 4) {
    const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(p + j), b));
    if (hit != 0) return static_cast<int32_t>(j + static_cast<size_t>(__builtin_ctz(hit)));
  }
#endif
  for (; j < n; ++j) {
    if (p[j] == best) return static_cast<int32_t>(j);
  }
  return -1;
}


void top_candidates(std::span<const float> x, int k, int32_t* ids, float* values) {
  thread_local std::vector<int32_t> order;
  order.resize(x.size());
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) { return logit_before(x[a], a, x[b], b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  for (int i = 0; i < k; ++i) {
    ids[i] = order[static_cast<size_t>(i)];
    values[i] = x[static_cast<size_t>(ids[i])];
  }
}

int64_t take_picked_rows(std::span<const ForwardSlice> slices, float* logits, int64_t n_vocab,
                         HeadPicks* picks) {
  int64_t in = 0, kept = 0;
  const size_t row_bytes = static_cast<size_t>(n_vocab) * sizeof(float);
  for (const ForwardSlice& s : slices) {
    const int64_t rows = s.logits == Logits::kAll ? s.rows : one_head_row(s.logits) ? 1 : 0;
    for (int64_t r = 0; r < rows; ++r, ++in) {
      float* row = logits + in * n_vocab;
      const std::span<const float> values(row, static_cast<size_t>(n_vocab));
      if (s.logits == Logits::kArgmax) {
        picks->argmax.push_back(first_argmax(values));
        continue;
      }
      if (s.logits == Logits::kTopK) {
        const size_t at = picks->top_ids.size();
        picks->top_ids.resize(at + static_cast<size_t>(s.top_k));
        picks->top_logits.resize(at + static_cast<size_t>(s.top_k));
        top_candidates(values, s.top_k, picks->top_ids.data() + at, picks->top_logits.data() + at);
        continue;
      }
      if (kept != in) std::memmove(logits + kept * n_vocab, row, row_bytes);
      ++kept;
    }
  }
  return kept;
}

Logits head_pick(const SamplingParams& p, bool needs_row, int n_vocab, int* top_k) {
  *top_k = 0;
  if (needs_row) return Logits::kLast;
  if (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
      !p.logit_bias.empty()) {
    return Logits::kLast;
  }
  if (p.temperature <= 0.0f) return Logits::kArgmax;
  const int k = std::min(p.top_k, n_vocab);
  if (k < 1 || k > kMaxTopK) return Logits::kLast;
  *top_k = k;
  return Logits::kTopK;
}

}  // namespace strata::worker
