// Elementwise kernels of a decode or prefill step (issue 32), CUDA C++ for
// NVRTC (embedded by cmake/embed_source.cmake; sources.h names
// the entries); tests/cuda/kernels_emulation_test.cc runs them on the
// CPU against kernels/cpu/reference/ops. Every kernel walks its elements
// with a grid-stride loop: any grid and block size is correct.
//
//   strata_rope_rotate(float* x, const float* cs, int n_tokens, int n_heads,
//                      int head_dim, int n_rot, int neox)
//     x [n_tokens][n_heads][head_dim] rotated in place by the angles of
//     reference::ops::rope_angles, cs [n_tokens][n_rot/2][2] = (cos, sin)
//     (made on the host, shared by q, k and every layer of a step): pair i
//     is (x[2i], x[2i+1]) (neox 0, llama) or (x[i], x[i + n_rot/2]) (neox
//     1), (a, b) -> (a c - b s, a s + b c). Dimensions >= n_rot untouched.
//   strata_swiglu(const float* gate, const float* up, float* out, long long n)
//     out = gate / (1 + e^-gate) * up; out may alias either input.
//   strata_add(const float* a, const float* b, float* y, long long n)
//     y = a + b (the residual); y may alias either input.
//   strata_add_bias(float* x, const float* bias, long long n, int width)
//     x [n][width] += bias [width] (every row; q/k/v biases of qwen2).
//   strata_store_kv(const float* k, const float* v, unsigned short* k_cache,
//                   unsigned short* v_cache, int pos, int n, int k_width,
//                   int v_width)
//     rows [pos, pos + n) of an f16 cache [n_ctx][width] from f32 k [n][k_width]
//     and v [n][v_width], rounded to nearest even.
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void
#endif

__device__ __forceinline__ long long strata_first() {
  return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long strata_stride() {
  return (long long)gridDim.x * blockDim.x;
}

__device__ __forceinline__ unsigned short strata_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return strata_host_f32_to_f16(f);  // the emulation's
#endif
}

STRATA_KERNEL strata_rope_rotate(float* x, const float* cs, int n_tokens, int n_heads,
                                 int head_dim, int n_rot, int neox) {
  const int half = n_rot / 2;
  const long long pairs = (long long)n_tokens * n_heads * half;
  for (long long p = strata_first(); p < pairs; p += strata_stride()) {
    const int i = (int)(p % half);
    const long long th = p / half;  // token * n_heads + head
    const int t = (int)(th / n_heads);
    float* row = x + th * head_dim;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + half : 2 * i + 1;
    const float c = cs[((long long)t * half + i) * 2];
    const float s = cs[((long long)t * half + i) * 2 + 1];
    const float xa = row[a], xb = row[b];
    row[a] = xa * c - xb * s;
    row[b] = xa * s + xb * c;
  }
}

STRATA_KERNEL strata_swiglu(const float* gate, const float* up, float* out, long long n) {
  for (long long i = strata_first(); i < n; i += strata_stride()) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

STRATA_KERNEL strata_add(const float* a, const float* b, float* y, long long n) {
  for (long long i = strata_first(); i < n; i += strata_stride()) y[i] = a[i] + b[i];
}

STRATA_KERNEL strata_add_bias(float* x, const float* bias, long long n, int width) {
  const long long total = n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) x[i] += bias[i % width];
}

STRATA_KERNEL strata_store_kv(const float* k, const float* v, unsigned short* k_cache,
                              unsigned short* v_cache, int pos, int n, int k_width,
                              int v_width) {
  const long long nk = (long long)n * k_width, nv = (long long)n * v_width;
  for (long long i = strata_first(); i < nk; i += strata_stride()) {
    k_cache[(long long)pos * k_width + i] = strata_to_f16(k[i]);
  }
  for (long long i = strata_first(); i < nv; i += strata_stride()) {
    v_cache[(long long)pos * v_width + i] = strata_to_f16(v[i]);
  }
}
