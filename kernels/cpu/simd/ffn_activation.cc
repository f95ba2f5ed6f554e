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

// The same on 16 lanes (the avx512 tiers): exp16 and the IEEE division are
// exp8's and _mm256_div_ps's per lane, so the values are the 8-lane
// ones bit for bit; the last < 16 values go through the 8-lane code.
STRATA_AVX512 void swiglu_range_wide(const float* gate, const float* up, float* out,
                                     int64_t begin, int64_t end) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  swiglu_range(gate, up, out, i, end);
}

STRATA_AVX512 void geglu_range_wide(const float* gate, const float* up, float* out,
                                    int64_t begin, int64_t end, const float* table) {
  const __m512 lo = _mm512_set1_ps(-10.0f);
  const __m512 hi = _mm512_set1_ps(10.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512i h = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    __m512 gelu = _mm512_i32gather_ps(h, table, 4);
    gelu = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, hi, _CMP_GE_OQ), gelu, g);
    gelu = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, lo, _CMP_LE_OQ), gelu,
                                _mm512_setzero_ps());
    _mm512_storeu_ps(out + i, _mm512_mul_ps(gelu, _mm512_loadu_ps(up + i)));
  }
  geglu_range(gate, up, out, i, end, table);
}

// 16 lanes when the tier has 512-bit vectors and this CPU has them
// (cpu_has reads CPUID once per process: asked per call, as an earlier
// version of kernels/cpu/isa.cc did, it took 18 % of a SmolLM2 decode's
// samples and 40 % of its rate in a VM, where CPUID traps).
bool use_wide(IsaTier tier) { return tier != IsaTier::kAvx2 && cpu_has(tier); }

void swiglu_any(const float* gate, const float* up, float* out, int64_t begin, int64_t end,
                bool wide) {
  (wide ? swiglu_range_wide : swiglu_range)(gate, up, out, begin, end);
}

void geglu_any(const float* gate, const float* up, float* out, int64_t begin, int64_t end,
               const float* table, bool wide) {
  (wide ? geglu_range_wide : geglu_range)(gate, up, out, begin, end, table);
}

}  // namespace

bool ffn_activation_supported() { return cpu_features().avx2; }

void swiglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool,
            IsaTier tier) {
  const bool wide = use_wide(tier);
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end, int) { swiglu_any(gate, up, out, begin, end, wide); },
      kGrain);
}

void geglu(const float* gate, const float* up, int64_t n, float* out, ThreadPool& pool,
           IsaTier tier) {
  const float* table = gelu_f16_table();
  const bool wide = use_wide(tier);
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end, int) {
        geglu_any(gate, up, out, begin, end, table, wide);
      },
      kGrain);
}

void swiglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                 ThreadPool& pool, IsaTier tier) {
  const bool wide = use_wide(tier);
  pool.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          const float* row = gate_up + t * 2 * f;
          swiglu_any(row, row + f, out + t * f, 0, f, wide);
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, f)));
}

void geglu_rows(const float* gate_up, int64_t n_rows, int64_t f, float* out,
                ThreadPool& pool, IsaTier tier) {
  const float* table = gelu_f16_table();
  const bool wide = use_wide(tier);
  pool.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          const float* row = gate_up + t * 2 * f;
          geglu_any(row, row + f, out + t * f, 0, f, table, wide);
        }
      },
      std::max<int64_t>(1, kGrain / std::max<int64_t>(1, f)));
}

}  // namespace strata::kernels::simd
