// RMSNorm: see rms_norm_source.h (the formula, launch and bound). CUDA C++
// for NVRTC; tests/cuda/cuda_emulator.h also runs it on the CPU.
#ifndef THREADS
#define THREADS 256
#endif
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#endif

// 1 / sqrt(mean of squares + eps) of a row from each thread's sum of
// squares (`sum`): warp sums, then the first warp sums the warps'. On every
// thread.
__device__ __forceinline__ float strata_rms_scale(float sum, int dim, float eps) {
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
  return scale;
}

// The residual add and the next RMSNorm in one pass: x += delta, then y =
// RMSNorm(x) * weight; the sums and products of strata_add then
// strata_rms_norm, in the same order (so the same bits). Row blockIdx.x.
__device__ __forceinline__ void strata_add_rms_norm_row(float* x,
                                                        const float* delta,
                                                        const float* __restrict__ weight,
                                                        float* y, int dim,
                                                        float eps) {
  float* xr = x + (long long)blockIdx.x * dim;
  const float* dr = delta + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += THREADS) {
    const float v = xr[i] + dr[i];
    xr[i] = v;
    sum += v * v;
  }
  const float scale = strata_rms_scale(sum, dim, eps);
  for (int i = threadIdx.x; i < dim; i += THREADS) {
    yr[i] = xr[i] * scale * (weight != nullptr ? weight[i] : 1.0f);
  }
}

STRATA_KERNEL strata_add_rms_norm(float* x, const float* delta,
                                  const float* __restrict__ weight, float* y,
                                  int dim, float eps) {
  strata_grid_dependency();
  strata_add_rms_norm_row(x, delta, weight, y, dim, eps);
}

// Row blockIdx.x of y [rows][dim] as int8 rows of `kind` (quantize.cuh),
// once every thread of the block has written it.
__device__ __forceinline__ void strata_quantize_normed_row(const float* y, int dim,
                                                           signed char* q, float* d,
                                                           float* sums, int kind) {
  __syncthreads();  // the row's values, written by the block's threads
  const long long row = blockIdx.x;
  strata_quantize_values(y + row * dim, dim, q + row * dim, d + row * (dim / 32),
                         sums + row * (dim / 32), kind, (int)threadIdx.x >> 5, THREADS / 32,
                         (int)threadIdx.x & 31);
}

// strata_add_rms_norm, then its y as strata_quantize_rows makes it.
STRATA_KERNEL strata_add_rms_norm_quantize(float* x, const float* delta,
                                           const float* __restrict__ weight, float* y, int dim,
                                           float eps, signed char* q, float* d, float* sums,
                                           int kind) {
  strata_grid_dependency();
  strata_add_rms_norm_row(x, delta, weight, y, dim, eps);
  strata_quantize_normed_row(y, dim, q, d, sums, kind);
}

// y may be x (QK-norm and the gemma post-norms run in place): x is not
// __restrict__, or NVRTC may read it through the read-only cache (ld.global.nc),
// which a write to the same address leaves stale.
__device__ __forceinline__ void strata_rms_norm_row(const float* x,
                                                    const float* __restrict__ weight, float* y,
                                                    int dim, float eps) {
  const float* xr = x + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += THREADS) sum += xr[i] * xr[i];
  const float scale = strata_rms_scale(sum, dim, eps);
  for (int i = threadIdx.x; i < dim; i += THREADS) {
    yr[i] = xr[i] * scale * (weight != nullptr ? weight[i] : 1.0f);
  }
}

STRATA_KERNEL strata_rms_norm(const float* x, const float* __restrict__ weight, float* y, int dim,
                              float eps) {
  strata_grid_dependency();
  strata_rms_norm_row(x, weight, y, dim, eps);
}

// strata_rms_norm (y not x here), then its y as strata_quantize_rows makes it.
STRATA_KERNEL strata_rms_norm_quantize(const float* x, const float* __restrict__ weight, float* y,
                                       int dim, float eps, signed char* q, float* d, float* sums,
                                       int kind) {
  strata_grid_dependency();
  strata_rms_norm_row(x, weight, y, dim, eps);
  strata_quantize_normed_row(y, dim, q, d, sums, kind);
}
