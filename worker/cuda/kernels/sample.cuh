// Sampling on the device (issue 32): the greedy pick and the top-k
// candidates, CUDA C++ for NVRTC (embedded by cmake/embed_source.cmake;
// sources.h names the entries); tests/cuda/kernels_test.cc runs them
// against worker/head_picks.h's first_argmax and top_candidates.
//
//   strata_argmax(const float* logits, int n, int* id)
//   *id = the first index of the largest logit (NaN never the largest; -1
//   when all are NaN), as worker/sampler.cc's greedy pick. Grid (1).
//   strata_argmax_rows(const float* logits, int n, int* ids, int* bad)
//   the same for each row of logits [rows][n], grid (rows), and whether
//   the row holds a NaN or an infinity.
//   strata_top_k_rows(const float* logits, int n, const int* table,
//                     int* ids, float* values, int* bad)
//   for each row r of logits [rows][n] (grid (rows)): its k = table[2 r]
//   largest (1 <= k <= min(n, STRATA_TOP_K_MAX)), largest first, equal ones
//   by lower index (-0 equal to +0: top_candidates' order), to ids and
//   values from table[2 r + 1] on; bad[r] as strata_argmax_rows'.
//   Radix select of the k-th largest key (4 passes of 8 bits over the row,
//   a shared histogram each), then the keys above it and the lowest indices
//   of those equal to it, then a bitonic sort of the k in shared memory.
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
__device__ __forceinline__ int strata_block_argmax(const float* x, int n) {
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

STRATA_KERNEL strata_argmax(const float* logits, int n, int* id) {
  strata_grid_dependency();
  const int at = strata_block_argmax(logits, n);
  if (threadIdx.x == 0) *id = at;
}

// Rows of logits [rows][n], a block each (grid (rows)): ids[r] = row r's
// pick as strata_argmax's, bad[r] = 1 when the row holds a NaN or an
// infinity (0 else: the backend refuses such rows, as it refuses them in
// logits it downloads).
STRATA_KERNEL strata_argmax_rows(const float* logits, int n, int* ids, int* bad) {
  strata_grid_dependency();
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

#ifndef STRATA_TOP_K_MAX
#define STRATA_TOP_K_MAX 1024  // worker/backend.h kMaxTopK; a power of two
#endif

// A logit's key: larger logit, larger key (the float's sign-magnitude bits
// made an unsigned order); -0 keyed as +0, as the two compare equal.
__device__ __forceinline__ unsigned strata_logit_key(float v) {
  const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

// Whether entry a comes before entry b: a larger key, or as large and a
// lower index.
__device__ __forceinline__ bool strata_top_before(unsigned ka, int ia, unsigned kb, int ib) {
  return ka > kb || (ka == kb && ia < ib);
}

STRATA_KERNEL strata_top_k_rows(const float* logits, int n,
                                const int* table, int* ids,
                                float* values, int* bad) {
  strata_grid_dependency();
  const float* row = logits + (long long)blockIdx.x * n;
  const int k = table[2 * blockIdx.x], out = table[2 * blockIdx.x + 1];
  const int t = (int)threadIdx.x;
  __shared__ unsigned hist[256];
  __shared__ unsigned prefix_s, mask_s;
  __shared__ int need_s, equal_s, count_s, taken_s, odd;
  __shared__ unsigned keys[STRATA_TOP_K_MAX];
  __shared__ int index[STRATA_TOP_K_MAX];
  __shared__ int flags[THREADS];
  if (t == 0) {
    prefix_s = 0u;
    mask_s = 0u;
    need_s = k;
    count_s = 0;
    taken_s = 0;
    odd = 0;
  }
  __syncthreads();  // odd is 0 before any thread may set it
  int mine = 0;
  for (int i = t; i < n; i += THREADS) mine |= !(fabsf(row[i]) <= 3.402823466e38f);
  if (mine) odd = 1;  // the same value from every writer
  __syncthreads();
  // The k-th largest key, 8 bits a pass from the top: need_s is how many
  // of the keys sharing the prefix found so far are still to be taken.
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = t; b < 256; b += THREADS) hist[b] = 0u;
    __syncthreads();
    const unsigned prefix = prefix_s, mask = mask_s;
    for (int i = t; i < n; i += THREADS) {
      const unsigned key = strata_logit_key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (t == 0) {
      int need = need_s, b = 255;
      for (; b > 0 && (int)hist[b] < need; --b) need -= (int)hist[b];
      prefix_s = prefix | ((unsigned)b << shift);
      mask_s = mask | (255u << shift);
      need_s = need;
      equal_s = (int)hist[b];  // after the last pass: the keys equal to it
    }
    __syncthreads();
  }
  const unsigned kth = prefix_s;
  const int take_equal = need_s, equal = equal_s;
  // The keys above the k-th (and all equal to it when all are taken), in
  // any order: the sort below orders them.
  for (int i = t; i < n; i += THREADS) {
    const unsigned key = strata_logit_key(row[i]);
    if (key > kth || (key == kth && take_equal == equal)) {
      const int slot = atomicAdd(&count_s, 1);
      keys[slot] = key;
      index[slot] = i;
    }
  }
  __syncthreads();
  if (take_equal < equal) {
    // Ties across the cut: the lowest indices of the keys equal to the
    // k-th, a chunk of THREADS at a time in index order (a block scan).
    const int first = k - take_equal;
    for (int base = 0; base < n; base += THREADS) {
      if (taken_s >= take_equal) break;  // the same for every thread
      const int i = base + t;
      const int f = i < n && strata_logit_key(row[i]) == kth ? 1 : 0;
      flags[t] = f;
      __syncthreads();
      for (int o = 1; o < THREADS; o <<= 1) {
        const int add = t >= o ? flags[t - o] : 0;
        __syncthreads();
        flags[t] += add;
        __syncthreads();
      }
      const int rank = taken_s + flags[t] - f;
      if (f && rank < take_equal) {
        keys[first + rank] = kth;
        index[first + rank] = i;
      }
      __syncthreads();
      if (t == THREADS - 1) taken_s += flags[t];
      __syncthreads();
    }
  }
  // Bitonic sort of the k (padded to a power of two with entries that come
  // last): largest key first, equal keys by lower index.
  int p2 = 1;
  while (p2 < k) p2 <<= 1;
  for (int j = k + t; j < p2; j += THREADS) {
    keys[j] = 0u;
    index[j] = 0x7fffffff;
  }
  __syncthreads();
  for (int size = 2; size <= p2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int j = t; j < p2 / 2; j += THREADS) {
        const int lo = 2 * j - (j & (stride - 1));
        const int hi = lo + stride;
        const bool ahead = (lo & size) == 0;  // this run ends in order
        const bool swap = ahead ? strata_top_before(keys[hi], index[hi], keys[lo], index[lo])
                                : strata_top_before(keys[lo], index[lo], keys[hi], index[hi]);
        if (swap) {
          const unsigned kk = keys[lo];
          keys[lo] = keys[hi];
          keys[hi] = kk;
          const int ii = index[lo];
          index[lo] = index[hi];
          index[hi] = ii;
        }
      }
      __syncthreads();
    }
  }
  for (int j = t; j < k; j += THREADS) {
    ids[out + j] = index[j];
    values[out + j] = row[index[j]];
  }
  if (t == 0) bad[blockIdx.x] = odd;
}
