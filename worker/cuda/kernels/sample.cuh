// Sampling on the device (issue 32): the greedy pick, CUDA C++ for NVRTC
// (embedded by cmake/embed_source.cmake; sources.h names the entries);
// tests/cuda/kernels_test.cc runs them against worker/greedy_pick.h's
// first_argmax.
//
//   strata_argmax(const float* logits, int n, int* id)
//   *id = the first index of the largest logit (NaN never the largest; -1
//   when all are NaN), as worker/sampler.cc's greedy pick. Grid (1).
//   strata_argmax_rows(const float* logits, int n, int* ids, int* bad)
//   the same for each row of logits [rows][n], grid (rows), and whether
//   the row holds a NaN or an infinity.
//
// Block (THREADS, a multiple of 32 up to 1024).
#ifndef THREADS
#define THREADS 256
#endif
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#endif

// Whether (v, i) comes before (best, at): larger, or as large and earlier.
__device__ __forceinline__ bool strata_better(float v, int i, float best, int at) {
  if (i < 0) return false;
  if (at < 0) return true;
  return v > best || (v == best && i < at);
}

// The warp's best (value, index) pair, on every lane.
__device__ __forceinline__ void strata_warp_best(float* best, int* at) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, *best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, *at, o);
    if (strata_better(ov, oi, *best, *at)) {
      *best = ov;
      *at = oi;
    }
  }
}

// The block's pick over x[0, n): the first index of the largest value
// (NaN never the largest; -1 when all are NaN), on thread 0.
__device__ __forceinline__ int strata_block_argmax(const float* __restrict__ x, int n) {
  float best = 0.0f;
  int at = -1;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    const float v = x[i];
    if (v == v && strata_better(v, i, best, at)) {  // v == v: not NaN
      best = v;
      at = i;
    }
  }
  strata_warp_best(&best, &at);
  __shared__ float warp_best[32];
  __shared__ int warp_at[32];
  if ((threadIdx.x & 31) == 0) {
    warp_best[threadIdx.x >> 5] = best;
    warp_at[threadIdx.x >> 5] = at;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int warps = (THREADS + 31) / 32;
    best = (int)threadIdx.x < warps ? warp_best[threadIdx.x] : 0.0f;
    at = (int)threadIdx.x < warps ? warp_at[threadIdx.x] : -1;
    strata_warp_best(&best, &at);
  }
  return at;
}

STRATA_KERNEL strata_argmax(const float* __restrict__ logits, int n, int* id) {
  const int at = strata_block_argmax(logits, n);
  if (threadIdx.x == 0) *id = at;
}

// Rows of logits [rows][n], a block each (grid (rows)): ids[r] = row r's
// pick as strata_argmax's, bad[r] = 1 when the row holds a NaN or an
// infinity (0 else: the backend refuses such rows, as it refuses them in
// logits it downloads).
STRATA_KERNEL strata_argmax_rows(const float* __restrict__ logits, int n, int* ids, int* bad) {
  const float* row = logits + (long long)blockIdx.x * n;
  __shared__ int odd;
  if (threadIdx.x == 0) odd = 0;
  __syncthreads();
  int mine = 0;
  for (int i = threadIdx.x; i < n; i += THREADS) mine |= !(fabsf(row[i]) <= 3.402823466e38f);
  if (mine) odd = 1;  // the same value from every writer
  const int at = strata_block_argmax(row, n);  // its barriers order odd's writes
  if (threadIdx.x == 0) {
    ids[blockIdx.x] = at;
    bad[blockIdx.x] = odd;
  }
}
