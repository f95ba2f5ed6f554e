// Time to open and validate a GGUF file (header, metadata, tensor infos, the
// mapping): what every process pays before its first token.
//   bench_gguf_open MODEL.gguf [MODEL2.gguf ...] [--benchmark_* flags]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf_reader.h"

namespace {

void open_model(benchmark::State& state, const std::string& path) {
  for (auto _ : state) {
    auto file = strata::gguf::GgufFile::open(path);
    if (!file.ok()) {
      state.SkipWithError(std::string(file.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(file->get());
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::vector<std::string> paths(argv + 1, argv + argc);
  if (paths.empty()) {
    std::fprintf(stderr, "usage: bench_gguf_open MODEL.gguf...\n");
    return 2;
  }
  for (const std::string& path : paths) {
    std::string name = path.substr(path.find_last_of('/') + 1);
    benchmark::RegisterBenchmark(("open/" + name).c_str(), open_model, path)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
