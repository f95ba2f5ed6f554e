// The AVX2 + FMA generators of matmul tiles (Xbyak): one function computes
// y[c][r] = sum_k W[r][k] x[c][k] for a tile of weight rows (packed,
// packed_weights.h) by `cols` activation rows (activations.h), with every
// loop count, stride and encoding baked in at generation time.
//
// Two generators:
//   quantized weights (interleaved 8- or 16-row groups): make_interleaved_tile,
//     below, integer dot products against int8 activations, in two
//     flavours: vpmaddubsw (AVX2: 16 registers; AVX-512, TileConf::wide:
//     32) and AVX-512 VNNI (TileConf::vnni: vpdpbusd, 32 registers), all on
//     256-bit vectors;
//   float weights (F32, F16, BF16 rows): make_avx2_tile, one 8-lane f32
//     accumulator per (row, col), FMA over the row in steps of 8 (F16
//     widened with vcvtph2ps, BF16 shifted into f32), a horizontal sum
//     gives y.
// Integer products are exact, so results differ from the reference only by
// f32 summation order.
//
// Registers: accumulators from ymm0 up; constants and temporaries from
// ymm15 down; rows * cols <= max_tile(conf) (checked by
// JitMatmul::set_params). General registers: only caller-saved ones
// (System V).
//
// Thread-safety: a generated function is pure; any thread may call it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/jit/packed_weights.h"

namespace strata::kernels::jit {

// The shape of one generated tile function (strides in elements of their
// plane: bytes for values and q; floats for the f32 planes).
struct TileConf {
  Encoding encoding = Encoding::kU4;
  bool paired_scales = false;  // two scales per unit (Q6_K)
  bool correction = false;
  bool min_correction = false;  // interleaved: the correction is a min plane
  bool interleaved = false;     // row groups (PackedLayout::row_group > 1)
  int group = 8;                // interleaved: rows per group, 8 (ymm) or 16
                                // (zmm; the VNNI tier)
  bool scale_f16 = false;       // interleaved scales and mins are f16
  bool k_scales = false;  // interleaved K-quant sub-scales (packed_weights.h)
  bool signed_scales = false;  // k_scales are i8 (Q6_K), else u8
  bool wide = false;           // interleaved: AVX-512 (EVEX, 32 registers)
  bool vnni = false;           // interleaved: the AVX-512 VNNI flavour (wide)
  int rows = 1;                // weight rows of the tile
  int cols = 1;                // activation rows of the tile
  int unroll = 1;              // units per loop iteration
  int prefetch = 0;            // bytes ahead in the value plane; 0: none
  int64_t n_units = 0;
  int64_t unit_bytes = 0;       // bytes of one row's unit
  int64_t value_stride = 0;     // bytes between rows (float tiles)
  int64_t act_stride = 0;       // q: bytes (n_in); f: floats (n_in_pad)
  int64_t act_d_stride = 0;     // floats (PackedLayout::act_d_stride)
  int64_t act_corr_stride = 0;  // floats (corr_len)
  int64_t y_stride = 0;         // floats (n_out)
  // vnni, full row groups: run the groups two at a time, each activation
  // broadcast feeding both groups' vpdpbusd (an odd last group runs alone).
  // The second group's planes lie one group's stride (bytes) past the
  // first's: value_stride above, and these.
  bool pair = false;
  int64_t hbit_group_bytes = 0;
  int64_t scale_group_bytes = 0;
  int64_t mins_group_bytes = 0;

