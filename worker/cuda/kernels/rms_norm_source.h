// NVRTC source of the RMSNorm kernel (worker/cuda/nvrtc_compiler.h compiles
// it at load): y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, one block
// per row, as kernels/cpu/reference/ops/elementwise.h's rms_norm (which sums
// the squares in double; this sums in float per thread, then across the
// block, so results agree to about 1e-6 relative).
//
// Launch: grid (n_rows), block (kRmsNormThreads); arguments
// (const float* x [n_rows][dim], const float* weight [dim],
//  float* y [n_rows][dim], int dim, float eps). y may equal x.
#pragma once

namespace strata::worker::cuda_kernels {

inline constexpr const char* kRmsNormEntry = "strata_rms_norm";
inline constexpr int kRmsNormThreads = 256;  // -DTHREADS, a multiple of 32

inline constexpr const char* kRmsNormSource = R"cuda(
#ifndef THREADS
#define THREADS 256
#endif
extern "C" __global__ void __launch_bounds__(THREADS)
strata_rms_norm(const float* __restrict__ x, const float* __restrict__ weight,
                float* y, int dim, float eps) {
  const float* xr = x + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += xr[i] * xr[i];
  // Warp sums, then the first warp sums the warps'.
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  __shared__ float warp_sums[THREADS / 32];
  __shared__ float scale;
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) scale = rsqrtf(s / (float)dim + eps);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dim; i += THREADS) {
    yr[i] = xr[i] * scale * (weight != nullptr ? weight[i] : 1.0f);
  }
}
)cuda";

}  // namespace strata::worker::cuda_kernels
