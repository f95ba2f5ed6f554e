// K-quant dequantization, element by element from the formulas documented in
// block_layouts.h. Each product is formed in the order ggml-quants.c forms it
// ((d * sc) * q - (dmin * m)), so results equal ggml's bit for bit.
#include <cstdint>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/k_quants.h"

namespace strata::reference {
namespace {

// Sub-block j's 6-bit scale and min of Q4_K / Q5_K (get_scale_min_k4).
void scale_min_k4(const uint8_t* scales, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Sub-block i's 6-bit biased scale of Q3_K (0..63; the value is this - 32).
int scale_q3_K(const uint8_t* scales, int i) {
  const int low = i < 8 ? (scales[i] & 0x0F) : (scales[i - 8] >> 4);
  const int high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | high << 4;
}

}  // namespace

void dequantize_q2_K(const BlockQ2_K& block, float* y) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int q = (block.qs[32 * h + l] >> (2 * g)) & 3;
    const uint8_t packed = block.scales[e / 16];
    const float step = d * static_cast<float>(packed & 0x0F);
    const float offset = dmin * static_cast<float>(packed >> 4);
    y[e] = step * static_cast<float>(q) - offset;
  }
}

void dequantize_q3_K(const BlockQ3_K& block, float* y) {
  const float d = f16_to_f32(block.d);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int low = (block.qs[32 * h + l] >> (2 * g)) & 3;
    const int high = (block.hmask[l] >> (4 * h + g)) & 1;
    const int q = low - (high != 0 ? 0 : 4);
    const float step =
        d * static_cast<float>(scale_q3_K(block.scales, e / 16) - 32);
    y[e] = step * static_cast<float>(q);
  }
}

void dequantize_q4_K(const BlockQ4_K& block, float* y) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int j = e / 32;  // sub-block
    int sc, m;
    scale_min_k4(block.scales, j, &sc, &m);
    const uint8_t byte = block.qs[32 * (e / 64) + e % 32];
    const int q = (j % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    const float step = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(m);
    y[e] = step * static_cast<float>(q) - offset;
  }
}

void dequantize_q5_K(const BlockQ5_K& block, float* y) {
  const float d = f16_to_f32(block.d);
  const float dmin = f16_to_f32(block.dmin);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int j = e / 32;
    int sc, m;
    scale_min_k4(block.scales, j, &sc, &m);
    const uint8_t byte = block.qs[32 * (e / 64) + e % 32];
    const int low = (j % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    const int high = (block.qh[e % 32] >> j) & 1;
    const float step = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(m);
    y[e] = step * static_cast<float>(low | high << 4) - offset;
  }
}

void dequantize_q6_K(const BlockQ6_K& block, float* y) {
  const float d = f16_to_f32(block.d);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t low_byte = block.ql[64 * h + 32 * (g & 1) + l];
    const int low = g < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
    const int high = (block.qh[32 * h + l] >> (2 * g)) & 3;
    const int q = (low | high << 4) - 32;
    const float step = d * static_cast<float>(block.scales[e / 16]);
    y[e] = step * static_cast<float>(q);
  }
}

void dequantize_q8_K(const BlockQ8_K& block, float* y) {
  for (int e = 0; e < kSuperBlock; ++e) {
    y[e] = block.d * static_cast<float>(block.qs[e]);
  }
}

}  // namespace strata::reference
