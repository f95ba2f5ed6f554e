// Byte layouts of the ggml quantized blocks, one struct per type.
//
// Every block is a little-endian byte image with no padding; the structs
// mirror them field by field (sizes and offsets are asserted below). F16
// fields are held as raw binary16 bits (uint16_t); convert them with
// fp16.h. The reference code copies a block out of the row with memcpy, so a
// row needs no alignment.
//
// Notation in the comments: a block holds elements x[0..n); `d`, `dmin`, `m`
// are f16 unless said otherwise; "nibble lo/hi" is bits 0..3 / 4..7 of a
// byte; q is the stored integer. Where a super-block (QK_K = 256 elements)
// has sub-blocks, sub-block j covers x[j*len, (j+1)*len).
//
// Sources (llama.cpp): the structs in ggml/src/ggml-common.h; the formulas
// are those of dequantize_row_* in ggml/src/ggml-quants.c.
// Thread-safety: types and constants only.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace strata::reference {

static_assert(std::endian::native == std::endian::little,
              "the block images are little-endian; add byte swaps first");

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQKMxfp4 = 32;
inline constexpr int kSuperBlock = 256;  // QK_K (model/ggml_type.h: kQK_K)
inline constexpr int kKScaleBytes = 12;  // K_SCALE_SIZE

// ---------------------------------------------------------------------------
// Legacy quants: 32 elements per block, one scale (and a min) per block.

// Q4_0 (18 bytes, 4.5 bits/weight). [0,2) d | [2,18) qs.
// x[j] = d * ((qs[j] & 0xF) - 8), x[j+16] = d * ((qs[j] >> 4) - 8), j < 16.
// Source: block_q4_0 in ggml-common.h; dequantize_row_q4_0 in ggml-quants.c.
struct BlockQ4_0 {
  uint16_t d;              // f16 scale
  uint8_t qs[kQK4_0 / 2];  // element j in the lo nibble, j+16 in the hi
};

// Q4_1 (20 bytes, 5 bits/weight). [0,2) d | [2,4) m | [4,20) qs.
// x[j] = d * (qs[j] & 0xF) + m, x[j+16] = d * (qs[j] >> 4) + m.
// Source: block_q4_1 in ggml-common.h; dequantize_row_q4_1 in ggml-quants.c.
struct BlockQ4_1 {
  uint16_t d;  // f16 scale
  uint16_t m;  // f16 offset (the block minimum)
  uint8_t qs[kQK4_1 / 2];
};

// Q5_0 (22 bytes, 5.5 bits/weight). [0,2) d | [2,6) qh | [6,22) qs.
// qh is a little-endian u32 of fifth bits: bit j belongs to x[j], j < 32.
// x[j] = d * (((qs[j] & 0xF) | bit_j(qh) << 4) - 16),
// x[j+16] = d * (((qs[j] >> 4) | bit_{j+16}(qh) << 4) - 16), j < 16.
// Source: block_q5_0 in ggml-common.h; dequantize_row_q5_0 in ggml-quants.c.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};

// Q5_1 (24 bytes, 6 bits/weight). [0,2) d | [2,4) m | [4,8) qh | [8,24) qs.
// Bits as Q5_0, unsigned: x[j] = d * q[j] + m with q in [0, 31].
// Source: block_q5_1 in ggml-common.h; dequantize_row_q5_1 in ggml-quants.c.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};

// Q8_0 (34 bytes, 8.5 bits/weight). [0,2) d | [2,34) qs (int8).
// x[j] = d * qs[j].
// Source: block_q8_0 in ggml-common.h; dequantize_row_q8_0 in ggml-quants.c.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};

// Q8_1 (36 bytes, 9 bits/weight). [0,2) d | [2,4) s | [4,36) qs (int8).
// x[j] = d * qs[j]; s = f16(d * sum(qs)) is a cached sum for dot products.
// ggml uses Q8_1 only for activations (no GGUF file stores it).
// Source: block_q8_1 in ggml-common.h; quantize_row_q8_1_ref in
// ggml-quants.c (ggml has no Q8_1 dequantizer).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};

// MXFP4 (17 bytes, 4.25 bits/weight; OCP MX with E2M1 elements).
// [0,1) e (E8M0) | [1,17) qs. Element j in the lo nibble of qs[j], j+16 in
// the hi nibble. x[j] = kMxfp4Values[q] * e8m0_to_f32_half(e), where the
// table holds E2M1 values doubled. Source of the table: kvalues_mxfp4 in
// ggml/src/ggml-common.h.
// Source: block_mxfp4 in ggml-common.h; dequantize_row_mxfp4 in ggml-quants.c.
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQKMxfp4 / 2];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ---------------------------------------------------------------------------
// K-quants: 256-element super-blocks of 16 or 8 sub-blocks, each with its own
// small integer scale, times a super-block f16 scale.

// Q2_K (84 bytes, 2.625 bits/weight). [0,16) scales | [16,80) qs |
// [80,82) d | [82,84) dmin. 16 sub-blocks of 16: scales[j] lo nibble = sc,
// hi nibble = m (both 4-bit unsigned). 2-bit q: for element e, h = e / 128,
// g = (e % 128) / 32, l = e % 32: q = (qs[32h + l] >> 2g) & 3.
// x[e] = d * sc[e/16] * q - dmin * m[e/16].
// Source: block_q2_K in ggml-common.h; dequantize_row_q2_K in ggml-quants.c.
struct BlockQ2_K {
  uint8_t scales[kSuperBlock / 16];
  uint8_t qs[kSuperBlock / 4];
  uint16_t d;
  uint16_t dmin;
};

