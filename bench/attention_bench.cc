// Throughput of the vectorised attention (kernels/cpu/simd/attention.h) on
// a causal prefill of --tokens query rows from position 0, and on one decode
// step at each --ctx position: milliseconds per call and GMAC/s, counting
// the q·k and p·v multiply-adds the step needs (n_head × keys attended ×
// (head_dim_k + head_dim_v)). The cache is f16 (llama.cpp's default) or f32.
// Defaults are SmolLM2-135M's shape (9 heads, 3 KV heads, head_dim 64).
//
//   build/bench/attention_bench [-t 2] [--tokens 512] [--ctx 64,512,2048]
//                               [--heads 9] [--kv-heads 3] [--head-dim 64]
//                               [--kv-type f16] [--ms 300] [--no-decode]
//                               [--isa avx2|avx512|avx512vnni]
// --isa picks the tiles' vectors (8 or 16 lanes; default: the best this CPU
// runs, as the cpu backend picks). --caches N runs each decode step over N
// caches of their own in turn and reports the time per cache: with N
// sequences x layers, as a batched decode step visits them, the caches do
// not fit the chip's caches and come from memory (-t 1: one thread a
// cache, as the cpu backend runs a batch's decode rows).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/parse_flags.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/reference/fp16.h"
#include "kernels/cpu/simd/attention.h"

namespace {

using namespace strata;
using kernels::AttentionParams;
using kernels::KvView;

// Best time of one call in ms over batches for about `ms` milliseconds.
template <typename Fn>
double best_ms(double ms, const Fn& fn) {
  fn();  // warm-up
  double best = 1e30, spent = 0;
  while (spent < ms) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prefill and decode throughput of the vectorised attention"};
  int threads = 2, tokens = 512, heads = 9, kv_heads = 3, head_dim = 64;
  double ms = 300;
  std::vector<int> ctx = {64, 512, 2048};
  std::string kv_type = "f16";
  std::string isa_flag;
  int n_caches = 1;
  app.add_option("-t,--threads", threads, "threads")->check(CLI::Range(1, 256));
  app.add_option("--tokens", tokens, "prefill query rows (0: no prefill)")
      ->check(CLI::Range(0, 16384));
  bool no_decode = false;
  app.add_flag("--no-decode", no_decode, "time the prefill only");
  app.add_option("--ctx", ctx, "decode steps at these positions")
      ->delimiter(',')
      ->check(CLI::Range(1, 65536));
  app.add_option("--heads", heads, "query heads")->check(CLI::Range(1, 256));
  app.add_option("--kv-heads", kv_heads, "KV heads (divides --heads)")->check(CLI::Range(1, 256));
  app.add_option("--head-dim", head_dim, "head_dim (a multiple of 8)")->check(CLI::Range(8, 1024));
  app.add_option("--kv-type", kv_type, "cache type")->check(CLI::IsMember({"f16", "f32"}));
  app.add_option("--ms", ms, "time per measurement (best of calls)");
  app.add_option("--caches", n_caches, "decode over this many caches in turn (1)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--isa", isa_flag, "ISA tier: avx2, avx512 or avx512vnni (default: the CPU's best)");
  if (const std::optional<int> code = strata::bench::parse_flags(app, argc, argv)) return *code;

  const absl::StatusOr<kernels::IsaTier> isa = kernels::select_isa(isa_flag);
  if (!isa.ok()) {
    std::fprintf(stderr, "%s\n", std::string(isa.status().message()).c_str());
    return 2;
  }
  AttentionParams p;
  p.n_head = heads;
  p.n_head_kv = kv_heads;
  p.head_dim_k = p.head_dim_v = head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (heads % kv_heads != 0 || !kernels::simd::attention_supported(p)) {
    std::fprintf(stderr, "this shape or CPU is not supported by the vectorised attention\n");
    return 2;
  }
  const int max_kv = std::max(tokens, *std::max_element(ctx.begin(), ctx.end()));
  const int64_t row = int64_t{kv_heads} * head_dim;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(max_kv * row)), v(k.size());
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  reference::f32_to_f16_row(k.data(), k16.data(), static_cast<int64_t>(k.size()));
  reference::f32_to_f16_row(v.data(), v16.data(), static_cast<int64_t>(v.size()));
  const bool f16 = kv_type == "f16";
  KvView kv;
  kv.type = f16 ? GgmlType::kF16 : GgmlType::kF32;
  kv.k = f16 ? static_cast<const void*>(k16.data()) : k.data();
  kv.v = f16 ? static_cast<const void*>(v16.data()) : v.data();
  // Decode caches 1..n_caches-1: copies of the first, each its own memory.
  const size_t cache_bytes = f16 ? k16.size() * 2 : k.size() * 4;
  std::vector<std::vector<char>> more(static_cast<size_t>(n_caches - 1) * 2);
  std::vector<KvView> caches = {kv};
  for (int c = 1; c < n_caches; ++c) {
    std::vector<char>& kc = more[2 * (c - 1)];
    std::vector<char>& vc = more[2 * (c - 1) + 1];
    kc.resize(cache_bytes);
    vc.resize(cache_bytes);
    if (getenv("THPX")) {
      for (auto* b : {&kc, &vc}) {
        uintptr_t a = (reinterpret_cast<uintptr_t>(b->data()) + 4095) & ~uintptr_t{4095};
        madvise(reinterpret_cast<void*>(a), cache_bytes - 8192, MADV_HUGEPAGE);
      }
    }
    std::memcpy(kc.data(), kv.k, cache_bytes);
    std::memcpy(vc.data(), kv.v, cache_bytes);
    KvView x = kv;
    x.k = kc.data();
    x.v = vc.data();
    caches.push_back(x);
  }

