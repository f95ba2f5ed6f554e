// K-quant quantization: the scale search lives in k_quants_fit.cc; this file
// only packs its integers into each format's bits (the inverse of the
// layouts in block_layouts.h), plus Q8_K, which copies ggml's reference.
#include <cmath>
#include <cstring>

#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/reference/k_quants.h"
#include "kernels/cpu/reference/k_quants_fit.h"
#include "kernels/cpu/reference/rounding.h"

namespace strata::reference {
namespace {

constexpr AffineKQuantShape kShapeQ2_K = {16, 16, 3, 15};
constexpr SymmetricKQuantShape kShapeQ3_K = {16, 16, -4, 3, 31};
constexpr AffineKQuantShape kShapeQ4_K = {8, 32, 15, 63};
constexpr AffineKQuantShape kShapeQ5_K = {8, 32, 31, 63};
constexpr SymmetricKQuantShape kShapeQ6_K = {16, 16, -32, 31, 127};

// Packs eight 6-bit scales and mins (inverse of get_scale_min_k4).
void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    out[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
    out[j + 8] =
        static_cast<uint8_t>((sc[j + 4] & 0x0F) | (m[j + 4] & 0x0F) << 4);
  }
}

// Packs Q4_K / Q5_K low nibbles: sub-blocks 2c and 2c+1 share qs[32c..).
void pack_nibbles_k4(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 0x0F) |
                                            (q[64 * c + 32 + l] & 0x0F) << 4);
    }
  }
}

// Packs 2-bit fields of Q2_K / Q3_K: element e at (qs[32h + l] >> 2g).
void pack_crumbs(const uint8_t* low2, uint8_t* qs) {
  std::memset(qs, 0, kSuperBlock / 4);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    qs[32 * h + l] =
        static_cast<uint8_t>(qs[32 * h + l] | (low2[e] & 3) << (2 * g));
  }
}

}  // namespace

void quantize_q2_K(const float* x, BlockQ2_K* block) {
  AffineKQuant fit;
  fit_affine_k_quant(x, kShapeQ2_K, &fit);
  block->d = fit.d;
  block->dmin = fit.dmin;
  for (int j = 0; j < 16; ++j) {
    block->scales[j] = static_cast<uint8_t>(fit.sc[j] | fit.m[j] << 4);
  }
  pack_crumbs(fit.q, block->qs);
}

void quantize_q3_K(const float* x, BlockQ3_K* block) {
  SymmetricKQuant fit;
  fit_symmetric_k_quant(x, kShapeQ3_K, &fit);
  block->d = fit.d;
  std::memset(block->scales, 0, sizeof(block->scales));
  for (int i = 0; i < 16; ++i) {
    const int biased = fit.sc[i] + 32;  // 1..63
    const int low = biased & 0x0F;
    if (i < 8) {
      block->scales[i] = static_cast<uint8_t>(block->scales[i] | low);
    } else {
      block->scales[i - 8] =
          static_cast<uint8_t>(block->scales[i - 8] | low << 4);
    }
    const int high = biased >> 4;
    block->scales[8 + i % 4] =
        static_cast<uint8_t>(block->scales[8 + i % 4] | high << (2 * (i / 4)));
  }
  // q in [-4, 3] is stored as u = q + 4: low 2 bits in qs, bit 2 in hmask.
  uint8_t low2[kSuperBlock];
  std::memset(block->hmask, 0, sizeof(block->hmask));
  for (int e = 0; e < kSuperBlock; ++e) {
    const int u = fit.q[e] + 4;
    low2[e] = static_cast<uint8_t>(u & 3);
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    block->hmask[l] =
        static_cast<uint8_t>(block->hmask[l] | (u >> 2) << (4 * h + g));
  }
  pack_crumbs(low2, block->qs);
}

void quantize_q4_K(const float* x, BlockQ4_K* block) {
  AffineKQuant fit;
  fit_affine_k_quant(x, kShapeQ4_K, &fit);
  block->d = fit.d;
  block->dmin = fit.dmin;
  pack_scale_min_k4(fit.sc, fit.m, block->scales);
  pack_nibbles_k4(fit.q, block->qs);
}

void quantize_q5_K(const float* x, BlockQ5_K* block) {
  AffineKQuant fit;
  fit_affine_k_quant(x, kShapeQ5_K, &fit);
  block->d = fit.d;
  block->dmin = fit.dmin;
  pack_scale_min_k4(fit.sc, fit.m, block->scales);
  pack_nibbles_k4(fit.q, block->qs);
  std::memset(block->qh, 0, sizeof(block->qh));
  for (int e = 0; e < kSuperBlock; ++e) {
    block->qh[e % 32] =
        static_cast<uint8_t>(block->qh[e % 32] | (fit.q[e] >> 4) << (e / 32));
  }
}

void quantize_q6_K(const float* x, BlockQ6_K* block) {
  SymmetricKQuant fit;
  fit_symmetric_k_quant(x, kShapeQ6_K, &fit);
  block->d = fit.d;
  for (int j = 0; j < 16; ++j) block->scales[j] = fit.sc[j];
  std::memset(block->ql, 0, sizeof(block->ql));
  std::memset(block->qh, 0, sizeof(block->qh));
  for (int e = 0; e < kSuperBlock; ++e) {
    const int u = fit.q[e] + 32;  // 0..63
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    uint8_t& low_byte = block->ql[64 * h + 32 * (g & 1) + l];
    low_byte = static_cast<uint8_t>(low_byte | (u & 0x0F) << (g < 2 ? 0 : 4));
    uint8_t& high_byte = block->qh[32 * h + l];
    high_byte = static_cast<uint8_t>(high_byte | (u >> 4) << (2 * g));
  }
}

void quantize_q8_K(const float* x, BlockQ8_K* block) {
  // As quantize_row_q8_K_ref: the largest-magnitude value maps to -127.
  float amax = 0.0f;
  float max = 0.0f;
  for (int e = 0; e < kSuperBlock; ++e) {
    if (std::fabs(x[e]) > amax) {
      amax = std::fabs(x[e]);
      max = x[e];
    }
  }
  std::memset(block, 0, sizeof(*block));
  if (amax == 0.0f) return;  // ggml: d = 0, qs = 0 (we also zero bsums)
  const float iscale = -127.0f / max;
  for (int e = 0; e < kSuperBlock; ++e) {
    // ggml: MIN(127, nearest_int(iscale*x)).
    block->qs[e] =
        static_cast<int8_t>(round_even_clamp(iscale * x[e], -128, 127));
  }
  for (int j = 0; j < kSuperBlock / 16; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += block->qs[16 * j + l];
    block->bsums[j] = static_cast<int16_t>(sum);
  }
  // iscale is 0 only for an infinite max (a meaningless block anyway).
  block->d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
}

}  // namespace strata::reference
