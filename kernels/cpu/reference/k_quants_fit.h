// Scale search for the K-quant quantizers (internal).
//
// A K-quant super-block (256 elements) is cut into sub-blocks of 16 or 32;
// each sub-block gets its own small integer scale (and, for the "affine"
// types Q2_K/Q4_K/Q5_K, an integer min), and the super-block stores one f16
// multiplier for the scales and one for the mins:
//
//   affine:     x ~ (D * sc_j) * q - (Dmin * m_j),  q in [0, qmax],
//                 sc_j in [0, scale_max], m_j in [0, scale_max]
//   symmetric:  x ~ (D * sc_j) * q,                 q in [qmin, qmax],
//                 sc_j in [-scale_max, scale_max]
//
// The quantizer minimises the squared error sum_e (x_e - y_e)^2 of what the
// block dequantizes to, in four steps:
//  1. per sub-block, the best real-valued scale (and min) for the q grid:
//     a sweep of candidate step sizes around range/qmax, each followed by a
//     least-squares refit of the scale (and min) to the integers it chose,
//     then alternating re-quantize / refit until the error stops falling;
//  2. D (and Dmin) from the largest sub-block scale (min), rounded up to f16;
//     each sub-block's integer scale is searched around its ideal quotient
//     (+-1), then its integer min likewise, q re-quantized for every
//     candidate;
//  3. D (and Dmin) refit by least squares to the chosen integers, rounded
//     to f16 and step 2 repeated, kept only while the error falls;
//  4. the f16 neighbours of D (and of Dmin) tried with step 2, kept if
//     better (f16 rounding can land one value off the best).
// The idea of candidate scales refit by least squares is the one published
// in ggml-quants.c (make_qkx2_quants, make_qx_quants); this code is our own.
//
// Every error is measured on the dequantized value as the reference
// dequantizer computes it, in f32, so the choice is exact for the format.
#pragma once

#include <cstdint>

namespace strata::reference {

// Shape of an affine K-quant (Q2_K: 16x16, qmax 3, scale_max 15;
// Q4_K: 8x32, qmax 15, scale_max 63; Q5_K: 8x32, qmax 31, scale_max 63).
struct AffineKQuantShape {
  int sub_blocks;  // per 256-element super-block
  int sub_len;     // elements per sub-block
  int qmax;        // q in [0, qmax]
  int scale_max;   // sc, m in [0, scale_max]
};

// Result of an affine fit: D and Dmin as f16 bits, one sc / m per sub-block
// and one q per element (unpacked; the caller packs the format's bits).
struct AffineKQuant {
  uint16_t d;
  uint16_t dmin;
  uint8_t sc[16];
  uint8_t m[16];
  uint8_t q[256];
};

// Shape of a symmetric K-quant (Q3_K: 16x16, q in [-4, 3], scale_max 31;
// Q6_K: 16x16, q in [-32, 31], scale_max 127).
struct SymmetricKQuantShape {
  int sub_blocks;
  int sub_len;
  int qmin;
  int qmax;
  int scale_max;  // sc in [-scale_max, scale_max]
};

struct SymmetricKQuant {
  uint16_t d;
  int8_t sc[16];
  int8_t q[256];
};

// x: 256 floats. Never fails; NaN/inf inputs give a defined (useless) block.
void fit_affine_k_quant(const float* x, const AffineKQuantShape& shape,
                        AffineKQuant* out);
void fit_symmetric_k_quant(const float* x, const SymmetricKQuantShape& shape,
                           SymmetricKQuant* out);

}  // namespace strata::reference