  ThreadPool pool(threads);
  kernels::simd::AttentionBuffers buffers(max_kv, p, threads, *isa);
  std::printf("tiles: %s (%s)\n", kernels::isa_name(*isa), buffers.wide() ? "16 lanes" : "8 lanes");
  const int64_t q_rows = std::max(tokens, 1);
  std::vector<float> q(static_cast<size_t>(q_rows * heads * head_dim));
  for (float& x : q) x = dist(rng);
  std::vector<float> out(q.size());
  std::vector<int32_t> pos(static_cast<size_t>(q_rows));

  std::printf("%-8s %7s %7s %3s %10s %8s\n", "step", "tokens", "keys", "t", "ms/call", "GMAC/s");
  auto report = [&](const char* step, int n_tok, int64_t keys_sum, int keys) {
    const double t = best_ms(ms, [&] {
      kernels::simd::attention(q.data(), pos.data(), n_tok, kv, p, out.data(), buffers, pool);
    });
    const double macs = static_cast<double>(keys_sum) * heads * 2 * head_dim;
    std::printf("%-8s %7d %7d %3d %10.3f %8.2f\n", step, n_tok, keys, threads, t,
                macs / (t * 1e6));
  };
  if (tokens > 0) {
    for (int i = 0; i < tokens; ++i) pos[i] = i;
    kv.n_kv = tokens;
    report("prefill", tokens, int64_t{tokens} * (tokens + 1) / 2, tokens);
  }
  for (int c : no_decode ? std::vector<int>{} : ctx) {
    pos[0] = c - 1;
    kv.n_kv = c;
    if (n_caches == 1) {
      report("decode", 1, c, c);
      continue;
    }
    for (KvView& x : caches) x.n_kv = c;
    const double t = best_ms(ms, [&] {
                       for (const KvView& x : caches) {
                         kernels::simd::attention(q.data(), pos.data(), 1, x, p, out.data(),
                                                  buffers, pool);
                       }
                     }) /
                     n_caches;
    std::printf("%-8s %7d %7d %3d %10.4f %8.2f  (per cache, %d caches)\n", "decode", 1, c,
                threads, t, double(c) * heads * 2 * head_dim / (t * 1e6), n_caches);
  }
  return 0;
}
