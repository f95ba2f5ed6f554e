// The generator of interleaved matmul tiles (Xbyak), AVX2 + FMA, AVX-512
// (32 registers) and AVX-512 VNNI (16-row groups on zmm): one row group of
// the interleaved layout
// (packed_weights.h) by `cols` activation rows; see avx2_generator.h for
// the scheme. The idea of interleaving rows
// so that one vpmaddubsw feeds several rows is ggml-cpu's repacked
// q4_0_8x8 / q4_K_8x8 GEMM (ggml/src/ggml-cpu/repack.cpp); the layout, the
// broadcast of activation bytes and the code here are our own.
#include <algorithm>
#include <cassert>
#include <cstddef>
#include <utility>

#include "kernels/cpu/jit/avx2_generator.h"
#include "xbyak/xbyak.h"

namespace strata::kernels::jit {
namespace {

// Registers besides the per-column ones: ones, t, sv (+ 0x0F, w_lo, w_hi
// for kU4; w for kU8; w, |w| for kS8).
// kU5: ones, t, w_lo, w_hi, the fifth bits (scales reuse w_lo, masks are
// memory operands).
// kU6: ones, t, t2, w_lo, w_hi, the high parts (scales reuse w_lo).
int fixed_registers(const TileConf& c) {
  switch (c.encoding) {
    case Encoding::kU4:
      return 6;
    case Encoding::kU6:
      return 6;
    case Encoding::kU8:
      return 4;
    default:
      return 5;
  }
}

// Per-column registers: the f32 accumulator and int sums (AVX2 kU8, kU5:
// int16 and int32; vnni: int32 only).
int column_registers(const TileConf& c) {
  if (c.vnni) return 2;
  return c.encoding == Encoding::kU8 || c.encoding == Encoding::kU5 ? 3 : 2;
}

class InterleavedTile final : public Tile, public Xbyak::CodeGenerator {
 public:
  explicit InterleavedTile(const TileConf& c)
      : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow), c_(c) {
    generate();
    ready(Xbyak::CodeArray::PROTECT_RE);
  }
  TileFn fn() const override { return getCode<TileFn>(); }
  size_t code_bytes() const override { return getSize(); }

 private:
  // y_ and groups_ are callee-saved (pushed): they live across groups.
  const Xbyak::Reg64 args_ = rdi, vals_ = rsi, sc_ = rdx, mn_ = rcx, act_ = r8,
                     ad_ = r9, ac_ = r10, cnt_ = rax, hb_ = r11, y_ = rbx,
                     groups_ = r12;

  // Vector register i: ymm i, or zmm i for 16-row groups (c_.group 16).
  // Held as Xbyak::Xmm, which keeps the register's width.
  using Vec = Xbyak::Xmm;
  Vec vec(int i) const {
    if (zmm()) return Xbyak::Zmm(i);
    return Xbyak::Ymm(i);
  }
  bool zmm() const { return c_.group == 16; }
  // Column register i: vec i (AVX2); wide: 16-31 first, then 0 up (the
  // fixed registers are taken from 15 down).
  Vec col_reg(int i) const {
    if (!c_.wide) return vec(i);
    return vec(i < 16 ? 16 + i : i - 16);
  }
  Vec acc(int col) const { return col_reg(col); }
  Vec sum(int col) const { return col_reg(c_.cols + col); }
  Vec sum32(int col) const { return col_reg(2 * c_.cols + col); }
  // The width-generic forms of the moves and logic (zmm needs EVEX).
  void vload(const Vec& v, const Xbyak::Address& a) {
    if (zmm()) {
      vmovdqu32(v, a);
    } else {
      vmovdqu(v, a);
    }
  }
  void vand(const Vec& d, const Vec& a, const Xbyak::Operand& b) {
    if (zmm()) {
      vpandd(d, a, b);
    } else {
      vpand(d, a, b);
    }
  }
  void vor(const Vec& d, const Vec& a, const Xbyak::Operand& b) {
    if (zmm()) {
      vpord(d, a, b);
    } else {
      vpor(d, a, b);
    }
  }
  // One group's integer sub-scales of a unit as a memory operand: 8 bytes
  // (ymm) or 16 (zmm).
  Xbyak::Address sub_scales(const Xbyak::RegExp& e) const {
    return zmm() ? xword[e] : qword[e];
  }
  int64_t G() const { return c_.group; }