  auto key() const {
    return std::make_tuple(
        static_cast<int>(encoding), paired_scales, correction, min_correction,
        interleaved, group, scale_f16, k_scales, signed_scales, wide, vnni,
        rows, cols, unroll, prefetch, n_units, unit_bytes, value_stride,
        act_stride, act_d_stride, act_corr_stride, y_stride, pair,
        hbit_group_bytes, scale_group_bytes, mins_group_bytes);
  }
};

// Pointers to the tile's first row (interleaved: its row group's planes)
// and first activation row.
struct TileArgs {
  const uint8_t* values;
  const uint8_t* hbits;
  const uint8_t* scales;  // the group's scale plane
  const uint8_t* wcorr;   // the group's min plane (min correction)
  const void* act;        // int8 q, or f32 values for float encodings
  const float* act_d;
  const float* act_corr;
  float* y;
  // Interleaved tiles: how many consecutive row groups to run, each
  // against the same activations, with y advancing G floats per group (the
  // planes are contiguous from group to group). 1 for a partial group and
  // for float tiles, which ignore it.
  int64_t groups;
};

using TileFn = void (*)(const TileArgs*);

// The most rows * cols the register file holds for `conf`'s encoding
// (interleaved: 8 * max_interleaved_cols; more with conf.wide, which has
// 32 vector registers).
int max_tile(const TileConf& conf);

// A generated tile function; owns its code.
class Tile {
 public:
  virtual ~Tile() = default;
  virtual TileFn fn() const = 0;
  virtual size_t code_bytes() const = 0;
};

// Generates the AVX2 float-weight tile for `conf` (F32, F16, BF16).
// Asserts rows * cols <= max_tile.
std::unique_ptr<Tile> make_avx2_tile(const TileConf& conf);

// Interleaved tiles (conf.interleaved; interleaved_generator.cc): one
// row group of G = TileConf::group rows (8; 16 on zmm, the VNNI tier;
// rows = G, or the n_out % G rows of the last group) by `cols`
// activation rows. The weight arguments point at the group's planes; the
// min correction is applied unit by unit (TileArgs::wcorr: the group's min
// plane). Per unit, for each 32-byte chunk
// vector j and activation row c: vpbroadcastd of activation bytes
// 4j..4j+3, vpmaddubsw against the chunk (kS8: |w| against sign(a, w)),
// int16 sums of as many products as cannot overflow (kU4: the whole unit,
// 8 x 2 x 15 x 127 < 2^15; kU5: four; kU6, kU8: two; kS8: one), vpmaddwd to
// int32, a zero point's z sum q_a (an int32 from the activations) taken
// off with vpsubd, vcvtdq2ps
// and one FMA by (8 rows' scales) x d_a into the column's accumulator, whose
// lanes are the 8 rows: no horizontal sums, one store per column (masked
// for a partial group). The tile then goes on to the next row group while
// TileArgs::groups lasts, so a thread's whole range of groups is one call.
//
// conf.vnni (AVX-512 VNNI + VL, the kAvx512Vnni tier): the same layout
// and scheme, with each chunk vector's products for one activation row a
// single vpdpbusd (unsigned weights x signed activations, summed in int32:
// no int16 stage, so no overflow bound) whose activation operand is an
// embedded 4-byte broadcast from memory {1to8}. It needs unsigned weights,
// so Q8_0 packs as w + 128 (kU8, zero point 128) for this tier
// (packed_layout), and 128 * sum q_a is taken off the int32 sums as every
// zero point is, so its results equal the signed kernel's bit for bit; kS8
// tiles are never vnni. The column registers (f32
// accumulator, int32 sum) live in ymm16-31 and what the fixed ones leave
// of ymm0-15, so a tile holds up to 13 columns (14 for kU8); partial groups
// store through an opmask.
//
// conf.wide without vnni (the kAvx512 tier: AVX-512 F/BW/VL/DQ): the
// vpmaddubsw scheme above with the column registers in ymm16-31 and the
// rest of ymm0-15 (EVEX encodings), so a tile holds up to 13 columns (9
// for kU5 and kU8, which keep an int16 and an int32 sum per column)
// instead of 3-5, and the scale and correction broadcasts are embedded.
int max_interleaved_cols(const TileConf& conf);

// conf.pair (vnni, rows == group, no prefetch): two groups per pass, so
// each activation broadcast (a load; a zmm instruction with a memory
// operand issues about once a cycle on Ice Lake, where register-only
// vpdpbusd issues twice) feeds two vpdpbusd instead of one. Each column
// keeps an f32 accumulator and an int32 sum per group, so a paired tile
// holds up to max_paired_cols columns (6). The arithmetic of each (row,
// column) is the unpaired tile's, so results are equal bit for bit.
int max_paired_cols(const TileConf& conf);
std::unique_ptr<Tile> make_interleaved_tile(const TileConf& conf);

}  // namespace strata::kernels::jit
