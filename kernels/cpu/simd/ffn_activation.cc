#include "kernels/cpu/simd/ffn_activation.h"

#include <algorithm>

#include <immintrin.h>

#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "kernels/cpu/simd/vec_math.h"

namespace strata::kernels::simd {
namespace {

constexpr int64_t kGrain = 4096;

// GELU of every f16 value, rounded to f16, as f32.
const float* gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = reference::f16_to_f32(static_cast<uint16_t>(h));
      t[h] = reference::f16_to_f32(reference::f32_to_f16(reference::ops::gelu_tanh(x)));
    }
    return t;
  }();
  return table.data();
}

STRATA_AVX2 void swiglu_range(const float* gate, const float* up, float* out, int64_t begin,
                              int64_t end) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_xor_ps(g, sign));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < end; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + reference::ops::exp_ggml(-g)) * up[i];
  }
}

STRATA_AVX2 void geglu_range(const float* gate, const float* up, float* out, int64_t begin,
                             int64_t end, const float* table) {
  const __m256 lo = _mm256_set1_ps(-10.0f);
  const __m256 hi = _mm256_set1_ps(10.0f);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    __m256 gelu = _mm256_i32gather_ps(table, h, 4);
    gelu = _mm256_blendv_ps(gelu, g, _mm256_cmp_ps(g, hi, _CMP_GE_OQ));
    gelu = _mm256_blendv_ps(gelu, _mm256_setzero_ps(), _mm256_cmp_ps(g, lo, _CMP_LE_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(up + i)));
  }
  for (; i < end; ++i) {
    const float g = gate[i];
    const float gelu = g <= -10.0f ? 0.0f
                       : g >= 10.0f ? g
                                    : table[reference::f32_to_f16(g)];
    out[i] = gelu * up[i];
  }
}

}  // namespace

bool ffn_activation_supported() { return cpu_features().avx2; }

void swiglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool) {
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end, int) { swiglu_range(gate, up, out, begin, end); },
      kGrain);
}

void geglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool) {
  const float* table = gelu_f16_table();
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end, int) { geglu_range(gate, up, out, begin, end, table); },
      kGrain);
}

void swiglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                 ThreadPool& pool) {
  pool.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          const float* row = gate_up + t * 2 * f;
          swiglu_range(row, row + f, out + t * f, 0, f);
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, f)));
}

void geglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                ThreadPool& pool) {
  const float* table = gelu_f16_table();
  pool.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          const float* row = gate_up + t * 2 * f;
          geglu_range(row, row + f, out + t * f, 0, f, table);
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, f)));
}

}  // namespace strata::kernels::simd