  int n_sc() const { return c_.paired_scales ? 2 : 1; }
  int scale_bytes() const { return c_.scale_f16 ? 2 : 4; }
  // Floats of the activation correction per unit: one per scale (zero
  // points) or per unit (mins).
  int corr_per_unit() const { return c_.min_correction ? 1 : n_sc(); }
  int64_t group_unit_bytes() const { return G() * c_.unit_bytes; }
  // Activation bytes `offset` of unit u of column col: as a vector operand,
  // or (vnni) as a 4-byte embedded broadcast.
  Xbyak::RegExp act_exp(int col, int u, int offset) const {
    return act_ + col * c_.act_stride + u * 32 + offset;
  }
  Xbyak::Address act_at(int col, int u, int offset) const {
    return ptr[act_exp(col, u, offset)];
  }

  void generate();
  void unit(int u);
  void nibble_products(int u, int m, bool first);
  void unit_u4(int u);
  void unit_u5(int u);
  void unit_u6(int u);
  void unit_u8(int u);
  void unit_s8(int u);
  // int32 s (=, when `first`, else +=) the pair sums of the int16 lanes of
  // t (vpmaddwd against ones_; t is clobbered).
  void widen_into(const Vec& s, const Vec& t, bool first);
  // The chunk vectors of one load into w_ (low nibbles) and w2_ (high):
  // kU4 (load m), kU5 (load m, with the fifth bits), kU6 (half k, load m2).
  void load_u4(int u, int m) { load_u4(u, m, w_, w2_, 0); }
  void load_u5(int u, int m) { load_u5(u, m, w_, w2_, hv_, 0); }
  void load_u6(int u, int k, int m2) { load_u6(u, k, m2, w_, w2_, hv_, 0); }
  // The same into w and w2 (hv: the fifth / high bits) from the planes of
  // the group `vd` bytes of values past the tile's (pair: the second).
  void load_u4(int u, int m, const Vec& w, const Vec& w2, int64_t vd);
  void load_u5(int u, int m, const Vec& w, const Vec& w2, const Vec& hv,
               int64_t vd);
  void load_u6(int u, int k, int m2, const Vec& w, const Vec& w2, const Vec& hv,
               int64_t vd);
  // vnni: the int32 sums restart; sum(col) += w . (activation bytes at
  // `offset` of unit u, broadcast), one vpdpbusd per column.
  void zero_sums();
  void dots(const Vec& w, int u, int offset);
  void unit_vnni(int u);
  // Loads the group's G rows' scale h of unit u into sv (f16 or f32).
  void load_scales(int u, int h) { load_scales(u, h, sv_, 0); }
  // Into `sv`, from the scale plane `sd` bytes past the tile's.
  void load_scales(int u, int h, const Vec& sv, int64_t sd);
  // acc(col) += f32(int32 sums s - z sum q_a (zero points)) * (sv * d_a).
  void finish(int col, const Vec& s, int u, int h);
  void min_correction(int u, const Vec& mv);

  // conf.pair: slot s (0, 1) is the first or second row group of a pass.
  // Its accumulator and int32 sum of column col; its chunk registers
  // (pw_, pw2_; scales reuse pw_, mins pw2_) and high bits (phv_); the
  // byte offsets of its planes from the tile's pointers.
  Vec pacc(int col, int s) const { return col_reg(s * c_.cols + col); }
  Vec psum(int col, int s) const {
    return col_reg(2 * c_.cols + s * c_.cols + col);
  }
  int64_t vdisp(int s) const { return s * c_.value_stride; }
  int64_t hdisp(int s) const { return s * c_.hbit_group_bytes; }
  int64_t sdisp(int s) const { return s * c_.scale_group_bytes; }
  int64_t mdisp(int s) const { return s * c_.mins_group_bytes; }
  void unit_pair(int u, int slots);
  // Both slots' sums += their chunk (a, b) x the activation bytes at
  // `offset` of unit u: one broadcast per column for the two vpdpbusd.
  void dots_pair(const Vec& a, const Vec& b, int u, int offset, int slots);
  void finish_pair(int col, int u, int h, int slots);
  void min_correction_pair(int u, int slots);

