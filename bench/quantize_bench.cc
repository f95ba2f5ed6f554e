// The activation quantizer of the generated matmuls (prepare_activations)
// for one 512-row prefill input, on the VNNI tier's layout (Q8_0 / Q8_1
// rows 16 blocks at a time on AVX-512) and on the AVX2 tier's (a block at
// a time), in the same process: Google Benchmark interleaves nothing, so
// run it with repetitions and compare the two rows' medians.
// SmolLM2's widths: 576 (the q|k|v, gate|up and output projections' input)
// and 1536 (ffn_down's).
//
//   ninja -C build bench/bench_quantize
//   build/bench/bench_quantize --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/activations.h"
#include "kernels/cpu/jit/packed_weights.h"

namespace {

using strata::GgmlType;
using strata::ThreadPool;
using strata::kernels::IsaTier;
namespace jit = strata::kernels::jit;

void BM_Quantize(benchmark::State& state, GgmlType type, IsaTier tier) {
  if (!strata::kernels::cpu_has(tier)) {
    state.SkipWithError("this CPU lacks the tier");
    return;
  }
  const int64_t n_in = state.range(0), n_rows = 512;
  const jit::PackedLayout l = *jit::packed_layout(type, n_in, 16, tier);
  std::vector<float> x(static_cast<size_t>(n_rows * n_in));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  jit::ActivationBuffers buf(n_rows, n_in);
  ThreadPool pool(1);
  for (auto _ : state) {
    jit::prepare_activations(l, x.data(), n_rows, buf, pool);
    benchmark::DoNotOptimize(buf.q());
  }
  state.SetItemsProcessed(state.iterations() * n_rows * n_in);
}
BENCHMARK_CAPTURE(BM_Quantize, q4_0_avx2, GgmlType::kQ4_0, IsaTier::kAvx2)
    ->Arg(576)->Arg(1536)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Quantize, q4_0_avx512vnni, GgmlType::kQ4_0, IsaTier::kAvx512Vnni)
    ->Arg(576)->Arg(1536)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
