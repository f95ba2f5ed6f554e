#include "kernels/cpu/jit/avx2_generator.h"

#include <cassert>
#include <cstddef>

#include "xbyak/xbyak.h"

namespace strata::kernels::jit {
namespace {

bool is_float(Encoding e) {
  return e == Encoding::kF32 || e == Encoding::kF16 || e == Encoding::kBF16;
}

// Constant and temporary registers each encoding needs besides the
// accumulators.
int reserved_registers(const TileConf& c) {
  if (is_float(c.encoding)) return 1;  // W
  int n = 1 + 1 + 1 + 1 + 1;           // ones, W, SW, T, S
  if (c.encoding == Encoding::kU4 || c.encoding == Encoding::kU5) ++n;  // 0x0F
  if (c.encoding == Encoding::kS8) ++n;  // |W|
  if (c.paired_scales || c.unit_pairs) ++n;  // permutation index
  if (c.unit_pairs) ++n;                     // high halves
  return n;
}

class Avx2Tile final : public Tile, public Xbyak::CodeGenerator {
 public:
  explicit Avx2Tile(const TileConf& c)
      : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow), c_(c) {
    generate();
    ready(Xbyak::CodeArray::PROTECT_RE);  // executable, no longer writable
  }
  TileFn fn() const override { return getCode<TileFn>(); }
  size_t code_bytes() const override { return getSize(); }

 private:
  // General registers (all caller-saved in the System V ABI).
  const Xbyak::Reg64 args_ = rdi, vals_ = rsi, hb_ = rdx, sc_ = rcx,
                     act_ = r8, ad_ = r9, cnt_ = rax, t0_ = r10, t1_ = r11;

  Xbyak::Ymm acc(int r, int col) const { return Xbyak::Ymm(r * c_.cols + col); }

  void generate();
  // One unit at offset u (units) from the current pointers; with unit pairs
  // (the last, unpaired unit) its activation scales are 8 floats at
  // d_offset.
  void unit(int u, int64_t d_offset);
  // One unit pair at offset p (pairs) from the current pointers.
  void pair(int p);
  // kS8 decode (one activation row, no -128 weights): the activation, its
  // magnitude and scale are loaded once per unit, each row takes
  // |a| * (w * sign(a)).
  void unit_s8_decode(int u);