  const TileConf c_;
  Vec ones_, t_, t2_, sv_, m0f_, w_, w2_, hv_;
  Vec bc_, pw_[2], pw2_[2], phv_[2];  // conf.pair
  Xbyak::Label mask_, c0f_, c10_, c30_;
};

void InterleavedTile::load_scales(int u, int h, const Vec& sv, int64_t sd) {
  if (c_.k_scales) {  // d * sub-scale; u is the unit within the super-block
    const Xbyak::Address sub = sub_scales(sc_ + sd + (u * n_sc() + h) * G());
    if (c_.signed_scales) {
      vpmovsxbd(sv, sub);
    } else {
      vpmovzxbd(sv, sub);
    }
    vcvtdq2ps(sv, sv);
    vmulps(sv, sv, ptr[sc_ + sd + 8 * n_sc() * G()]);
    return;
  }
  const int64_t off = sd + (int64_t{u} * n_sc() + h) * G() * scale_bytes();
  if (c_.scale_f16) {
    vcvtph2ps(sv, ptr[sc_ + off]);
  } else {
    vmovups(sv, ptr[sc_ + off]);
  }
}

void InterleavedTile::finish(int col, const Vec& s, int u, int h) {
  const int64_t d_off = (col * c_.act_d_stride + u) * 4;
  const int64_t c_off =
      (col * c_.act_corr_stride + int64_t{u} * n_sc() + h) * 4;
  if (c_.correction && !c_.min_correction) {  // zero point: - z sum q_a
    if (c_.wide) {
      vpsubd(s, s, ptr_b[ac_ + c_off]);
    } else {
      vpbroadcastd(t_, ptr[ac_ + c_off]);
      vpsubd(s, s, t_);
    }
  }
  vcvtdq2ps(s, s);
  if (c_.wide) {  // embedded broadcast
    vmulps(t_, sv_, ptr_b[ad_ + d_off]);
  } else {
    vbroadcastss(t_, ptr[ad_ + d_off]);
    vmulps(t_, t_, sv_);
  }
  vfmadd231ps(acc(col), s, t_);
}

void InterleavedTile::min_correction(int u, const Vec& mv) {
  if (!c_.min_correction) return;
  if (c_.k_scales) {  // acc -= (dmin * m) * A, i.e. + (-(dmin * m)) * A
    vpmovzxbd(mv, sub_scales(mn_ + u * G()));
    vcvtdq2ps(mv, mv);
    vmulps(mv, mv, ptr[mn_ + 8 * G()]);
    for (int col = 0; col < c_.cols; ++col) {
      vbroadcastss(t_, ptr[ac_ + (col * c_.act_corr_stride + u) * 4]);
      vfnmadd231ps(acc(col), mv, t_);
    }
    return;
  }
  const int64_t off = int64_t{u} * G() * scale_bytes();
  if (c_.scale_f16) {
    vcvtph2ps(mv, ptr[mn_ + off]);
  } else {
    vmovups(mv, ptr[mn_ + off]);
  }
  for (int col = 0; col < c_.cols; ++col) {
    vbroadcastss(t_, ptr[ac_ + (col * c_.act_corr_stride + u) * 4]);
    vfmadd231ps(acc(col), mv, t_);
  }
}

// kU4 / kU5: int16 sums of load m's two chunk vectors (w_: 4m, w2_: 4m+4)
// times the activations, into sum(col) (restarted when `first`).
void InterleavedTile::nibble_products(int u, int m, bool first) {
  for (int col = 0; col < c_.cols; ++col) {
    vpbroadcastd(t_, act_at(col, u, 4 * m));
    if (first) {
      vpmaddubsw(sum(col), w_, t_);
    } else {
      vpmaddubsw(t_, w_, t_);
      vpaddw(sum(col), sum(col), t_);
    }
    vpbroadcastd(t_, act_at(col, u, 16 + 4 * m));
    vpmaddubsw(t_, w2_, t_);
    vpaddw(sum(col), sum(col), t_);
  }
}

void InterleavedTile::load_u4(int u, int m, const Vec& w, const Vec& w2,
                              int64_t vd) {
  vload(w, ptr[vals_ + vd + u * group_unit_bytes() + m * 4 * G()]);
  vpsrlw(w2, w, 4);
  vand(w, w, m0f_);
  vand(w2, w2, m0f_);
}

void InterleavedTile::unit_u4(int u) {
  for (int m = 0; m < 4; ++m) {
    load_u4(u, m);
    nibble_products(u, m, m == 0);
  }
  load_scales(u, 0);
  for (int col = 0; col < c_.cols; ++col) {
    vpmaddwd(sum(col), sum(col), ones_);
    finish(col, sum(col), u, 0);
  }
  min_correction(u, w_);
}

// kU5: ggml's Q5 fifth bits, one byte per (row, 4-element chunk), bit j
// for chunk vector j (packed_weights.h), moved to bit 4 and or-ed in.
// Values up to 31: int16 sums of four products (4 x 2 x 31 x 127 < 2^15).
// (hv_ holds the unit's fifth bits.)
void InterleavedTile::load_u5(int u, int m, const Vec& w0, const Vec& w1,
                              const Vec& hv, int64_t vd) {
  vload(w0, ptr[vals_ + vd + u * group_unit_bytes() + m * 4 * G()]);
  vpsrlw(w1, w0, 4);
  vand(w0, w0, ptr[rip + c0f_]);
  vand(w1, w1, ptr[rip + c0f_]);
  for (auto [w, j] : {std::pair{w0, m}, std::pair{w1, m + 4}}) {
    if (j < 4) {
      vpsllw(t_, hv, 4 - j);
    } else if (j > 4) {
      vpsrlw(t_, hv, j - 4);
    }
    vand(t_, j == 4 ? hv : t_, ptr[rip + c10_]);
    vor(w, w, t_);
  }
}

void InterleavedTile::unit_u5(int u) {
  vload(hv_, ptr[hb_ + u * 4 * G()]);
  for (int m = 0; m < 4; ++m) {
    load_u5(u, m);
    nibble_products(u, m, m % 2 == 0);
    for (int col = 0; col < c_.cols && m % 2 == 1; ++col) {
      widen_into(sum32(col), sum(col), m == 1);
    }
  }
  load_scales(u, 0);  // sv_ is w_ here
  for (int col = 0; col < c_.cols; ++col) finish(col, sum32(col), u, 0);
  min_correction(u, w2_);
}

// kU6 (Q6_K): a load holds chunk vectors 2m (low nibbles) and 2m+1 (high
// nibbles), both in half m / 2; their high 2 bits, bits 2i of the half's
// byte for vector 4k+i, move to bits 4-5. Values up to 63: int16 sums of
// the two products of one load (2 x 2 x 63 x 127 < 2^15), so no int16
// register per column.
// (hv_ holds half k's high parts.)
void InterleavedTile::load_u6(int u, int k, int m2, const Vec& w0,
                              const Vec& w1, const Vec& hv, int64_t vd) {
  const int m = 2 * k + m2;
  vload(w0, ptr[vals_ + vd + u * group_unit_bytes() + m * 4 * G()]);
  vpsrlw(w1, w0, 4);
  vand(w0, w0, ptr[rip + c0f_]);
  vand(w1, w1, ptr[rip + c0f_]);
  for (auto [w, j] : {std::pair{w0, 2 * m}, std::pair{w1, 2 * m + 1}}) {
    const int i = j - 4 * k;
    if (i < 2) {
      vpsllw(t_, hv, 4 - 2 * i);
    } else if (i == 3) {
      vpsrlw(t_, hv, 2);
    }
    vand(t_, i == 2 ? hv : t_, ptr[rip + c30_]);
    vor(w, w, t_);
  }
}

void InterleavedTile::unit_u6(int u) {
  for (int k = 0; k < 2; ++k) {
    vload(hv_, ptr[hb_ + u * 8 * G() + k * 4 * G()]);
    for (int m2 = 0; m2 < 2; ++m2) {
      const int m = 2 * k + m2;
      load_u6(u, k, m2);
      for (int col = 0; col < c_.cols; ++col) {
        vpbroadcastd(t_, act_at(col, u, 4 * (2 * m)));
        vpmaddubsw(t_, w_, t_);
        vpbroadcastd(t2_, act_at(col, u, 4 * (2 * m + 1)));
        vpmaddubsw(t2_, w2_, t2_);
        vpaddw(t_, t_, t2_);
        widen_into(sum(col), t_, m2 == 0);
      }
    }
    load_scales(u, k);  // sv_ is w_ here
    for (int col = 0; col < c_.cols; ++col) finish(col, sum(col), u, k);
  }
  min_correction(u, w2_);
}

void InterleavedTile::widen_into(const Vec& s, const Vec& t, bool first) {
  if (first) {
    vpmaddwd(s, t, ones_);
  } else {
    vpmaddwd(t, t, ones_);
    vpaddd(s, s, t);
  }
}

void InterleavedTile::unit_u8(int u) {
  const int64_t base = u * group_unit_bytes();
  const int per_scale = 8 / n_sc();  // chunk vectors per scale
  for (int j = 0; j < 8; ++j) {
    vmovdqu(w_, ptr[vals_ + base + j * 32]);
    for (int col = 0; col < c_.cols; ++col) {
      vpbroadcastd(t_, act_at(col, u, 4 * j));
      if (j % 2 == 0) {
        vpmaddubsw(sum(col), w_, t_);
        continue;
      }
      vpmaddubsw(t_, w_, t_);
      vpaddw(sum(col), sum(col), t_);
      widen_into(sum32(col), sum(col), j % per_scale == 1);
    }
    if (j % per_scale == per_scale - 1) {
      const int h = j / per_scale;
      load_scales(u, h);
      for (int col = 0; col < c_.cols; ++col) finish(col, sum32(col), u, h);
    }
  }
  min_correction(u, w_);
}

void InterleavedTile::unit_s8(int u) {
  const int64_t base = u * group_unit_bytes();
  for (int j = 0; j < 8; ++j) {
    vmovdqu(w_, ptr[vals_ + base + j * 32]);
    vpabsb(w2_, w_);
    for (int col = 0; col < c_.cols; ++col) {
      vpbroadcastd(t_, act_at(col, u, 4 * j));
      vpsignb(t_, t_, w_);
      vpmaddubsw(t_, w2_, t_);
      widen_into(sum(col), t_, j == 0);
    }
  }
  load_scales(u, 0);
  for (int col = 0; col < c_.cols; ++col) finish(col, sum(col), u, 0);
  min_correction(u, w_);
}

void InterleavedTile::zero_sums() {
  for (int col = 0; col < c_.cols; ++col) vpxord(sum(col), sum(col), sum(col));
}

void InterleavedTile::dots(const Vec& w, int u, int offset) {
  for (int col = 0; col < c_.cols; ++col) {
    vpdpbusd(sum(col), w, ptr_b[act_exp(col, u, offset)], Xbyak::EvexEncoding);
  }
}

// One unit, vnni: each chunk vector's products are one vpdpbusd per column
// into the int32 sums, finished per scale.
void InterleavedTile::unit_vnni(int u) {
  switch (c_.encoding) {
    case Encoding::kU4:
    case Encoding::kU5:
      zero_sums();
      if (c_.encoding == Encoding::kU5) vload(hv_, ptr[hb_ + u * 4 * G()]);
      for (int m = 0; m < 4; ++m) {
        if (c_.encoding == Encoding::kU5) {
          load_u5(u, m);
        } else {
          load_u4(u, m);
        }
        dots(w_, u, 4 * m);
        dots(w2_, u, 16 + 4 * m);
      }
      load_scales(u, 0);  // kU5: sv_ is w_
      for (int col = 0; col < c_.cols; ++col) finish(col, sum(col), u, 0);
      min_correction(u, c_.encoding == Encoding::kU5 ? w2_ : w_);
      return;
    case Encoding::kU6:
      for (int k = 0; k < 2; ++k) {
        zero_sums();
        vload(hv_, ptr[hb_ + u * 8 * G() + k * 4 * G()]);
        for (int m2 = 0; m2 < 2; ++m2) {
          const int m = 2 * k + m2;
          load_u6(u, k, m2);
          dots(w_, u, 4 * (2 * m));
          dots(w2_, u, 4 * (2 * m + 1));
        }
        load_scales(u, k);  // sv_ is w_
        for (int col = 0; col < c_.cols; ++col) finish(col, sum(col), u, k);
      }
      min_correction(u, w2_);
      return;
    default: {  // kU8
      assert(c_.encoding == Encoding::kU8);
      const int per_scale = 8 / n_sc();
      for (int j = 0; j < 8; ++j) {
        if (j % per_scale == 0) zero_sums();
        vload(w_, ptr[vals_ + u * group_unit_bytes() + j * 4 * G()]);
        dots(w_, u, 4 * j);
        if (j % per_scale == per_scale - 1) {
          const int h = j / per_scale;
          load_scales(u, h);
          for (int col = 0; col < c_.cols; ++col) finish(col, sum(col), u, h);
        }
      }
      min_correction(u, w_);
      return;
    }
  }
}

// ---- conf.pair: two row groups per pass (see max_paired_cols).

void InterleavedTile::dots_pair(const Vec& a, const Vec& b, int u, int offset,
                                int slots) {
  for (int col = 0; col < c_.cols; ++col) {
    vpbroadcastd(bc_, act_at(col, u, offset));
    vpdpbusd(psum(col, 0), a, bc_, Xbyak::EvexEncoding);
    if (slots == 2) vpdpbusd(psum(col, 1), b, bc_, Xbyak::EvexEncoding);
  }
}

// finish() for both slots: the zero point's sum and d_a broadcast once.
void InterleavedTile::finish_pair(int col, int u, int h, int slots) {
  const int64_t d_off = (col * c_.act_d_stride + u) * 4;
  const int64_t c_off =
      (col * c_.act_corr_stride + int64_t{u} * n_sc() + h) * 4;
  if (c_.correction && !c_.min_correction) {  // zero point: - z sum q_a
    vpbroadcastd(bc_, ptr[ac_ + c_off]);
    for (int s = 0; s < slots; ++s) vpsubd(psum(col, s), psum(col, s), bc_);
  }
  for (int s = 0; s < slots; ++s) vcvtdq2ps(psum(col, s), psum(col, s));
  vbroadcastss(bc_, ptr[ad_ + d_off]);
  for (int s = 0; s < slots; ++s) {
    vmulps(t_, pw_[s], bc_);  // the slot's scales (load_scales into pw_)
    vfmadd231ps(pacc(col, s), psum(col, s), t_);
  }
}

void InterleavedTile::min_correction_pair(int u, int slots) {
  if (!c_.min_correction) return;
  for (int s = 0; s < slots; ++s) {
    const Vec& mv = pw2_[s];
    if (c_.k_scales) {
      vpmovzxbd(mv, sub_scales(mn_ + mdisp(s) + u * G()));
      vcvtdq2ps(mv, mv);
      vmulps(mv, mv, ptr[mn_ + mdisp(s) + 8 * G()]);
    } else if (c_.scale_f16) {
      vcvtph2ps(mv, ptr[mn_ + mdisp(s) + int64_t{u} * G() * scale_bytes()]);
    } else {
      vmovups(mv, ptr[mn_ + mdisp(s) + int64_t{u} * G() * scale_bytes()]);
    }
  }
  for (int col = 0; col < c_.cols; ++col) {
    vbroadcastss(bc_, ptr[ac_ + (col * c_.act_corr_stride + u) * 4]);
    for (int s = 0; s < slots; ++s) {
      if (c_.k_scales) {  // acc -= (dmin * m) * A
        vfnmadd231ps(pacc(col, s), pw2_[s], bc_);
      } else {
        vfmadd231ps(pacc(col, s), pw2_[s], bc_);
      }
    }
  }
}

// unit_vnni for `slots` groups: the same integer sums and finishing per
// (row, column), each activation broadcast shared by the slots.
void InterleavedTile::unit_pair(int u, int slots) {
  auto zero = [&] {
    for (int s = 0; s < slots; ++s) {
      for (int col = 0; col < c_.cols; ++col)
        vpxord(psum(col, s), psum(col, s), psum(col, s));
    }
  };
  auto finish_all = [&](int h) {
    for (int s = 0; s < slots; ++s) load_scales(u, h, pw_[s], sdisp(s));
    for (int col = 0; col < c_.cols; ++col) finish_pair(col, u, h, slots);
  };
  switch (c_.encoding) {
    case Encoding::kU4:
    case Encoding::kU5:
      zero();
      if (c_.encoding == Encoding::kU5) {
        for (int s = 0; s < slots; ++s)
          vload(phv_[s], ptr[hb_ + hdisp(s) + u * 4 * G()]);
      }
      for (int m = 0; m < 4; ++m) {
        for (int s = 0; s < slots; ++s) {
          if (c_.encoding == Encoding::kU5) {
            load_u5(u, m, pw_[s], pw2_[s], phv_[s], vdisp(s));
          } else {
            load_u4(u, m, pw_[s], pw2_[s], vdisp(s));
          }
        }
        dots_pair(pw_[0], pw_[1], u, 4 * m, slots);
        dots_pair(pw2_[0], pw2_[1], u, 16 + 4 * m, slots);
      }
      finish_all(0);
      min_correction_pair(u, slots);
      return;
    case Encoding::kU6:
      for (int k = 0; k < 2; ++k) {
        zero();
        for (int s = 0; s < slots; ++s) {
          vload(phv_[s], ptr[hb_ + hdisp(s) + u * 8 * G() + k * 4 * G()]);
        }
        for (int m2 = 0; m2 < 2; ++m2) {
          const int m = 2 * k + m2;
          for (int s = 0; s < slots; ++s)
            load_u6(u, k, m2, pw_[s], pw2_[s], phv_[s], vdisp(s));
          dots_pair(pw_[0], pw_[1], u, 4 * (2 * m), slots);
          dots_pair(pw2_[0], pw2_[1], u, 4 * (2 * m + 1), slots);
        }
        finish_all(k);
      }
      min_correction_pair(u, slots);
      return;
    default: {  // kU8
      assert(c_.encoding == Encoding::kU8);
      const int per_scale = 8 / n_sc();
      for (int j = 0; j < 8; ++j) {
        if (j % per_scale == 0) zero();
        for (int s = 0; s < slots; ++s) {
          vload(pw_[s],
                ptr[vals_ + vdisp(s) + u * group_unit_bytes() + j * 4 * G()]);
        }
        dots_pair(pw_[0], pw_[1], u, 4 * j, slots);
        if (j % per_scale == per_scale - 1) finish_all(j / per_scale);
      }
      min_correction_pair(u, slots);
      return;
    }
  }
}

void InterleavedTile::unit(int u) {
  if (c_.prefetch > 0) {
    for (int64_t b = 0; b < group_unit_bytes(); b += 64) {
      prefetcht0(ptr[vals_ + u * group_unit_bytes() + c_.prefetch + b]);
    }
  }
  if (c_.vnni) {
    unit_vnni(u);
    return;
  }
  switch (c_.encoding) {
    case Encoding::kU4:
      unit_u4(u);
      break;
    case Encoding::kU5:
      unit_u5(u);
      break;
    case Encoding::kU6:
      unit_u6(u);
      break;
    case Encoding::kU8:
      unit_u8(u);
      break;
    default:
      unit_s8(u);
      break;
  }
}

void InterleavedTile::generate() {
  using Xbyak::Xmm;
  const TileConf& c = c_;
  assert(c.cols >= 1 && c.cols <= max_interleaved_cols(c));
  assert(c.group == 8 || (c.group == 16 && c.vnni));
  assert(c.rows >= 1 && c.rows <= c.group);
  assert(!c.vnni || c.encoding != Encoding::kS8);
  assert(!c.vnni || c.wide);

  push(y_);
  push(groups_);
  mov(vals_, ptr[args_ + offsetof(TileArgs, values)]);
  mov(sc_, ptr[args_ + offsetof(TileArgs, scales)]);
  mov(mn_, ptr[args_ + offsetof(TileArgs, wcorr)]);
  mov(y_, ptr[args_ + offsetof(TileArgs, y)]);
  mov(groups_, ptr[args_ + offsetof(TileArgs, groups)]);
  const bool high_bits =
      c.encoding == Encoding::kU5 || c.encoding == Encoding::kU6;
  if (high_bits) mov(hb_, ptr[args_ + offsetof(TileArgs, hbits)]);

  int next = 15;
  auto take = [&] { return vec(next--); };
  if (c.pair) {
    assert(c.vnni && c.rows == c.group && c.prefetch == 0 &&
           c.cols <= max_paired_cols(c));
    t_ = take();
    bc_ = take();
    for (int s = 0; s < 2; ++s) {
      pw_[s] = take();
      pw2_[s] = take();
      if (high_bits) phv_[s] = take();
    }
    if (c.encoding == Encoding::kU4) {
      m0f_ = take();
      mov(eax, 0x0F0F0F0F);
      vmovd(Xmm(m0f_.getIdx()), eax);
      vpbroadcastd(m0f_, Xmm(m0f_.getIdx()));
    }
    assert(next + 1 + 16 >= 4 * c.cols);
  } else {
    ones_ = take();
    mov(eax, 0x00010001);
    vmovd(Xmm(ones_.getIdx()), eax);
    vpbroadcastd(ones_, Xmm(ones_.getIdx()));
    t_ = take();
    if (c.encoding == Encoding::kU6) t2_ = take();
    if (!high_bits) sv_ = take();
    w_ = take();
    if (high_bits) {
      sv_ = w_;
      w2_ = take();
      hv_ = take();
    }
    if (c.encoding == Encoding::kU4) {
      m0f_ = take();
      mov(eax, 0x0F0F0F0F);
      vmovd(Xmm(m0f_.getIdx()), eax);
      vpbroadcastd(m0f_, Xmm(m0f_.getIdx()));
    }
    if (c.encoding == Encoding::kU4 || c.encoding == Encoding::kS8)
      w2_ = take();
    // Column registers: 0..next (AVX2); wide: 16-31, then 0..next.
    assert(next + 1 + (c.wide ? 16 : 0) >= column_registers(c) * c.cols);
  }
  if (c.wide && c.rows < c.group) {  // the partial group's store mask
    mov(eax, (1 << c.rows) - 1);
    kmovw(k1, eax);
  }

  // K-quant sub-scales: one super-block (8 units) per iteration.
  const int unroll = c.k_scales ? 8 : c.unroll;
  const int64_t iters = c.n_units / unroll;
  const int rest = static_cast<int>(c.n_units % unroll);
  // Moves every pointer past `units` units.
  auto advance = [&](int units) {
    add(vals_, units * group_unit_bytes());
    add(act_, units * 32);
    add(sc_, c.k_scales ? G() * (8 * n_sc() + 4)
                        : units * n_sc() * G() * scale_bytes());
    if (c.min_correction)
      add(mn_, c.k_scales ? 12 * G() : units * G() * scale_bytes());
    if (high_bits)
      add(hb_, units * (c.encoding == Encoding::kU6 ? 8 : 4) * G());
    add(ad_, units * 4);
    if (c.correction) add(ac_, units * corr_per_unit() * 4);
  };
  // One pass over the units for `slots` row groups (2: conf.pair), which
  // leaves the weight pointers at the end of the first group's planes (the
  // planes are contiguous from group to group); the activations restart.
  auto group_pass = [&](int slots) {
    mov(act_, ptr[args_ + offsetof(TileArgs, act)]);
    mov(ad_, ptr[args_ + offsetof(TileArgs, act_d)]);
    mov(ac_, ptr[args_ + offsetof(TileArgs, act_corr)]);
    for (int col = 0; col < c.cols; ++col) {
      if (c.pair) {
        for (int s = 0; s < slots; ++s)
          vpxord(pacc(col, s), pacc(col, s), pacc(col, s));
      } else if (c.wide) {
        vpxord(acc(col), acc(col), acc(col));
      } else {
        vxorps(acc(col), acc(col), acc(col));
      }
    }
    auto run_unit = [&](int i) {
      if (c.pair) {
        unit_pair(i, slots);
      } else {
        unit(i);
      }
    };
    if (iters > 0) {
      Xbyak::Label loop;
      mov(cnt_, iters);
      L(loop);
      for (int i = 0; i < unroll; ++i) run_unit(i);
      advance(unroll);
      dec(cnt_);
      jnz(loop, T_NEAR);
    }
    for (int i = 0; i < rest; ++i) run_unit(i);
    if (rest > 0) advance(rest);  // never for k_scales (whole super-blocks)

    if (c.pair) {  // whole groups only
      for (int s = 0; s < slots; ++s) {
        for (int col = 0; col < c.cols; ++col) {
          vmovups(ptr[y_ + col * c.y_stride * 4 + s * G() * 4], pacc(col, s));
        }
      }
      return;
    }
    if (c.rows < 8 && !c.wide) vmovdqu(t_, ptr[rip + mask_]);
    for (int col = 0; col < c.cols; ++col) {
      const Xbyak::Address y = ptr[y_ + col * c.y_stride * 4];
      if (c.rows == c.group) {
        vmovups(y, acc(col));
      } else if (c.wide) {
        vmovups(y | k1, acc(col));
      } else {
        vmaskmovps(y, t_, acc(col));
      }
    }
  };

  if (c.pair) {
    // Pairs of groups while two are left, then the odd one alone.
    Xbyak::Label pair_loop, single, done;
    L(pair_loop);
    cmp(groups_, 2);
    jl(single, T_NEAR);
    group_pass(2);
    add(vals_, c.value_stride);  // past the second group's planes
    if (high_bits) add(hb_, c.hbit_group_bytes);
    add(sc_, c.scale_group_bytes);
    if (c.min_correction) add(mn_, c.mins_group_bytes);
    add(y_, 2 * G() * 4);
    sub(groups_, 2);
    jmp(pair_loop, T_NEAR);
    L(single);
    test(groups_, groups_);
    jz(done, T_NEAR);
    group_pass(1);
    L(done);
  } else {
    // One row group per pass.
    Xbyak::Label group_loop;
    L(group_loop);
    group_pass(1);
    add(y_, G() * 4);
    dec(groups_);
    jnz(group_loop, T_NEAR);
  }
  vzeroupper();
  pop(groups_);
  pop(y_);
  ret();

  align(32);
  L(mask_);  // lanes of the rows the partial group has
  for (int r = 0; r < 8; ++r) dd(r < c.rows ? 0xFFFFFFFFu : 0u);
  align(64);
  L(c0f_);  // 64 bytes each: a ymm or a zmm operand
  for (int j = 0; j < 64; ++j) db(0x0F);
  L(c10_);
  for (int j = 0; j < 64; ++j) db(0x10);
  L(c30_);
  for (int j = 0; j < 64; ++j) db(0x30);
}

}  // namespace

int max_interleaved_cols(const TileConf& conf) {
  if (conf.wide) {
    return std::min(16, (32 - fixed_registers(conf)) / column_registers(conf));
  }
  return (16 - fixed_registers(conf)) / column_registers(conf);
}

int max_paired_cols(const TileConf& conf) {
  if (!conf.vnni) return 0;
  // t, the broadcast, two chunk registers per slot, the high bits per slot
  // (kU5, kU6), 0x0F (kU4); four column registers (two accumulators, two
  // sums).
  const bool high_bits =
      conf.encoding == Encoding::kU5 || conf.encoding == Encoding::kU6;
  const int fixed =
      2 + 4 + (high_bits ? 2 : 0) + (conf.encoding == Encoding::kU4 ? 1 : 0);
  return std::min(6, (32 - fixed) / 4);
}

std::unique_ptr<Tile> make_interleaved_tile(const TileConf& conf) {
  return std::make_unique<InterleavedTile>(conf);
}

}  // namespace strata::kernels::jit
