// isa_throughput: how many instructions per core cycle this machine retires
// for the instruction mixes at the heart of the generated matmul and
// attention kernels, and so the most multiply-adds per cycle each mix can
// give. It bounds the kernels from above: bench/matmul_bench's GMAC/s
// divided by the clock printed here, against the ceiling of the kernel's
// mix, is how much of the machine a kernel uses.
//
//   build/bench/isa_throughput [--iters 50000000] [--reps 5]
//
// Each mix is a loop generated with Xbyak whose body is the mix, registers
// only (no loads, so memory does not enter), independent accumulators (no
// dependency chain longer than one body). The clock comes from a chain of
// dependent 64-bit adds (one cycle each on every x86 core of the last
// decade): cycles = seconds * that rate. Best of --reps runs.
//
// Mixes (AVX2; ymm registers):
//   clock       4 dependent `add`s per iteration (calibration)
//   s8 body     the Q8_0 kernel per 4 weight bytes x 8 rows x 4 columns:
//               vpabsb, then per column vpsignb, vpmaddubsw, vpmaddwd,
//               vpaddd (128 multiply-adds)
//   s16 body    the same products with int16 operands: 2 vpmovsxbw, then
//               per column 2 x (vpmaddwd, vpaddd) (128 multiply-adds)
//   s8 + bcast  the s8 body with each column's vpbroadcastd from memory
//   sm8 + bcast the same products from weights stored as sign and
//               magnitude, without vpsignb / vpabsb (4 and 5 columns)
//   u4 body     the 4-bit kernel per 32 weight bytes x 4 columns: vpsrlw,
//               2 vpand, then per column and nibble half vpmaddubsw and
//               vpaddw (256 multiply-adds)
//   n8 + bcast  Q8_0 stored as w + 128 and multiplied as two nibbles (w +
//               128 = 16 h + l): vpand, vpsrlw, vpand per weight vector,
//               then per column one broadcast feeding vpmaddubsw against l
//               and against h, each summed with vpaddw (3 and 4 columns)
//   n8 + mem    the same with the activations stored pre-broadcast and
//               read as vpmaddubsw's memory operand (4 and 5 columns)
//   s8 + mem    the s8 body with vpsignb's second operand from memory
//   u4 + bcast  the u4 body with each column's broadcasts from memory
//   fma         12 vfmadd231ps on 12 accumulators (96 multiply-adds)
//   pairs       4 vpmaddubsw interleaved with 4 of vpmaddwd, vfmadd231ps,
//               vpsignb, vpbroadcastd (from memory) or vpaddw: which
//               instructions compete with vpmaddubsw for its pipes
//   single ops  8 independent instances of one instruction: vpmaddubsw,
//               vpmaddwd, vpsignb, vpaddw, vpxor, vpabsb, vpand,
//               vfmadd231ps, vcvtph2ps
//
// Mixes of the AVX-512 VNNI kernels (run only where the CPU has the tier):
//   vnni u8     per 4 weight bytes x 8 rows, 8 columns of vpdpbusd with
//               the activations as an embedded {1to8} broadcast from
//               memory (256 multiply-adds): Q8_0 (as w + 128) and MXFP4
//   vnni u4     per 32 weight bytes: vpsrlw, 2 vpand, then 8 columns x 2
//               vpdpbusd with broadcasts (512 multiply-adds)
//   vpdpbusd x8 8 independent vpdpbusd, registers only (x16: 16; bcast
//               x16: each with an embedded broadcast from memory)
//   fma zmm     16 zmm FMAs, registers only or with a broadcast operand
//   vnni u4 zmm paired  the u4 mix for two row groups, each broadcast
//               feeding two vpdpbusd (the VNNI prefill tiles since
//               session 21)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/parse_flags.h"
#include "kernels/cpu/isa.h"
#include "xbyak/xbyak.h"