  const TileConf c_;
  Xbyak::Ymm ones_, m0f_, idx_, w_, w2_, wabs_, sw_, t_, s_;
  Xbyak::Label shuf_, shuf_lo_, shuf_hi_, bitsel_, c10_, perm_;
};

void Avx2Tile::unit_s8_decode(int u) {
  const TileConf& c = c_;
  vmovdqu(w_, ptr[act_ + u * 32]);   // a
  vpabsb(wabs_, w_);                 // |a|
  vbroadcastss(sw_, ptr[ad_ + u * 4]);  // d_a
  for (int r = 0; r < c.rows; ++r) {
    const int64_t vrow = r * c.value_stride + u * c.unit_bytes;
    if (c.prefetch > 0 && u == 0) prefetcht0(ptr[vals_ + vrow + c.prefetch]);
    vmovdqu(t_, ptr[vals_ + vrow]);
    vpsignb(t_, t_, w_);
    vpmaddubsw(t_, wabs_, t_);
    vpmaddwd(t_, t_, ones_);
    vcvtdq2ps(t_, t_);
    vbroadcastss(s_, ptr[sc_ + (r * c.scale_stride + u) * 4]);
    vmulps(s_, s_, sw_);
    vfmadd231ps(acc(r, 0), t_, s_);
  }
}

void Avx2Tile::pair(int p) {
  const TileConf& c = c_;
  for (int r = 0; r < c.rows; ++r) {
    const int64_t vrow = r * c.value_stride + p * 32;
    if (c.prefetch > 0 && p == 0) prefetcht0(ptr[vals_ + vrow + c.prefetch]);
    vmovdqu(w_, ptr[vals_ + vrow]);
    vpsrlw(w2_, w_, 4);
    vpand(w_, w_, m0f_);
    vpand(w2_, w2_, m0f_);
    if (c.encoding == Encoding::kU5) {
      // Fifth bits of both units: low halves from bytes 0-1 (u) and 4-5
      // (u+1) of the pair's two u32, high halves from bytes 2-3 and 6-7.
      vpbroadcastq(t_, ptr[hb_ + r * c.hbit_stride + p * 8]);
      for (int half = 0; half < 2; ++half) {
        vpshufb(s_, t_, ptr[rip + (half == 0 ? shuf_lo_ : shuf_hi_)]);
        vpand(s_, s_, ptr[rip + bitsel_]);
        vpcmpeqb(s_, s_, ptr[rip + bitsel_]);
        vpand(s_, s_, ptr[rip + c10_]);
        vpor(half == 0 ? w_ : w2_, half == 0 ? w_ : w2_, s_);
      }
    }
    vpermps(sw_, idx_, ptr[sc_ + (r * c.scale_stride + p * 2) * 4]);
    for (int col = 0; col < c.cols; ++col) {
      const int64_t a = col * c.act_stride + p * 64;
      vpmaddubsw(t_, w_, ptr[act_ + a]);
      vpmaddubsw(s_, w2_, ptr[act_ + a + 32]);
      vpaddw(t_, t_, s_);
      vpmaddwd(t_, t_, ones_);
      vcvtdq2ps(t_, t_);
      vmulps(s_, sw_, ptr[ad_ + (col * c.act_d_stride + p * 8) * 4]);
      vfmadd231ps(acc(r, col), t_, s_);
    }
  }
}

void Avx2Tile::unit(int u, int64_t d_offset) {
  using Xbyak::Xmm;
  const TileConf& c = c_;
  const bool fl = is_float(c.encoding);
  for (int r = 0; r < c.rows; ++r) {
    const int64_t vrow = r * c.value_stride + u * c.unit_bytes;
    if (c.prefetch > 0 && u == 0) prefetcht0(ptr[vals_ + vrow + c.prefetch]);
    switch (c.encoding) {
      case Encoding::kU4:
      case Encoding::kU5:
        vmovdqu(Xmm(w_.getIdx()), ptr[vals_ + vrow]);
        vpsrlw(Xmm(t_.getIdx()), Xmm(w_.getIdx()), 4);
        vinserti128(w_, w_, Xmm(t_.getIdx()), 1);
        vpand(w_, w_, m0f_);
        if (c.encoding == Encoding::kU5) {
          // bytes_from_bits_32: byte j = 0xFF where bit j is set, then 0x10.
          vpbroadcastd(t_, ptr[hb_ + r * c.hbit_stride + u * 4]);
          vpshufb(t_, t_, ptr[rip + shuf_]);
          vpand(t_, t_, ptr[rip + bitsel_]);
          vpcmpeqb(t_, t_, ptr[rip + bitsel_]);
          vpand(t_, t_, ptr[rip + c10_]);
          vpor(w_, w_, t_);
        }
        break;
      case Encoding::kU8:
        vmovdqu(w_, ptr[vals_ + vrow]);
        break;
      case Encoding::kS8:
        vmovdqu(w_, ptr[vals_ + vrow]);
        vpabsb(wabs_, w_);
        break;
      case Encoding::kF32:
        vmovups(w_, ptr[vals_ + vrow]);
        break;
      case Encoding::kF16:
        vcvtph2ps(w_, ptr[vals_ + vrow]);
        break;
      case Encoding::kBF16:
        vpmovzxwd(w_, ptr[vals_ + vrow]);
        vpslld(w_, w_, 16);
        break;
    }
    if (fl) {
      for (int col = 0; col < c.cols; ++col) {
        vfmadd231ps(acc(r, col), w_, ptr[act_ + (col * c.act_stride + u * 8) * 4]);
      }
      continue;
    }
    if (c.paired_scales) {
      vpermps(sw_, idx_, ptr[sc_ + (r * c.scale_stride + u * 2) * 4]);
    } else {
      vbroadcastss(sw_, ptr[sc_ + (r * c.scale_stride + u) * 4]);
    }
    for (int col = 0; col < c.cols; ++col) {
      const Xbyak::Address a = ptr[act_ + col * c.act_stride + u * 32];
      if (c.encoding == Encoding::kS8) {
        vmovdqu(t_, a);
        vpsignb(t_, t_, w_);
        vpmaddubsw(t_, wabs_, t_);
      } else {
        vpmaddubsw(t_, w_, a);
      }
      vpmaddwd(t_, t_, ones_);
      vcvtdq2ps(t_, t_);
      if (c.unit_pairs) {
        vmulps(s_, sw_, ptr[ad_ + (col * c.act_d_stride + d_offset) * 4]);
      } else {
        vbroadcastss(s_, ptr[ad_ + (col * c.act_d_stride + u) * 4]);
        vmulps(s_, s_, sw_);
      }
      vfmadd231ps(acc(r, col), t_, s_);
    }
  }
}

void Avx2Tile::generate() {
  using Xbyak::Xmm;
  using Xbyak::Ymm;
  const TileConf& c = c_;
  const bool fl = is_float(c.encoding);
  assert(c.rows * c.cols <= max_tile(c));

  mov(vals_, ptr[args_ + offsetof(TileArgs, values)]);
  mov(hb_, ptr[args_ + offsetof(TileArgs, hbits)]);
  mov(sc_, ptr[args_ + offsetof(TileArgs, scales)]);
  mov(act_, ptr[args_ + offsetof(TileArgs, act)]);
  mov(ad_, ptr[args_ + offsetof(TileArgs, act_d)]);

  int next = 15;
  auto take = [&] { return Ymm(next--); };
  if (!fl) {
    ones_ = take();
    mov(eax, 0x00010001);
    vmovd(Xmm(ones_.getIdx()), eax);
    vpbroadcastd(ones_, Xmm(ones_.getIdx()));
    if (c.encoding == Encoding::kU4 || c.encoding == Encoding::kU5) {
      m0f_ = take();
      mov(eax, 0x0F0F0F0F);
      vmovd(Xmm(m0f_.getIdx()), eax);
      vpbroadcastd(m0f_, Xmm(m0f_.getIdx()));
    }
    if (c.paired_scales || c.unit_pairs) {
      idx_ = take();
      vmovdqu(idx_, ptr[rip + perm_]);
    }
    if (c.unit_pairs) w2_ = take();
    sw_ = take();
    t_ = take();
    s_ = take();
    if (c.encoding == Encoding::kS8) wabs_ = take();
  }
  w_ = take();
  for (int r = 0; r < c.rows; ++r) {
    for (int col = 0; col < c.cols; ++col) vxorps(acc(r, col), acc(r, col), acc(r, col));
  }

  // Main loop over units (or unit pairs), `unroll` per iteration, then the
  // remainder (and, with pairs, a last unpaired unit).
  const int64_t steps = c.unit_pairs ? c.n_units / 2 : c.n_units;
  const int per = c.unit_pairs ? 2 : 1;  // units per step
  const int64_t iters = steps / c.unroll;
  const int rest = static_cast<int>(steps % c.unroll);
  const int64_t act_unit = 32;  // bytes per unit: 32 int8 or 8 f32
  auto step = [&](int i) {
    if (c.unit_pairs) {
      pair(i);
    } else if (c.encoding == Encoding::kS8 && c.s8_symmetric && c.cols == 1) {
      unit_s8_decode(i);
    } else {
      unit(i, 0);
    }
  };
  if (iters > 0) {
    Xbyak::Label loop;
    mov(cnt_, iters);
    L(loop);
    for (int i = 0; i < c.unroll; ++i) step(i);
    add(vals_, c.unroll * per * c.unit_bytes);
    add(act_, c.unroll * per * act_unit);
    if (!fl) {
      if (c.encoding == Encoding::kU5) add(hb_, c.unroll * per * 4);
      add(sc_, c.unroll * per * 4 * (c.paired_scales ? 2 : 1));
      add(ad_, c.unroll * 4 * (c.unit_pairs ? 8 : 1));
    }
    dec(cnt_);
    jnz(loop, T_NEAR);
  }
  for (int i = 0; i < rest; ++i) step(i);
  if (c.unit_pairs && c.n_units % 2 != 0) unit(2 * rest, int64_t{rest} * 8);

  // Correction dot: acc(r, col) += P_w[r][k] * A[col][k], 8 at a time.
  if (!fl && c.correction && c.corr_len > 0) {
    Xbyak::Label loop;
    mov(t0_, ptr[args_ + offsetof(TileArgs, wcorr)]);
    mov(t1_, ptr[args_ + offsetof(TileArgs, act_corr)]);
    mov(cnt_, c.corr_len / 8);
    L(loop);
    for (int r = 0; r < c.rows; ++r) {
      vmovups(w_, ptr[t0_ + r * c.wcorr_stride * 4]);
      for (int col = 0; col < c.cols; ++col) {
        vfmadd231ps(acc(r, col), w_, ptr[t1_ + col * c.act_corr_stride * 4]);
      }
    }
    add(t0_, 32);
    add(t1_, 32);
    dec(cnt_);
    jnz(loop, T_NEAR);
  }

  // Horizontal sums into y[col][r].
  mov(t0_, ptr[args_ + offsetof(TileArgs, y)]);
  const Xmm tmp(w_.getIdx());
  for (int r = 0; r < c.rows; ++r) {
    for (int col = 0; col < c.cols; ++col) {
      const Xmm a(acc(r, col).getIdx());
      vextractf128(tmp, acc(r, col), 1);
      vaddps(a, a, tmp);
      vhaddps(a, a, a);
      vhaddps(a, a, a);
      vmovss(ptr[t0_ + (col * c.y_stride + r) * 4], a);
    }
  }
  vzeroupper();
  ret();

  align(32);
  L(shuf_);  // byte j of the broadcast u32 -> bytes 8j .. 8j+7
  for (int lane = 0; lane < 2; ++lane) {
    for (int j = 0; j < 16; ++j) db(2 * lane + j / 8);
  }
  L(shuf_lo_);  // unit pairs: (u 0..15 | u+1 0..15) from bytes 0-1 | 4-5
  for (int lane = 0; lane < 2; ++lane) {
    for (int j = 0; j < 16; ++j) db(4 * lane + j / 8);
  }
  L(shuf_hi_);  // (u 16..31 | u+1 16..31) from bytes 2-3 | 6-7
  for (int lane = 0; lane < 2; ++lane) {
    for (int j = 0; j < 16; ++j) db(4 * lane + 2 + j / 8);
  }
  L(bitsel_);  // byte j: bit j % 8
  for (int j = 0; j < 32; ++j) db(1 << (j % 8));
  L(c10_);
  for (int j = 0; j < 32; ++j) db(0x10);
  L(perm_);  // lanes 0-3 <- scale 0, lanes 4-7 <- scale 1
  for (int j = 0; j < 8; ++j) dd(j < 4 ? 0 : 1);
}

}  // namespace

int max_tile(const TileConf& conf) {
  if (conf.interleaved) return 8 * max_interleaved_cols(conf);
  return 16 - reserved_registers(conf);
}

std::unique_ptr<Tile> make_avx2_tile(const TileConf& conf) {
  return std::make_unique<Avx2Tile>(conf);
}

}  // namespace strata::kernels::jit
