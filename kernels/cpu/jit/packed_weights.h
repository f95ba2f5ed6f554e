// Weight matrices repacked at load into the layouts the generated matmul
// kernels read (kernels/cpu/jit/avx2_generator.h). One layout for all
// quantized types: rows in groups of G = 8 (16 on the AVX-512 VNNI tier),
// every row a sequence of
// 32-element units, each with integer values in one of four encodings and
// one (or two) scales, so a single generator serves Q4_0 ... MXFP4; the
// type-specific part is here, in plain C++, run once per matrix.
//
// A quantized row's value is
//   y = sum_k s_w(k) * d_a(k) * (sum_e q_w(k, e) * q_a(k, e) - A_z(k))
//     + sum_u P_w(u) * A(u)                                  (min correction)
// over the elements e of each scale k, with q_a the int8 activations and
// d_a their scale (activations.h); the weights' offsets are carried by
//   zero point z (Q4_0 8, Q5_0 16, Q6_K 32, MXFP4 12, Q8_0 128 on the
//     VNNI tier): A_z(k) = z sum q_a over the elements of scale k, an
//     int32 taken off the integer sum, so the sum is exactly ggml's
//     sum (q_w - z) q_a;
//   min (Q4_1, Q5_1: +m; Q4_K, Q5_K: -dmin m_j): P_w = the min plane,
//     A(u) = Q8_1's f16 sum (Q4_1, Q5_1) or d_a sum q_a (Q8_K).
//
// Values of one row's 32-element unit:
//   kU4  16 bytes: element j in the low nibble of byte j, j+16 in the high
//        nibble (ggml's Q4_0 order); unsigned 0..15.
//   kU5  kU4 plus the fifth bits (ggml's Q5_0 qh); unsigned 0..31.
//   kU6  Q6_K's 0..63 as low nibbles (16 bytes) plus 2-bit high parts.
//   kU8  32 bytes, unsigned: 0..24 (MXFP4 as table value + 12), or
//        0..255 (Q8_0 as w + 128 for the AVX-512 VNNI tier, whose
//        vpdpbusd takes unsigned weights; zero point 128).
//   kS8  32 bytes, signed (Q8_0, the other tiers).
//
// Interleaving: rows are taken G at a time (a row group; the last one
// zero-padded), and each unit's values are cut into 4-byte chunks, chunk m
// of the group's row r at byte m*4G + r*4 of the group's unit, so one
// 4G-byte load (a ymm for G = 8, a zmm for G = 16) gives four consecutive
// values of G rows (kU8, kS8) or, as low and high nibbles, values 4m..4m+3
// and 4m+16..4m+19 of G rows (kU4, kU5: the chunks of ggml's nibble bytes;
// kU6: chunks 2m and 2m+1 of the low nibbles, so that a load stays within
// one of Q6_K's 16-element halves). One vpmaddubsw (vpdpbusd) against four
// broadcast activation bytes then feeds all G rows, and their sums stay
// in the lanes of one register. Plane shapes (64-byte aligned):
//   values  [n_groups][n_units][G * unit_bytes]
//   hbits   [n_groups][n_units][4G]   kU5: byte r*4+b, bit j: the fifth bit
//           of row r's element 4j+b
//           [n_groups][n_units][2][4G] kU6: half k, byte r*4+b, bits 2i and
//           2i+1: the high 2 bits of row r's element 4(4k+i)+b
//   scales  [n_groups][n_units][n_scales / n_units][G]  f16 (scale_f16: the
//           GGUF's own f16 scales of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0) or
//           f32 (MXFP4); paired (Q6_K): two per unit, for elements 0..15
//           and 16..31
//   mins    [n_groups][n_units][G]    same element type (min correction)
// K-quants (k_scales) keep their integer sub-scales instead, as bytes: per
// super-block of 8 units, scales [8 units][n_scales / n_units][G rows]
// (Q4_K, Q5_K u8, Q6_K i8) then [G rows] f32 d; mins [8 units][G rows] u8 m
// then [G rows] f32 dmin; the kernel forms d * sc and -(dmin * m) exactly
// as the reference does. Strides are per row group (scales and mins: in
// elements, bytes for k_scales).
// The idea of interleaved rows is ggml-cpu's repacked q4_0_8x8 / q4_K_8x8
// (ggml/src/ggml-cpu/repack.cpp); this layout is our own.
//
// Float types keep their element type (F32, F16, BF16) row by row, rows
// padded with zeros to a multiple of 8 elements (copied only when
// n_in % 8 != 0; otherwise the view points into the GGUF mapping):
//   values  [n_out][n_in_pad] (value_stride bytes per row)
//
// Sources of the block layouts: kernels/cpu/reference/block_layouts.h
// (llama.cpp ggml/src/ggml-common.h); the split into integer dot products,
// scales and offsets follows ggml-cpu's x86 vec_dot_*_q8_* (arch/x86/quants.c).
// Ownership: PackedWeights owns its planes (or, for float types with
// n_in % 8 == 0, views the caller's bytes, which must outlive it).
// Immutable after packing: any thread reads.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/huge_page_arena.h"
#include "model/ggml_type.h"

