// A mixture's routing on the device (issue 32): each token's experts and
// their weights from the router's logits, so that a mixture's decode step
// needs no round trip to the host and can be replayed from a graph. CUDA
// C++ for NVRTC, compiled after sample.cuh (strata_block_argmax) in one
// program (sources.h); tests/cuda/kernels_test.cc runs it against
// kernels/cpu/reference/ops/moe_routing.h's moe_route.
//
//   strata_moe_route(const float* logits, int n_expert, int k, int gating,
//                    int norm_weights, float weights_scale, int* experts,
//                    float* weights)
//   grid (tokens), block (THREADS): token t = blockIdx.x of logits
//   [tokens][n_expert] (n_expert <= STRATA_MOE_EXPERTS_MAX, 1 <= k <=
//   n_expert) to experts [tokens][k] and weights [tokens][k], slot 0 the
//   most probable expert, as moe_route computes them:
//     probs   = softmax(logits) (gating 0) | sigmoid(logits) (1) | logits (2)
//     experts = the k largest probs, largest first, equal ones by lower
//               index; a NaN is never larger than a number (when only NaNs
//               are left, the lowest index left: every id is a valid expert)
//     weights = probs[experts]; softmax over the k (gating 2); / max(Σ, 2^-14)
//               in double (norm_weights); * weights_scale (not 0 or 1)
//   The softmax is moe_route's operation for operation: ggml's vectorised
//   e^x (strata_exp_ggml) on each 16-value chunk summed as its lanes are,
//   the rest and the sigmoid by e^x rounded from double (glibc's expf is
//   correctly rounded but for rare cases: the two may then differ in the
//   last place), every partial sum added in double in the reference's order.
#ifndef STRATA_MOE_EXPERTS_MAX
#define STRATA_MOE_EXPERTS_MAX 512  // moe_route's bound (the loader allows 256)
#endif
#define STRATA_MOE_GATING_SOFTMAX 0
#define STRATA_MOE_GATING_SIGMOID 1
#define STRATA_MOE_GATING_SOFTMAX_WEIGHT 2

// e^x as ggml_v_expf computes it (ggml-cpu/vec.h: a degree-5 polynomial
// after range reduction by ln 2, with fused multiply-adds), bit for bit
// with reference::ops::exp_ggml.
__device__ __forceinline__ float strata_exp_ggml(float x) {
  const float shift = 0x1.8p23f;
  const float z = fmaf(x, 0x1.715476p+0f, shift);
  const float n = z - shift;  // round(x / ln2)
  const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
  const unsigned e = __float_as_uint(z) << 23;
  const float kk = __uint_as_float(e + __float_as_uint(1.0f));
  const float u = b * b;
  const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                            fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                       u, 0x1.ffffecp-1f * b);
  if (!(fabsf(n) > 126.0f)) return fmaf(kk, j, kk);
  // Near or past the f32 range: scale in two steps (or saturate).
  const unsigned g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = __uint_as_float(g + 0x7f000000u);
  const float s2 = __uint_as_float(e - g);
  if (fabsf(n) > 192.0f) return s1 * s1;
  return fmaf(s2, j, s2) * s1;
}

// e^x rounded to f32 from double: glibc's expf's value but in rare cases.
__device__ __forceinline__ float strata_exp_rounded(float x) { return (float)exp((double)x); }

