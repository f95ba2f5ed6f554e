// Rows as the cpu backend quantizes them before a matrix product
// (reference::ops::round_activations and quantize_q8_1_row: Q8_0, Q8_1,
// Q8_K), a warp a unit: the device functions that elementwise.cuh's
// strata_round_rows / strata_quantize_rows and rms_norm.cuh's and
// elementwise.cuh's fused kernels share, and the f16 conversions (which
// attention.cuh uses too). Each NVRTC program that uses them is this file
// followed by its own (sources.h, rms_norm_source.h); the emulation
// includes it before them.
//
// The int8 rows' layout (every kernel that makes or takes them): q [n]
// int8, and per 32-value unit u its scale d[u] (Q8_K: its 256-value
// block's, repeated) and sums[u]: the sum of its q (a float; exact), or
// for Q8_1 its s = f16(amax / 127 sum q) (ggml's block_q8_1 s).

__device__ __forceinline__ unsigned short strata_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return strata_host_f32_to_f16(f);  // the emulation's
#endif
}

__device__ __forceinline__ float strata_from_f16(unsigned short h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return strata_host_f16_to_f32(h);
#endif
}

// The (magnitude, index, value) of the largest magnitude, the lower index of
// equals: a warp's reduction of its lanes' firsts.
__device__ __forceinline__ void strata_first_largest(float* a, int* i, float* v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float a2 = __shfl_xor_sync(0xffffffffu, *a, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, *i, o);
    const float v2 = __shfl_xor_sync(0xffffffffu, *v, o);
    if (a2 > *a || (a2 == *a && i2 < *i)) {
      *a = a2;
      *i = i2;
      *v = v2;
    }
  }
}

// Q8_0 of the 32 values a warp holds, v its lane's: the lane's q and the
// block's scale f16(amax / 127) (as reference::ops quantize_q8_1); *exact:
// amax / 127 before its rounding (Q8_1's s is made from it).
__device__ __forceinline__ float strata_q8_0(float v, int* q, float* exact) {
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  *q = (int)rintf(v * id);  // an integer, as the cpu's: 0, never -0
  *exact = d;
  return strata_from_f16(strata_to_f16(d));
}

// Q8_K of the 256 values a warp holds, lane l holding values l + 32 j in
// v[j] (j < 8): its q[j] and the block's scale (0 when every value is 0; as
// reference::ops round_q8_k).
__device__ __forceinline__ float strata_q8_k_values(const float* v, int lane, int* q) {
  float amax = 0.0f, max = 0.0f;
  int first = 256;  // none: every value is 0
  for (int j = 0; j < 8; ++j) {
    if (fabsf(v[j]) > amax) {
      amax = fabsf(v[j]);
      max = v[j];
      first = lane + 32 * j;
    }
  }
  strata_first_largest(&amax, &first, &max);
  if (amax == 0.0f) {
    for (int j = 0; j < 8; ++j) q[j] = 0;
    return 0.0f;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < 8; ++j) {
    const int qj = (int)rintf(iscale * v[j]);
    q[j] = qj > 127 ? 127 : qj;
  }
  return 1.0f / iscale;
}

// The same of the 256 values at xb (lane l reads xb[l + 32 j]).
__device__ __forceinline__ float strata_q8_k(const float* xb, int lane, int* q) {
  float v[8];
  for (int j = 0; j < 8; ++j) v[j] = xb[lane + 32 * j];
  return strata_q8_k_values(v, lane, q);
}

// The sum of the warp's 32 ints.
__device__ __forceinline__ int strata_warp_sum(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One 32-value unit as int8 rows of kind 2 (Q8_0) or 4 (Q8_1), the warp
// holding it (v: its lane's value): q[lane], and from lane 0 *d and *sum
// (the layout above).
__device__ __forceinline__ void strata_quantize_unit(float v, int lane, signed char* q, float* d,
                                                     float* sum, int kind) {
  int qi;
  float exact;
  const float scale = strata_q8_0(v, &qi, &exact);
  q[lane] = (signed char)qi;
  const int total = strata_warp_sum(qi);
  if (lane == 0) {
    *d = scale;
    *sum = kind == 4 ? strata_from_f16(strata_to_f16(exact * (float)total)) : (float)total;
  }
}

// One 256-value block as Q8_K int8 rows, the warp holding it (v[j]: value
// lane + 32 j): q[lane + 32 j], and from lane 0 its 8 units' d and sums.
__device__ __forceinline__ void strata_quantize_block_k(const float* v, int lane, signed char* q,
                                                        float* d, float* sums) {
  int qj[8];
  const float scale = strata_q8_k_values(v, lane, qj);
  for (int j = 0; j < 8; ++j) {
    q[lane + 32 * j] = (signed char)qj[j];
    const int total = strata_warp_sum(qj[j]);
    if (lane == 0) {
      d[j] = scale;
      sums[j] = (float)total;
    }
  }
}

// A value of y; with kFromL2 y was written by other blocks of this grid
// (made visible by their __threadfence): read from L2 (ld.global.cg),
// never from a stale line of this multiprocessor's L1.
template <bool kFromL2 = false>
__device__ __forceinline__ float strata_load_y(const float* p) {
#if defined(__CUDA_ARCH__)
  if (kFromL2) return __ldcg(p);
#endif
  return *p;
}

// Values y [n] (every value written before the caller's last barrier) as
// int8 rows of `kind` (2 Q8_0, 3 Q8_K, 4 Q8_1) into q [n], d and sums
// [n / 32], by n_warps warps (warp w takes units w, w + n_warps, ...: a
// block's warps over a row, or a grid's over many rows). Whole units: n a
// multiple of 32 (256 for Q8_K). kFromL2: y read by strata_load_y<true>.
template <bool kFromL2 = false>
__device__ __forceinline__ void strata_quantize_values(const float* y, long long n,
                                                       signed char* q, float* d, float* sums,
                                                       int kind, long long warp,
                                                       long long n_warps, int lane) {
  if (kind == 3) {
    for (long long b = warp; b < n / 256; b += n_warps) {
      float v[8];
      for (int j = 0; j < 8; ++j) v[j] = strata_load_y<kFromL2>(y + 256 * b + lane + 32 * j);
      strata_quantize_block_k(v, lane, q + 256 * b, d + 8 * b, sums + 8 * b);
    }
  } else {
    for (long long u = warp; u < n / 32; u += n_warps) {
      strata_quantize_unit(strata_load_y<kFromL2>(y + 32 * u + lane), lane, q + 32 * u, d + u,
                           sums + u, kind);
    }
  }
}
