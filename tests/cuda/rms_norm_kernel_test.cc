// The RMSNorm kernel (worker/cuda/kernels/rms_norm_source.h), compiled with
// NVRTC for the device and launched through cudart alone
// (cudaLibraryLoadData, CUDA 12+; no libcuda link), against the CPU
// reference (kernels/cpu/reference/ops/elementwise.h) on ragged widths.
// Bound: |gpu - cpu| <= 2e-6 * max(1, |cpu|) per element (float sums of
// squares against the reference's double, and rsqrtf's 2 ulp).
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "tests/cuda/cuda_test_util.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/nvrtc_compiler.h"

namespace strata::worker {
namespace {

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

TEST(CudaKernel, RmsNormMatchesCpuReference) {
  STRATA_REQUIRE_CUDA_DEVICE(device);
  CUDA_OK(cudaSetDevice(device.ordinal));
  NvrtcCompiler compiler({.cache_dir = "-"});
  NvrtcTarget target{.device_name = device.name,
                     .cc_major = device.cc_major,
                     .cc_minor = device.cc_minor,
                     .driver_version = cuda_driver_version()};
  const std::vector<std::string> options = {
      "-DTHREADS=" + std::to_string(cuda_kernels::kRmsNormThreads)};
  auto ptx = compiler.compile(target, "rms_norm.cu",
                              cuda_kernels::kRmsNormSource, options);
  ASSERT_TRUE(ptx.ok()) << ptx.status();

  cudaLibrary_t library = nullptr;
  CUDA_OK(cudaLibraryLoadData(&library, ptx->ptx.data(), nullptr, nullptr, 0,
                              nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  CUDA_OK(cudaLibraryGetKernel(&kernel, library, cuda_kernels::kRmsNormEntry));

  ThreadPool pool(1);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int dim : {1, 7, 31, 255, 576, 1000, 4097}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int rows = 5;
    const float eps = 1e-5f;
    std::vector<float> x(static_cast<size_t>(rows) * dim), w(dim);
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    std::vector<float> want(x.size()), got(x.size());
    reference::ops::rms_norm(x.data(), w.data(), rows, dim, eps, want.data(),
                             pool);

    float *dx = nullptr, *dw = nullptr, *dy = nullptr;
    CUDA_OK(cudaMalloc(&dx, x.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&dw, w.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&dy, x.size() * sizeof(float)));
    CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dw, w.data(), w.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    int dim_arg = dim;
    float eps_arg = eps;
    void* args[] = {&dx, &dw, &dy, &dim_arg, &eps_arg};
    CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(rows),
                             dim3(cuda_kernels::kRmsNormThreads), args, 0,
                             nullptr));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(got.data(), dy, got.size() * sizeof(float),
                       cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dw));
    CUDA_OK(cudaFree(dy));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i])))
          << "element " << i;
    }
  }
  CUDA_OK(cudaLibraryUnload(library));
}

}  // namespace
}  // namespace strata::worker
