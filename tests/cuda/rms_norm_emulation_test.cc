// The RMSNorm kernel's CUDA source (worker/cuda/kernels/rms_norm.cuh) run on
// the CPU (tests/cuda/cuda_emulator.h: a thread a CUDA thread; the block's
// shared sums and barriers as on a device) against the CPU reference
// (kernels/cpu/reference/ops/elementwise.h), with the device test's bound:
// |y - ref| <= 2e-6 max(1, |ref|). Widths below, at and past the block's
// 256 threads; with and without a weight.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "tests/cuda/cuda_emulator.h"

namespace strata::worker::emulation {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
namespace kernels {
using namespace strata::cuda_emulation;
#define THREADS 256
#include "worker/cuda/kernels/rms_norm.cuh"
}  // namespace kernels
#pragma GCC diagnostic pop

namespace {

TEST(CudaRmsNormEmulated, MatchesTheCpuReference) {
  ThreadPool pool(1);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const bool weighted : {true, false}) {
    for (const int dim : {1, 31, 255, 576, 1000}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (weighted ? ", weighted" : ""));
      const int rows = 3;
      const float eps = 1e-5f;
      std::vector<float> x(static_cast<size_t>(rows) * dim), w(static_cast<size_t>(dim), 1.0f);
      for (float& v : x) v = normal(rng);
      if (weighted) {
        for (float& v : w) v = normal(rng);
      }
      std::vector<float> want(x.size()), got(x.size(), std::nanf(""));
      reference::ops::rms_norm(x.data(), w.data(), rows, dim, eps, want.data(), pool);
      cuda_emulation::launch(rows, THREADS, [&] {
        kernels::strata_rms_norm(x.data(), weighted ? w.data() : nullptr, got.data(), dim, eps);
      });
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace strata::worker::emulation
