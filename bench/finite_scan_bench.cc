// worker::first_not_finite over a last stage's logits (the check every
// decode step makes before sampling): Gemma 3's 262,144 and SmolLM2's
// 49,152 floats, all finite (the whole buffer is read).
//
//   ninja -C build bench/bench_finite_scan && build/bench/bench_finite_scan
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/finite_scan.h"

namespace {

void BM_FirstNotFinite(benchmark::State& state) {
  std::vector<float> logits(static_cast<size_t>(state.range(0)), 1.5f);
  for (auto _ : state) {
    benchmark::DoNotOptimize(strata::worker::first_not_finite(logits.data(),
                                                              state.range(0)));
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * int64_t{sizeof(float)});
}
BENCHMARK(BM_FirstNotFinite)->Arg(49152)->Arg(262144)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
