// The AVX2 + FMA generator of matmul tiles (Xbyak): one function computes
// y[c][r] = sum_k W[r][k] x[c][k] for a tile of `rows` weight rows (packed,
// packed_weights.h) by `cols` activation rows (activations.h), with every
// loop count, stride and encoding baked in at generation time.
//
// Quantized tiles work on 32-element units (kU4 / kU5: pairs of units, one
// 32-byte load unpacking into the low and high halves of two units, with
// one scale vector (s_u x4, s_u+1 x4) per pair) as ggml-cpu's AVX2 vec_dot does
// (ggml/src/ggml-cpu/arch/x86/quants.c: mul_sum_us8_pairs_float and
// bytes_from_nibbles_32 / bytes_from_bits_32): vpmaddubsw of the unsigned
// weight bytes (kS8: |w| against sign(a, w)) by the int8 activations, vpmaddwd
// with ones to int32, vcvtdq2ps, then one FMA by s_w * d_a per unit into a
// per-(row, col) f32 accumulator of 8 lanes; the correction dot is a second
// f32 loop over the planes; a horizontal sum gives y. Integer products are
// exact (|w| <= 128, |a| <= 127: a pair sum fits int16), so results differ
// from the reference only by f32 summation order.
//
// Registers: accumulators ymm0 .. ymm(rows*cols - 1); constants and
// temporaries from ymm15 down; rows * cols <= max_tile(conf) (checked by
// make_tile). General registers: only caller-saved ones (System V).
//
// Thread-safety: a generated function is pure; any thread may call it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/jit/packed_weights.h"

namespace strata::kernels::jit {

// The shape of one generated tile function (strides in elements of their
// plane: bytes for values, hbits and q; floats for the f32 planes).
struct TileConf {
  Encoding encoding = Encoding::kU4;
  bool paired_scales = false;
  bool unit_pairs = false;   // kU4 / kU5 two units at a time (PackedLayout)
  bool s8_symmetric = false; // kS8 without -128 (PackedLayout)
  bool correction = false;
  bool min_correction = false;  // interleaved: the correction is a min plane
  bool interleaved = false;  // 8-row groups (PackedLayout::row_group == 8)
  bool scale_f16 = false;    // interleaved scales and mins are f16
  bool k_scales = false;     // interleaved K-quant sub-scales (packed_weights.h)
  bool signed_scales = false;  // k_scales are i8 (Q6_K), else u8
  int rows = 1;              // weight rows of the tile
  int cols = 1;              // activation rows of the tile
  int unroll = 1;            // units (unit pairs) per loop iteration
  int prefetch = 0;          // bytes ahead in the value plane; 0: none
  int64_t n_units = 0;
  int64_t unit_bytes = 0;
  int64_t value_stride = 0;  // bytes
  int64_t hbit_stride = 0;   // bytes
  int64_t scale_stride = 0;  // floats
  int64_t wcorr_stride = 0;  // floats (scale or min plane)
  int64_t corr_len = 0;      // floats, multiple of 8
  int64_t act_stride = 0;    // q: bytes (n_in); f: floats (n_in_pad)
  int64_t act_d_stride = 0;  // floats (PackedLayout::act_d_stride)
  int64_t act_corr_stride = 0;  // floats (corr_len)
  int64_t y_stride = 0;      // floats (n_out)

  auto key() const {
    return std::make_tuple(static_cast<int>(encoding), paired_scales,
                           unit_pairs, s8_symmetric, correction, min_correction,
                           interleaved, scale_f16, k_scales, signed_scales, rows, cols, unroll, prefetch, n_units,
                           unit_bytes, value_stride, hbit_stride, scale_stride,
                           wcorr_stride, corr_len, act_stride, act_d_stride,
                           act_corr_stride, y_stride);
  }
};

// Pointers to the tile's first row / first activation row.
struct TileArgs {
  const uint8_t* values;
  const uint8_t* hbits;
  const float* scales;
  const float* wcorr;
  const void* act;  // int8 q, or f32 values for float encodings
  const float* act_d;
  const float* act_corr;
  float* y;
};

using TileFn = void (*)(const TileArgs*);

// The most rows * cols the register file holds for `conf`'s encoding
// (interleaved: 8 * max_interleaved_cols).
int max_tile(const TileConf& conf);

// A generated tile function; owns its code.
class Tile {
 public:
  virtual ~Tile() = default;
  virtual TileFn fn() const = 0;
  virtual size_t code_bytes() const = 0;
};

// Generates the AVX2 function for `conf`. Asserts rows * cols <= max_tile.
std::unique_ptr<Tile> make_avx2_tile(const TileConf& conf);

// Interleaved tiles (conf.interleaved; avx2_interleaved_generator.cc): one
// 8-row group (rows = 8, or the n_out % 8 rows of the last group) by `cols`
// activation rows. The weight arguments point at the group's planes; the
// correction is applied unit by unit (TileArgs::wcorr: the group's min
// plane; zero points reuse the scales). Per unit, for each 32-byte chunk
// vector j and activation row c: vpbroadcastd of activation bytes
// 4j..4j+3, vpmaddubsw against the chunk (kS8: |w| against sign(a, w)),
// int16 sums of as many products as cannot overflow (kU4: the whole unit,
// 8 x 2 x 15 x 127 < 2^15; kU8: two; kS8: one), vpmaddwd to int32, vcvtdq2ps
// and one FMA by (8 rows' scales) x d_a into the column's accumulator, whose
// lanes are the 8 rows: no horizontal sums, one store per column (masked
// for a partial group).
int max_interleaved_cols(const TileConf& conf);
std::unique_ptr<Tile> make_avx2_interleaved_tile(const TileConf& conf);

}  // namespace strata::kernels::jit