// Q3_K (110 bytes, 3.4375 bits/weight). [0,32) hmask | [32,96) qs |
// [96,108) scales | [108,110) d. 16 sub-blocks of 16 with 6-bit scales
// stored biased by 32: scale i's low 4 bits are scales[i] & 0xF for i < 8 and
// scales[i-8] >> 4 for i >= 8; its high 2 bits are
// (scales[8 + i%4] >> 2*(i/4)) & 3. With h, g, l as in Q2_K:
// low = (qs[32h + l] >> 2g) & 3, high bit = (hmask[l] >> (4h + g)) & 1,
// q = low - (high ? 0 : 4) in [-4, 3]; x[e] = d * (scale[e/16] - 32) * q.
// Source: block_q3_K in ggml-common.h; dequantize_row_q3_K in ggml-quants.c.
struct BlockQ3_K {
  uint8_t hmask[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;
};

// Q4_K (144 bytes, 4.5 bits/weight). [0,2) d | [2,4) dmin | [4,16) scales |
// [16,144) qs. 8 sub-blocks of 32, each with a 6-bit scale sc and 6-bit min
// m packed in `scales` (get_scale_min_k4): for j < 4, sc = scales[j] & 63,
// m = scales[j+4] & 63; for j >= 4, sc = (scales[j+4] & 0xF) |
// (scales[j-4] >> 6) << 4, m = (scales[j+4] >> 4) | (scales[j] >> 6) << 4.
// Element e: c = e / 64, q = nibble of qs[32c + e%32], lo for even
// sub-blocks (e/32), hi for odd ones. x[e] = d * sc * q - dmin * m.
// Source: block_q4_K in ggml-common.h; dequantize_row_q4_K in ggml-quants.c.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kSuperBlock / 2];
};

// Q5_K (176 bytes, 5.5 bits/weight). [0,2) d | [2,4) dmin | [4,16) scales |
// [16,48) qh | [48,176) qs. As Q4_K plus a fifth bit: bit (e/32) of
// qh[e % 32]; q in [0, 31]; x[e] = d * sc * q - dmin * m.
// Source: block_q5_K in ggml-common.h; dequantize_row_q5_K in ggml-quants.c.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 2];
};

// Q6_K (210 bytes, 6.5625 bits/weight). [0,128) ql | [128,192) qh |
// [192,208) scales (int8) | [208,210) d. 16 sub-blocks of 16. Element e:
// h = e / 128, g = (e % 128) / 32, l = e % 32; low 4 bits = nibble of
// ql[64h + 32(g & 1) + l] (lo for g < 2, hi for g >= 2); high 2 bits =
// (qh[32h + l] >> 2g) & 3; q = low | high << 4, minus 32, in [-32, 31].
// x[e] = d * scales[e/16] * q.
// Source: block_q6_K in ggml-common.h; dequantize_row_q6_K in ggml-quants.c.
struct BlockQ6_K {
  uint8_t ql[kSuperBlock / 2];
  uint8_t qh[kSuperBlock / 4];
  int8_t scales[kSuperBlock / 16];
  uint16_t d;
};

// Q8_K (292 bytes, 9.125 bits/weight). [0,4) d (f32!) | [4,260) qs (int8) |
// [260,292) bsums (int16). x[e] = d * qs[e]; bsums[j] = sum of
// qs[16j .. 16j+16) for dot products. ggml uses it for activations only.
// Source: block_q8_K in ggml-common.h; dequantize_row_q8_K in ggml-quants.c.
struct BlockQ8_K {
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];
};

// ---------------------------------------------------------------------------
// The images have no padding: total sizes and field offsets as ggml-common.h.
// (model/ggml_type.h's table is not constexpr; tests/kernels checks these
// sizes against ggml_type_info() as well.)
#define STRATA_CHECK_BLOCK(T, bytes) \
  static_assert(sizeof(T) == (bytes) && std::is_trivially_copyable_v<T>, #T)
STRATA_CHECK_BLOCK(BlockQ4_0, 18);
STRATA_CHECK_BLOCK(BlockQ4_1, 20);
STRATA_CHECK_BLOCK(BlockQ5_0, 22);
STRATA_CHECK_BLOCK(BlockQ5_1, 24);
STRATA_CHECK_BLOCK(BlockQ8_0, 34);
STRATA_CHECK_BLOCK(BlockQ8_1, 36);
STRATA_CHECK_BLOCK(BlockMxfp4, 17);
STRATA_CHECK_BLOCK(BlockQ2_K, 84);
STRATA_CHECK_BLOCK(BlockQ3_K, 110);
STRATA_CHECK_BLOCK(BlockQ4_K, 144);
STRATA_CHECK_BLOCK(BlockQ5_K, 176);
STRATA_CHECK_BLOCK(BlockQ6_K, 210);
STRATA_CHECK_BLOCK(BlockQ8_K, 292);
#undef STRATA_CHECK_BLOCK

static_assert(offsetof(BlockQ5_0, qs) == 6 && offsetof(BlockQ5_1, qs) == 8);
static_assert(offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ3_K, d) == 108);
static_assert(offsetof(BlockQ4_K, qs) == 16 && offsetof(BlockQ5_K, qs) == 48);
static_assert(offsetof(BlockQ6_K, d) == 208);
static_assert(offsetof(BlockQ8_K, bsums) == 260);

}  // namespace strata::reference
