// Legacy quants: one f16 scale (and for the _1 types an f16 offset) per 32
// elements. The quantizers follow quantize_row_*_ref of ggml-quants.c step
// by step in f32 arithmetic; the comments name the ggml expression each
// rounding reproduces.
#include "kernels/cpu/reference/legacy_quants.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/rounding.h"

namespace strata::reference {
namespace {

constexpr int kHalf = 16;  // every legacy block packs j and j + 16 together

uint32_t load_u32(const uint8_t bytes[4]) {
  uint32_t v;
  std::memcpy(&v, bytes, sizeof(v));
  return v;
}

void store_u32(uint32_t v, uint8_t bytes[4]) { std::memcpy(bytes, &v, 4); }

// The value with the largest magnitude, keeping its sign; the first one wins
// a tie (ggml: `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }`).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

float absmax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  return amax;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = std::numeric_limits<float>::max();
  *max = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

// ggml: `d ? 1.0f/d : 0.0f`.
float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

}  // namespace

// ----------------------------------------------------------------------------
// Dequantization.

void dequantize_q4_0(const BlockQ4_0& block, float* y) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kHalf; ++j) {
    y[j] = static_cast<float>((block.qs[j] & 0x0F) - 8) * d;
    y[j + kHalf] = static_cast<float>((block.qs[j] >> 4) - 8) * d;
  }
}

void dequantize_q4_1(const BlockQ4_1& block, float* y) {
  const float d = f16_to_f32(block.d);
  const float m = f16_to_f32(block.m);
  for (int j = 0; j < kHalf; ++j) {
    y[j] = static_cast<float>(block.qs[j] & 0x0F) * d + m;
    y[j + kHalf] = static_cast<float>(block.qs[j] >> 4) * d + m;
  }
}

void dequantize_q5_0(const BlockQ5_0& block, float* y) {
  const float d = f16_to_f32(block.d);
  const uint32_t qh = load_u32(block.qh);
  for (int j = 0; j < kHalf; ++j) {
    const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int high1 = static_cast<int>((qh >> (j + kHalf)) & 1u) << 4;
    y[j] = static_cast<float>(((block.qs[j] & 0x0F) | high0) - 16) * d;
    y[j + kHalf] = static_cast<float>(((block.qs[j] >> 4) | high1) - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1& block, float* y) {
  const float d = f16_to_f32(block.d);
  const float m = f16_to_f32(block.m);
  const uint32_t qh = load_u32(block.qh);
  for (int j = 0; j < kHalf; ++j) {
    const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int high1 = static_cast<int>((qh >> (j + kHalf)) & 1u) << 4;
    y[j] = static_cast<float>((block.qs[j] & 0x0F) | high0) * d + m;
    y[j + kHalf] = static_cast<float>((block.qs[j] >> 4) | high1) * d + m;
  }
}

void dequantize_q8_0(const BlockQ8_0& block, float* y) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(block.qs[j]) * d;
}

void dequantize_q8_1(const BlockQ8_1& block, float* y) {
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(block.qs[j]) * d;
}

void dequantize_mxfp4(const BlockMxfp4& block, float* y) {
  const float d = e8m0_to_f32_half(block.e);
  for (int j = 0; j < kHalf; ++j) {
    y[j] = static_cast<float>(kMxfp4Values[block.qs[j] & 0x0F]) * d;
    y[j + kHalf] = static_cast<float>(kMxfp4Values[block.qs[j] >> 4]) * d;
  }
}

// ----------------------------------------------------------------------------
// Quantization.

void quantize_q4_0(const float* x, BlockQ4_0* block) {
  // The largest-magnitude value maps to -8 exactly (the widest code).
  const float d = signed_absmax(x, kQK4_0) / -8.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  for (int j = 0; j < kHalf; ++j) {
    // ggml: MIN(15, (int8_t)(x*id + 8.5f)).
    const int q0 = trunc_clamp(x[j] * id + 8.5f, 0, 15);
    const int q1 = trunc_clamp(x[j + kHalf] * id + 8.5f, 0, 15);
    block->qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* block) {
  float min, max;
  min_max(x, kQK4_1, &min, &max);
  const float d = (max - min) / 15.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  block->m = f32_to_f16(min);
  for (int j = 0; j < kHalf; ++j) {
    // ggml: MIN(15, (int8_t)((x - min)*id + 0.5f)).
    const int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 15);
    const int q1 = trunc_clamp((x[j + kHalf] - min) * id + 0.5f, 0, 15);
    block->qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* block) {
  const float d = signed_absmax(x, kQK5_0) / -16.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    // ggml: MIN(31, (int8_t)(x*id + 16.5f)).
    const int q0 = trunc_clamp(x[j] * id + 16.5f, 0, 31);
    const int q1 = trunc_clamp(x[j + kHalf] * id + 16.5f, 0, 31);
    block->qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 & 0x0F) << 4);
    qh |= static_cast<uint32_t>(q0 >> 4) << j;
    qh |= static_cast<uint32_t>(q1 >> 4) << (j + kHalf);
  }
  store_u32(qh, block->qh);
}