namespace strata::kernels::jit {

enum class Encoding { kU4, kU5, kU6, kU8, kS8, kF32, kF16, kBF16 };
enum class Correction { kNone, kZeroPoint, kMin };
// The activation type paired with the weight type
// (reference::ops::activation_type), as the activation quantizer sees it.
enum class ActKind { kQ8_0, kQ8_1, kQ8_K, kF32, kF16, kBF16 };

const char* encoding_name(Encoding e);

// Everything about a packed matrix's layout; a function of (type, n_in).
struct PackedLayout {
  GgmlType type = GgmlType::kF32;
  Encoding encoding = Encoding::kF32;
  ActKind act = ActKind::kF32;
  Correction correction = Correction::kNone;
  int zero_point = 0;          // z (kZeroPoint)
  bool paired_scales = false;  // two scales per unit (Q6_K)
  int64_t n_in = 0;            // elements per row as in the GGUF
  int64_t n_out = 0;           // rows
  int64_t n_in_pad = 0;        // float types: n_in rounded up to 8
  int64_t unit_elems = 32;     // 32 (quantized) or 8 (float types)
  int64_t n_units = 0;         // n_in_pad / unit_elems
  int64_t unit_bytes = 0;      // one row's unit: 16 (kU4, kU5, kU6), 32 (kU8,
                               // kS8, kF32), 16 (kF16, kBF16)
  int64_t value_stride = 0;    // bytes per row group (floats: per row) of
                               // the value plane
  int64_t hbit_stride = 0;     // bytes per row group of the high-bit plane
  int64_t n_scales = 0;        // scales per row: n_units or 2 n_units
  int64_t scale_stride = 0;    // elements per row group of the scale plane
  int64_t mins_stride = 0;     // elements per row group of the min plane
  // Activations (activations.h): floats per row of the correction A(k) (a
  // multiple of 8; 0 without a correction) and of the scale plane.
  int64_t corr_len = 0;
  int64_t act_d_stride = 0;
  // Quantized types: rows per group, 8 (16 on kAvx512Vnni); float types 1.
  int row_group = 1;
  int64_t n_groups = 0;        // ceil(n_out / row_group)
  bool scale_f16 = false;      // scales and mins are f16
  bool k_scales = false;       // K-quant sub-scales (above)
};

// The layout for `type` as the kernels of `tier` read it (the same for
// every tier but kAvx512Vnni: 16-row groups, and Q8_0 as kU8 with zero
// point 128);
// Unimplemented for a type the generators do not serve (Q2_K, Q3_K, IQ*,
// ...: the caller falls back to the reference).
absl::StatusOr<PackedLayout> packed_layout(GgmlType type, int64_t n_in,
                                           int64_t n_out,
                                           IsaTier tier = IsaTier::kAvx2);

// True when packed_layout accepts `type`.
bool can_pack(GgmlType type);

// True when `type` packs into the interleaved row-group layout (every quantized
// type can_pack accepts: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q4_K, Q5_K,
// Q6_K).
bool interleaved_type(GgmlType type);

// Bytes per element of the scale and min planes (1 for k_scales).
int64_t scale_elem_bytes(const PackedLayout& l);

// Bytes of each plane of a packed matrix with layout `l` (0 when absent).
int64_t value_plane_bytes(const PackedLayout& l);
int64_t hbit_plane_bytes(const PackedLayout& l);
int64_t scale_plane_bytes(const PackedLayout& l);
int64_t min_plane_bytes(const PackedLayout& l);

class PackedWeights {
 public:
  const PackedLayout& layout() const { return layout_; }
  const uint8_t* values() const { return values_; }
  const uint8_t* hbits() const { return hbits_.get(); }
  // Scale and min planes, as bytes: elements of scale_elem_bytes(layout())
  // (f32, f16, or the K-quant sub-scale blocks).
  const uint8_t* scales() const { return scales_.get(); }
  const uint8_t* mins() const { return mins_.get(); }
  // Bytes the packed planes own (0 for a view).
  int64_t owned_bytes() const { return owned_bytes_; }

  // Packs `w` (checked by make_weight_matrix) in packed_layout(..., tier).
  // Rows [0, n_out) are packed on `pool`'s threads. Errors: Unimplemented
  // for types can_pack refuses.
  static absl::StatusOr<std::unique_ptr<PackedWeights>> pack(
      const WeightMatrix& w, IsaTier tier, ThreadPool& pool);

 private:
  // Planes live in the huge-page arena (huge_page_arena.h).
  template <typename T>
  using Buffer = std::unique_ptr<T[], HugePageArenaFree>;

  PackedLayout layout_;
  const uint8_t* values_ = nullptr;
  Buffer<uint8_t> owned_values_;
  Buffer<uint8_t> hbits_;
  Buffer<uint8_t> scales_;
  Buffer<uint8_t> mins_;
  int64_t owned_bytes_ = 0;
};

}  // namespace strata::kernels::jit