namespace {

using Xbyak::Ymm;
using LoopFn = void (*)(int64_t iters);

// A loop of `iters` iterations of body(); returns the function.
class Loop : public Xbyak::CodeGenerator {
 public:
  explicit Loop(const std::function<void(Loop&)>& body) : Xbyak::CodeGenerator(8192) {
    for (int i = 0; i < 16; ++i) vpxor(Ymm(i), Ymm(i), Ymm(i));
    Xbyak::Label top;
    mov(rcx, rdi);
    L(top);
    body(*this);
    dec(rcx);
    jnz(top, T_NEAR);
    vzeroupper();
    ret();
    ready();
  }
  LoopFn fn() const { return getCode<LoopFn>(); }
};

struct Mix {
  std::string name;
  int instructions;    // per iteration, loop control excluded
  int macs;            // multiply-adds per iteration (0: not a dot mix)
  std::function<void(Loop&)> body;
  bool vnni = false;   // needs AVX-512 VNNI + VL
};

double seconds_of(LoopFn f, int64_t iters, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f(iters);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// 256 bytes the memory-operand mixes read (always in L1).
const uint8_t* scratch() {
  alignas(64) static uint8_t bytes[256] = {};
  return bytes;
}

std::vector<Mix> mixes() {
  std::vector<Mix> m;
  // Weight register ymm14, activations ymm8, constants ymm15 (ones),
  // |w| ymm13; accumulators ymm0..ymm7; temporaries ymm9..ymm12.
  m.push_back({"s8 body (Q8_0)", 17, 128, [](Loop& g) {
    g.vpabsb(Ymm(13), Ymm(14));
    for (int c = 0; c < 4; ++c) {
      const Ymm t(9 + c);
      g.vpsignb(t, Ymm(8), Ymm(14));
      g.vpmaddubsw(t, Ymm(13), t);
      g.vpmaddwd(t, t, Ymm(15));
      g.vpaddd(Ymm(c), Ymm(c), t);
    }
  }});
  // The same 128 products widened to int16: weights sign-extended once for
  // all columns, then per column and half vpmaddwd and vpaddd (no
  // vpsignb, no int16 stage).
  m.push_back({"s16 body (Q8_0 widened)", 2 + 16, 128, [](Loop& g) {
    g.vpmovsxbw(Ymm(12), Xbyak::Xmm(14));
    g.vpmovsxbw(Ymm(13), Xbyak::Xmm(11));
    for (int c = 0; c < 4; ++c) {
      g.vpmaddwd(Ymm(9), Ymm(12), Ymm(8));
      g.vpaddd(Ymm(c), Ymm(c), Ymm(9));
      g.vpmaddwd(Ymm(10), Ymm(13), Ymm(8));
      g.vpaddd(Ymm(4 + c), Ymm(4 + c), Ymm(10));
    }
  }});
  // Column c of a body whose activations are broadcast from memory, as the
  // kernels load them: vpbroadcastd, `sign` (the activation's sign set
  // from the weight's), vpmaddubsw against |w| (ymm13), vpmaddwd, vpaddd.
  auto column = [](Loop& g, int c, void (*sign)(Loop&, const Ymm&)) {
    const Ymm t(9 + c % 2);
    g.vpbroadcastd(t, g.ptr[g.rdx + 4 * c]);
    sign(g, t);
    g.vpmaddubsw(t, Ymm(13), t);
    g.vpmaddwd(t, t, Ymm(15));
    g.vpaddd(Ymm(c), Ymm(c), t);
  };
  m.push_back({"s8 body + bcast", 21, 128, [column](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    g.vpabsb(Ymm(13), Ymm(14));
    for (int c = 0; c < 4; ++c) {
      column(g, c, [](Loop& l, const Ymm& t) { l.vpsignb(t, t, Ymm(14)); });
    }
  }});
  // Q8_0 stored as sign and magnitude (b = |w| | sign << 7), which drops
  // vpsignb and vpabsb: m = (b < 0) and |w| = b & 0x7F, the activations'
  // sign flipped by xor, |w| (a ^ m) = w a - |w| [w < 0], that correction
  // summed once per weight vector (vpmaddubsw(|w|, m), vpaddw) for all
  // columns. 4 and 5 columns, broadcasts from memory as above.
  for (int cols : {4, 5}) {
    m.push_back({"sm8 + bcast " + std::to_string(cols), 4 + 5 * cols, 32 * cols,
                 [cols, column](Loop& g) {
      g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
      g.vpcmpgtb(Ymm(12), Ymm(6), Ymm(14));  // ymm6 stays 0
      g.vpand(Ymm(13), Ymm(14), Ymm(15));
      g.vpmaddubsw(Ymm(10), Ymm(13), Ymm(12));
      g.vpaddw(Ymm(7), Ymm(7), Ymm(10));
      for (int c = 0; c < cols; ++c) {
        column(g, c, [](Loop& l, const Ymm& t) { l.vpxor(t, t, Ymm(12)); });
      }
    }});
  }
  // Q8_0 stored as w + 128 and multiplied as two nibbles (w + 128 = 16 h +
  // l): per 4 weight bytes x 8 rows, vpand, vpsrlw, vpand, then per column
  // one vpbroadcastd from memory feeding vpmaddubsw against l and against h,
  // each summed in int16 (vpaddw); 3 and 4 columns (32 * cols products).
  // The weight vector ymm14 cut into low (ymm12) and high (ymm13) nibbles;
  // rdx at the scratch bytes.
  auto nibbles = [](Loop& g) {
      g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
      g.vpand(Ymm(12), Ymm(14), Ymm(15));
      g.vpsrlw(Ymm(13), Ymm(14), 4);
      g.vpand(Ymm(13), Ymm(13), Ymm(15));
  };
  for (int cols : {3, 4}) {
    m.push_back({"n8 + bcast " + std::to_string(cols), 3 + 5 * cols, 32 * cols, [cols, nibbles](Loop& g) {
      nibbles(g);
      for (int c = 0; c < cols; ++c) {
        const Ymm t(9 + c % 2), t2(11);
        g.vpbroadcastd(t, g.ptr[g.rdx + 4 * c]);
        g.vpmaddubsw(t2, Ymm(12), t);
        g.vpaddw(Ymm(c), Ymm(c), t2);
        g.vpmaddubsw(t, Ymm(13), t);
        g.vpaddw(Ymm(4 + c), Ymm(4 + c), t);
      }
    }});
  }
  // The same with the activations stored pre-broadcast (each 4 bytes
  // repeated 8 times), read as vpmaddubsw's memory operand: no broadcast.
  for (int cols : {4, 5}) {
    m.push_back({"n8 + mem " + std::to_string(cols), 3 + 4 * cols, 32 * cols, [cols, nibbles](Loop& g) {
      nibbles(g);
      for (int c = 0; c < cols; ++c) {
        const Ymm t(9 + c % 2), t2(11);
        g.vpmaddubsw(t2, Ymm(12), g.ptr[g.rdx + 32 * c]);
        g.vpaddw(Ymm(c), Ymm(c), t2);
        g.vpmaddubsw(t, Ymm(13), g.ptr[g.rdx + 32 * c]);
        g.vpaddw(Ymm(4 + c), Ymm(4 + c), t);
      }
    }});
  }
  m.push_back({"s8 + mem 4", 1 + 4 * 4, 128, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    g.vpabsb(Ymm(13), Ymm(14));
    for (int c = 0; c < 4; ++c) {
      const Ymm t(9 + c % 2);
      g.vpsignb(t, Ymm(14), g.ptr[g.rdx + 32 * c]);
      g.vpmaddubsw(t, Ymm(13), t);
      g.vpmaddwd(t, t, Ymm(15));
      g.vpaddd(Ymm(c), Ymm(c), t);
    }
  }});
  m.push_back({"u4 + bcast 4", 3 + 6 * 4, 256, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    g.vpsrlw(Ymm(13), Ymm(14), 4);
    g.vpand(Ymm(12), Ymm(14), Ymm(15));
    g.vpand(Ymm(13), Ymm(13), Ymm(15));
    for (int c = 0; c < 4; ++c) {
      g.vpbroadcastd(Ymm(9), g.ptr[g.rdx + 4 * c]);
      g.vpmaddubsw(Ymm(9), Ymm(12), Ymm(9));
      g.vpaddw(Ymm(c), Ymm(c), Ymm(9));
      g.vpbroadcastd(Ymm(10), g.ptr[g.rdx + 64 + 4 * c]);
      g.vpmaddubsw(Ymm(10), Ymm(13), Ymm(10));
      g.vpaddw(Ymm(4 + c), Ymm(4 + c), Ymm(10));
    }
  }});
  m.push_back({"u4 body (Q4_0)", 3 + 16, 256, [](Loop& g) {
    g.vpsrlw(Ymm(13), Ymm(14), 4);
    g.vpand(Ymm(12), Ymm(14), Ymm(15));
    g.vpand(Ymm(13), Ymm(13), Ymm(15));
    for (int c = 0; c < 4; ++c) {
      g.vpmaddubsw(Ymm(9), Ymm(12), Ymm(8));
      g.vpaddw(Ymm(c), Ymm(c), Ymm(9));
      g.vpmaddubsw(Ymm(10), Ymm(13), Ymm(8));
      g.vpaddw(Ymm(4 + c), Ymm(4 + c), Ymm(10));
    }
  }});
  m.push_back({"fma x12", 12, 96, [](Loop& g) {
    for (int a = 0; a < 12; ++a) g.vfmadd231ps(Ymm(a), Ymm(12 + a % 3), Ymm(15));
  }});
  auto single = [&](const std::string& name, const std::function<void(Loop&, const Ymm&)>& op) {
    m.push_back({name + " x8", 8, 0, [op](Loop& g) {
      for (int a = 0; a < 8; ++a) op(g, Ymm(a));
    }});
  };
  // Pairs: 4 vpmaddubsw interleaved with 4 of another instruction, all
  // independent. 2 per cycle means the other instruction issues on the same
  // two pipes as vpmaddubsw; 4 per cycle, on others.
  auto pair = [&](const std::string& name, void (*op)(Loop&, const Ymm&)) {
    m.push_back({"vpmaddubsw+" + name, 8, 0, [op](Loop& g) {
      g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
      for (int a = 0; a < 4; ++a) {
        g.vpmaddubsw(Ymm(a), Ymm(13), Ymm(8));
        op(g, Ymm(4 + a));
      }
    }});
  };
  pair("vpmaddwd", [](Loop& g, const Ymm& d) { g.vpmaddwd(d, Ymm(13), Ymm(15)); });
  pair("vfmadd231ps", [](Loop& g, const Ymm& d) { g.vfmadd231ps(d, Ymm(13), Ymm(15)); });
  pair("vpsignb", [](Loop& g, const Ymm& d) { g.vpsignb(d, Ymm(8), Ymm(14)); });
  pair("vpbroadcastd", [](Loop& g, const Ymm& d) { g.vpbroadcastd(d, g.ptr[g.rdx]); });
  pair("vpaddw", [](Loop& g, const Ymm& d) { g.vpaddw(d, d, Ymm(8)); });
  single("vpmaddubsw", [](Loop& g, const Ymm& d) { g.vpmaddubsw(d, Ymm(13), Ymm(8)); });
  single("vpmaddwd", [](Loop& g, const Ymm& d) { g.vpmaddwd(d, Ymm(13), Ymm(15)); });
  single("vpsignb", [](Loop& g, const Ymm& d) { g.vpsignb(d, Ymm(8), Ymm(14)); });
  single("vpaddw", [](Loop& g, const Ymm& d) { g.vpaddw(d, d, Ymm(8)); });
  single("vpxor", [](Loop& g, const Ymm& d) { g.vpxor(d, Ymm(14), Ymm(15)); });
  single("vpabsb", [](Loop& g, const Ymm& d) { g.vpabsb(d, Ymm(14)); });
  single("vpand", [](Loop& g, const Ymm& d) { g.vpand(d, Ymm(14), Ymm(15)); });
  single("vfmadd231ps", [](Loop& g, const Ymm& d) { g.vfmadd231ps(d, Ymm(13), Ymm(15)); });
  single("vcvtph2ps", [](Loop& g, const Ymm& d) { g.vcvtph2ps(d, Xbyak::Xmm(14)); });
  // VNNI: accumulators ymm0..7, weights ymm12, ymm13 (ymm14 the packed
  // nibbles), activations broadcast from scratch().
  m.push_back({"vnni u8 8 cols", 8, 256, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    for (int c = 0; c < 8; ++c) {
      g.vpdpbusd(Ymm(c), Ymm(14), g.ptr_b[g.rdx + 4 * c], Xbyak::EvexEncoding);
    }
  }, true});
  m.push_back({"vnni u4 8 cols", 3 + 16, 512, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    g.vpsrlw(Ymm(13), Ymm(14), 4);
    g.vpand(Ymm(12), Ymm(14), Ymm(15));
    g.vpand(Ymm(13), Ymm(13), Ymm(15));
    for (int c = 0; c < 8; ++c) {
      g.vpdpbusd(Ymm(c), Ymm(12), g.ptr_b[g.rdx + 4 * c], Xbyak::EvexEncoding);
      g.vpdpbusd(Ymm(c), Ymm(13), g.ptr_b[g.rdx + 64 + 4 * c], Xbyak::EvexEncoding);
    }
  }, true});
  m.push_back({"vpdpbusd x8", 8, 0, [](Loop& g) {
    for (int a = 0; a < 8; ++a) g.vpdpbusd(Ymm(a), Ymm(13), Ymm(14), Xbyak::EvexEncoding);
  }, true});
  // The same on 512-bit registers (16 rows of 4 bytes per vector): a core
  // with a 256-bit datapath (Zen 4) runs each as two halves, one with a
  // 512-bit one (Zen 5) as one.
  using Xbyak::Zmm;
  m.push_back({"vpdpbusd zmm x8", 8, 0, [](Loop& g) {
    for (int a = 0; a < 8; ++a) g.vpdpbusd(Zmm(a), Zmm(13), Zmm(14));
  }, true});
  m.push_back({"vnni u8 zmm 8 cols", 8, 512, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    for (int c = 0; c < 8; ++c) g.vpdpbusd(Zmm(c), Zmm(14), g.ptr_b[g.rdx + 4 * c]);
  }, true});
  m.push_back({"vnni u4 zmm 8 cols", 3 + 16, 1024, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    g.vpsrlw(Zmm(13), Zmm(14), 4);
    g.vpandd(Zmm(12), Zmm(14), Zmm(15));
    g.vpandd(Zmm(13), Zmm(13), Zmm(15));
    for (int c = 0; c < 8; ++c) {
      g.vpdpbusd(Zmm(c), Zmm(12), g.ptr_b[g.rdx + 4 * c]);
      g.vpdpbusd(Zmm(c), Zmm(13), g.ptr_b[g.rdx + 64 + 4 * c]);
    }
  }, true});
  // 16 accumulators: "x8" above updates each of 8 once per iteration, so
  // the vpdpbusd latency (about 5 cycles) caps it at 8 per 5 cycles; a
  // core that issues two a cycle (Ice Lake) shows it only here.
  m.push_back({"vpdpbusd zmm x16", 16, 0, [](Loop& g) {
    for (int a = 0; a < 16; ++a) g.vpdpbusd(Zmm(a), Zmm(29), Zmm(30));
  }, true});
  // The same with each activation operand an embedded 4-byte broadcast
  // from memory, as the unpaired VNNI tiles do; and 16 zmm FMAs with a
  // broadcast memory operand (the attention's q): on Ice Lake a zmm
  // instruction with a memory operand issues about once a cycle.
  m.push_back({"vpdpbusd zmm bcast x16", 16, 0, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    for (int a = 0; a < 16; ++a) g.vpdpbusd(Zmm(a), Zmm(29), g.ptr_b[g.rdx + 4 * a]);
  }, true});
  m.push_back({"fma zmm bcast x16", 16, 256, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    for (int a = 0; a < 16; ++a) g.vfmadd231ps(Zmm(a), Zmm(29), g.ptr_b[g.rdx + 4 * a]);
  }, true});
  m.push_back({"fma zmm x16", 16, 256, [](Loop& g) {
    for (int a = 0; a < 16; ++a) g.vfmadd231ps(Zmm(a), Zmm(29), Zmm(30));
  }, true});
  // The paired tile (TileConf::pair): per 32 weight bytes of each of two
  // 16-row groups vpsrlw and 2 vpand, then per column and nibble half one
  // vpbroadcastd from memory feeding both groups' vpdpbusd (8 columns x 2
  // halves x 2 groups: 32 vpdpbusd, 2048 multiply-adds), where "u4 zmm"
  // above gives each vpdpbusd its own embedded broadcast.
  m.push_back({"vnni u4 zmm paired", 6 + 16 + 32, 2048, [](Loop& g) {
    g.mov(g.rdx, reinterpret_cast<size_t>(scratch()));
    for (int s = 0; s < 2; ++s) {
      g.vpsrlw(Zmm(21 + 2 * s), Zmm(24 + s), 4);
      g.vpandd(Zmm(20 + 2 * s), Zmm(24 + s), Zmm(31));
      g.vpandd(Zmm(21 + 2 * s), Zmm(21 + 2 * s), Zmm(31));
    }
    for (int c = 0; c < 8; ++c) {
      for (int h = 0; h < 2; ++h) {
        g.vpbroadcastd(Zmm(26 + h), g.ptr[g.rdx + 64 * h + 4 * c]);
        g.vpdpbusd(Zmm(c), Zmm(20 + h), Zmm(26 + h));
        g.vpdpbusd(Zmm(8 + c), Zmm(22 + h), Zmm(26 + h));
      }
    }
  }, true});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"instructions per cycle of the generated kernels' instruction mixes"};
  int64_t iters = 50'000'000;
  int reps = 5;
  app.add_option("--iters", iters, "loop iterations per run")->check(CLI::Range(1000, 2'000'000'000));
  app.add_option("--reps", reps, "runs per mix (the best counts)")->check(CLI::Range(1, 100));
  if (const std::optional<int> code = strata::bench::parse_flags(app, argc, argv)) return *code;
  if (!strata::kernels::cpu_features().avx2) {
    std::fprintf(stderr, "isa_throughput: this CPU lacks AVX2 + FMA + F16C; nothing to measure\n");
    return 1;
  }

  Loop clock([](Loop& g) {
    for (int i = 0; i < 4; ++i) g.add(g.rax, 1);
  });
  const double ghz = 4.0 * static_cast<double>(iters) / seconds_of(clock.fn(), iters, reps) / 1e9;
  std::printf("core clock (dependent adds): %.2f GHz\n", ghz);
  std::printf("%-18s %8s %14s %12s %14s\n", "mix", "instr", "cycles/iter", "instr/cycle",
              "MAC/cycle");
  const bool vnni = strata::kernels::cpu_has(strata::kernels::IsaTier::kAvx512Vnni);
  for (const Mix& mix : mixes()) {
    if (mix.vnni && !vnni) continue;
    Loop loop(mix.body);
    const double s = seconds_of(loop.fn(), iters, reps);
    const double cycles = s * ghz * 1e9 / static_cast<double>(iters);
    std::printf("%-18s %8d %14.2f %12.2f", mix.name.c_str(), mix.instructions, cycles,
                mix.instructions / cycles);
    if (mix.macs > 0) {
      std::printf(" %14.1f", mix.macs / cycles);
    }
    std::printf("\n");
  }
  return 0;
}
