#include "kernels/cpu/jit/avx2_generator.h"

#include <cassert>
#include <cstddef>

#include "xbyak/xbyak.h"

namespace strata::kernels::jit {
namespace {

// Registers besides the accumulators: the weight vector.
constexpr int kReserved = 1;

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
  const Xbyak::Reg64 args_ = rdi, vals_ = rsi, act_ = r8, cnt_ = rax, t0_ = r10;

  Xbyak::Ymm acc(int r, int col) const { return Xbyak::Ymm(r * c_.cols + col); }

  void generate();
  // One 8-element unit at offset u (units) from the current pointers.
  void unit(int u);

  const TileConf c_;
  Xbyak::Ymm w_;
};

void Avx2Tile::unit(int u) {
  const TileConf& c = c_;
  for (int r = 0; r < c.rows; ++r) {
    const int64_t vrow = r * c.value_stride + u * c.unit_bytes;
    if (c.prefetch > 0 && u == 0) prefetcht0(ptr[vals_ + vrow + c.prefetch]);
    switch (c.encoding) {
      case Encoding::kF16:
        vcvtph2ps(w_, ptr[vals_ + vrow]);
        break;
      case Encoding::kBF16:
        vpmovzxwd(w_, ptr[vals_ + vrow]);
        vpslld(w_, w_, 16);
        break;
      default:
        vmovups(w_, ptr[vals_ + vrow]);
        break;
    }
    for (int col = 0; col < c.cols; ++col) {
      vfmadd231ps(acc(r, col), w_, ptr[act_ + (col * c.act_stride + u * 8) * 4]);
    }
  }
}

void Avx2Tile::generate() {
  using Xbyak::Xmm;
  const TileConf& c = c_;
  assert(c.rows * c.cols <= max_tile(c));

  mov(vals_, ptr[args_ + offsetof(TileArgs, values)]);
  mov(act_, ptr[args_ + offsetof(TileArgs, act)]);
  w_ = Xbyak::Ymm(15);
  for (int r = 0; r < c.rows; ++r) {
    for (int col = 0; col < c.cols; ++col) vxorps(acc(r, col), acc(r, col), acc(r, col));
  }

  // Main loop over units, `unroll` per iteration, then the remainder.
  const int64_t iters = c.n_units / c.unroll;
  const int rest = static_cast<int>(c.n_units % c.unroll);
  if (iters > 0) {
    Xbyak::Label loop;
    mov(cnt_, iters);
    L(loop);
    for (int i = 0; i < c.unroll; ++i) unit(i);
    add(vals_, c.unroll * c.unit_bytes);
    add(act_, c.unroll * 32);
    dec(cnt_);
    jnz(loop, T_NEAR);
  }
  for (int i = 0; i < rest; ++i) unit(i);

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
}

}  // namespace

int max_tile(const TileConf& conf) {
  if (conf.interleaved) return conf.group * max_interleaved_cols(conf);
  return 16 - kReserved;
}

std::unique_ptr<Tile> make_avx2_tile(const TileConf& conf) {
  return std::make_unique<Avx2Tile>(conf);
}

}  // namespace strata::kernels::jit