void quantize_q5_1(const float* x, BlockQ5_1* block) {
  float min, max;
  min_max(x, kQK5_1, &min, &max);
  const float d = (max - min) / 31.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  block->m = f32_to_f16(min);
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    // ggml: (uint8_t)((x - min)*id + 0.5f), at most 31 for finite input.
    const int q0 = trunc_clamp((x[j] - min) * id + 0.5f, 0, 31);
    const int q1 = trunc_clamp((x[j + kHalf] - min) * id + 0.5f, 0, 31);
    block->qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 & 0x0F) << 4);
    qh |= static_cast<uint32_t>(q0 >> 4) << j;
    qh |= static_cast<uint32_t>(q1 >> 4) << (j + kHalf);
  }
  store_u32(qh, block->qh);
}

void quantize_q8_0(const float* x, BlockQ8_0* block) {
  const float d = absmax(x, kQK8_0) / 127.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  for (int j = 0; j < kQK8_0; ++j) {
    block->qs[j] = static_cast<int8_t>(round_away_clamp(x[j] * id, -127, 127));
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* block) {
  const float d = absmax(x, kQK8_1) / 127.0f;
  const float id = inverse_or_zero(d);
  block->d = f32_to_f16(d);
  int sum = 0;
  for (int j = 0; j < kQK8_1; ++j) {
    block->qs[j] = static_cast<int8_t>(round_away_clamp(x[j] * id, -127, 127));
    sum += block->qs[j];
  }
  // ggml: GGML_FP32_TO_FP16(sum*d), with the f32 d before f16 rounding.
  block->s = f32_to_f16(static_cast<float>(sum) * d);
}

void quantize_mxfp4(const float* x, BlockMxfp4* block) {
  // Shared exponent: floor(log2(amax)) - 2, so that amax / 2^e lands in
  // [4, 8), the top binade of E2M1 (max 6); larger values clip to +-6.
  // ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127), or 0 when amax == 0.
  // Below amax = 2^-125 ggml's cast would be undefined; we clamp to 0.
  const float amax = absmax(x, kQKMxfp4);
  uint8_t e = 0;
  if (amax > 0.0f) {
    const float biased = std::floor(std::log2(amax)) - 2.0f + 127.0f;
    e = static_cast<uint8_t>(trunc_clamp(biased, 0, 255));
  }
  block->e = e;
  const float d = e8m0_to_f32_half(e);
  // Nearest table entry; the first of equals wins (ggml: best_index_mxfp4).
  auto nearest = [d](float v) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - v);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  };
  for (int j = 0; j < kHalf; ++j) {
    block->qs[j] =
        static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + kHalf]) << 4);
  }
}

}  // namespace strata::reference