// x[0, n) (shared) to its softmax in place, as moe_routing.cc's
// routing_softmax: the 16-value chunks' e^x by strata_exp_ggml summed as
// _mm512_reduce_add_ps adds the lanes, the rest by strata_exp_rounded, the
// chunk sums then the rest added in double in order, then times the f32
// value of 1 / sum. Every thread of the block calls it.
__device__ __forceinline__ void strata_route_softmax(float* x, int n) {
  __shared__ float warp_max[32], inv_s;
  __shared__ float chunk_sum[STRATA_MOE_EXPERTS_MAX / 16];
  // The largest value (NaNs skipped, as std::max(m, x) from -inf skips
  // them; which of -0 and +0 is kept changes no e^(x - max)).
  float m = __uint_as_float(0xff800000u);  // -inf
  for (int i = threadIdx.x; i < n; i += THREADS) m = m < x[i] ? x[i] : m;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, m, o);
    m = m < other ? other : m;
  }
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  float max = warp_max[0];
  for (int v = 1; v < (THREADS + 31) / 32; ++v) max = max < warp_max[v] ? warp_max[v] : max;
  const int chunked = n / 16 * 16;
  for (int i = threadIdx.x; i < n; i += THREADS) {
    x[i] = i < chunked ? strata_exp_ggml(x[i] - max) : strata_exp_rounded(x[i] - max);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < chunked / 16; c += THREADS) {
    const float* v = x + 16 * c;
    float t3[8], t6[4];
    for (int l = 0; l < 8; ++l) t3[l] = v[8 + l] + v[l];
    for (int l = 0; l < 4; ++l) t6[l] = t3[4 + l] + t3[l];
    chunk_sum[c] = (t6[2] + t6[0]) + (t6[3] + t6[1]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int c = 0; c < chunked / 16; ++c) sum += (double)chunk_sum[c];
    for (int i = chunked; i < n; ++i) sum += (double)x[i];
    inv_s = (float)(1.0 / sum);
  }
  __syncthreads();
  const float inv = inv_s;
  for (int i = threadIdx.x; i < n; i += THREADS) x[i] *= inv;
  __syncthreads();
}

STRATA_KERNEL strata_moe_route(const float* logits, int n_expert, int k, int gating,
                               int norm_weights, float weights_scale, int* experts,
                               float* weights) {
  strata_grid_dependency();
  __shared__ float probs[STRATA_MOE_EXPERTS_MAX];
  __shared__ float left[STRATA_MOE_EXPERTS_MAX];  // probs not yet taken; NaN once taken
  __shared__ unsigned char taken[STRATA_MOE_EXPERTS_MAX];
  __shared__ float w[STRATA_MOE_EXPERTS_MAX];     // the k weights
  __shared__ int ids[STRATA_MOE_EXPERTS_MAX];     // the k experts
  const float* row = logits + (long long)blockIdx.x * n_expert;
  for (int i = threadIdx.x; i < n_expert; i += THREADS) {
    const float v = row[i];
    probs[i] = gating == STRATA_MOE_GATING_SIGMOID ? 1.0f / (1.0f + strata_exp_rounded(-v)) : v;
    taken[i] = 0;
  }
  __syncthreads();
  if (gating == STRATA_MOE_GATING_SOFTMAX) strata_route_softmax(probs, n_expert);
  for (int i = threadIdx.x; i < n_expert; i += THREADS) left[i] = probs[i];
  __syncthreads();
  // Top-k: k block-wide picks, each the first index of the largest left.
  for (int j = 0; j < k; ++j) {
    int at = strata_block_argmax(left, n_expert);  // on thread 0
    if (threadIdx.x == 0) {
      if (at < 0) {  // only NaNs left: the lowest index not taken
        at = 0;
        while (taken[at]) ++at;
      }
      ids[j] = at;
      w[j] = probs[at];
      taken[at] = 1;
      left[at] = __uint_as_float(0x7fc00000u);  // NaN: never picked again
    }
    __syncthreads();
  }
  if (gating == STRATA_MOE_GATING_SOFTMAX_WEIGHT) strata_route_softmax(w, k);
  if (threadIdx.x == 0) {
    if (norm_weights) {
      double sum = 0.0;  // ggml_sum_rows adds in double
      for (int j = 0; j < k; ++j) sum += (double)w[j];
      const float s0 = (float)sum, floor = 6.103515625e-5f;  // the smallest normal f16
      const float s = s0 < floor ? floor : s0;                // std::max(s0, floor)
      for (int j = 0; j < k; ++j) w[j] /= s;
    }
    if (weights_scale != 0.0f && weights_scale != 1.0f) {
      for (int j = 0; j < k; ++j) w[j] *= weights_scale;
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += THREADS) {
    experts[(long long)blockIdx.x * k + j] = ids[j];
    weights[(long long)blockIdx.x * k + j] = w[j];
  }
}
