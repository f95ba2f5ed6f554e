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
//   strata_rope_rotate_qk(float* q, float* k, const float* cs, int n_tokens,
//                         int n_head, int n_head_kv, int head_dim, int n_rot,
//                         int neox)
//     strata_rope_rotate of q [n_tokens][n_head][head_dim] and of k
//     [n_tokens][n_head_kv][head_dim] in one launch
//   strata_rope_store_kv_batch(float* q, float* k, const float* v,
//       const float* cs, const unsigned long long* kv_base, const int* n_ctx,
//       const int* pos, const int* row_of, int layer, int n, int n_head,
//       int n_head_kv, int head_dim, int n_rot, int neox, int v_width)
//     a step of n decode rows (slot r: row row_of[r] of q [.][n_head]
//     [head_dim], k [.][n_head_kv][head_dim] and v [.][v_width]):
//     strata_rope_rotate_qk of q and k, then strata_store_kv_batch of the
//     rotated k and v, in one launch, the same bits
//   strata_swiglu(const float* gate, const float* up, float* out, long long n)
//     out = gate / (1 + e^-gate) * up; out may alias either input.
//   strata_swiglu_quantize(const float* gate, const float* up, float* out,
//                          signed char* q, float* d, float* sums, long long n,
//                          int kind)
//     strata_swiglu's out, and out as strata_quantize_rows makes it of kind
//     2, 3 or 4 (q, d, sums: quantize.cuh's layout), in one pass: a warp a
//     unit (32 values; 256 for kind 3, n a multiple of it).
//   strata_add(const float* a, const float* b, float* y, long long n)
//     y = a + b (the residual); y may alias either input.
//   strata_add_bias(float* x, const float* bias, long long n, int width)
//     x [n][width] += bias [width] (every row; q/k/v biases of qwen2).
//   strata_add_bias_ids(float* x, const float* bias, const int* ids,
//                       long long n, int width)
//     x [n][width] += bias [ids[r]][width] (a mixture's expert slots: each
//     row its expert's bias row; gpt-oss).
//   strata_scale(float* x, float s, long long n)            x *= s
//   strata_soft_cap(float* x, float cap, long long n)       x = tanh(x / cap) cap
//     (x times 1/cap, as reference::ops::soft_cap)
//   strata_geglu(const float* gate, const float* up, float* out, long long n)
//     out = gelu_tanh(gate) * up with reference::ops::geglu's f16 roundings
//     of the gate and of gelu (ggml's table), 0 below -10, gate above 10
//   strata_swiglu_oai(const float* gate, const float* up, float* out,
//                     long long n, float alpha, float limit)
//     gpt-oss: x = min(gate, limit), y = clamp(up, -limit, limit),
//     out = x / (1 + e^(alpha (-x))) (y + 1) (reference::ops::swiglu_oai)
//   strata_gather_rows(const float* src, const int* rows, float* dst, int n,
//                      int width)            dst[i] = src[rows[i]], i < n
//   strata_scatter_rows(const float* src, const int* rows, float* dst, int n,
//                       int width)           dst[rows[i]] = src[i], i < n
//   strata_moe_sum(const float* slots, const float* weights, float* y, int n,
//                  int k, int width)
//     y[t] = slots[t][0] w[t][0] + slots[t][1] w[t][1] + ... in slot order
//     (slots [n][k][width], weights [n][k]: llama.cpp's build_moe_ffn sum)
//   strata_add_shared_expert(float* y, const float* shared, const float* g,
//                            int n, int width)
//     y[t] += shared[t] silu(g[t]) / g[t] (qwen2moe's sigmoid gate, as ggml)
//   strata_store_kv_batch(const float* k, const float* v,
//       const unsigned long long* kv_base, const int* n_ctx, const int* pos,
//       const int* row_of, int layer, int n, int k_width, int v_width)
//     the decode rows of a step, each of its own sequence: row row_of[r] of
//     k [.][k_width] and v [.][v_width] into position pos[r] of layer
//     `layer` of the caches at kv_base[r] (per layer K [n_ctx[r]][k_width]
//     then V [n_ctx[r]][v_width], f16), r < n
//   strata_round_rows(const float* x, float* y, long long n, int kind)
//     y [n] = x as the activation type a matrix's weights pair with
//     represents it (reference::ops::round_activations, the values the cpu
//     backend and llama.cpp's CPU path multiply): kind 1 f16 (F16 weights),
//     2 Q8_0 (legacy quants, MXFP4: per 32 values d = amax / 127, q =
//     round-half-even(x 127 / amax), y = f16(d) q; 4, Q8_1, the same
//     values), 3 Q8_K (K-quants: per 256
//     values the one of largest magnitude, the first of equals, max; q =
//     min(127, round-half-even(x iscale)), iscale = -127 / max, y = d q with
//     d = 1 / iscale); n a
//     multiple of the kind's block, rows whole blocks. One warp a block of 32
//     or 256 (a warp-stride loop: a block of threads is a multiple of 32); y
//     may alias x.
//   strata_quantize_rows(const float* x, signed char* q, float* d,
//                        float* sums, long long n, int kind)
//     the same roundings (kind 2, 3 or 4) kept as int8: q [n], and for each
//     32-value unit u its scale d[u] (Q8_K: its block's, repeated) and the
//     sum of its q, sums[u] (a float; exact), or for kind 4 (Q8_1) its s =
//     f16(amax / 127 sum q) (ggml's block_q8_1 s); d[u] q[i] is
//     strata_round_rows's value of x[i]. The int8 kernels' rows (matvec.cuh
//     matvec_i8, mma.cuh).
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

// Pair i (< half) of a head's row at row, token t: (a, b) = (2i, 2i + 1)
// (neox 0) or (i, i + half) (neox 1) rotated by its angle; *a_at and *b_at
// say where the pair is.
__device__ __forceinline__ void strata_rope_head_pair(float* row, const float* cs, int t, int i,
                                                      int half, int neox, int* a_at,
                                                      int* b_at) {
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  const float c = cs[((long long)t * half + i) * 2];
  const float s = cs[((long long)t * half + i) * 2 + 1];
  const float xa = row[a], xb = row[b];
  row[a] = xa * c - xb * s;
  row[b] = xa * s + xb * c;
  *a_at = a;
  *b_at = b;
}

// Pair i of head `head` of token t of x (x [n_tokens][n_heads][head_dim]).
__device__ __forceinline__ void strata_rope_pair(float* x, const float* cs, long long p, int half,
                                                 int n_heads, int head_dim, int neox) {
  const int i = (int)(p % half);
  const long long th = p / half;  // token * n_heads + head
  int a, b;
  strata_rope_head_pair(x + th * head_dim, cs, (int)(th / n_heads), i, half, neox, &a, &b);
}

STRATA_KERNEL strata_rope_rotate(float* x, const float* cs, int n_tokens, int n_heads,
                                 int head_dim, int n_rot, int neox) {
  strata_grid_dependency();
  const int half = n_rot / 2;
  const long long pairs = (long long)n_tokens * n_heads * half;
  for (long long p = strata_first(); p < pairs; p += strata_stride()) {
    strata_rope_pair(x, cs, p, half, n_heads, head_dim, neox);
  }
}

STRATA_KERNEL strata_rope_rotate_qk(float* q, float* k, const float* cs, int n_tokens,
                                    int n_head, int n_head_kv, int head_dim, int n_rot,
                                    int neox) {
  strata_grid_dependency();
  const int half = n_rot / 2;
  const long long q_pairs = (long long)n_tokens * n_head * half;
  const long long pairs = q_pairs + (long long)n_tokens * n_head_kv * half;
  for (long long p = strata_first(); p < pairs; p += strata_stride()) {
    if (p < q_pairs) {
      strata_rope_pair(q, cs, p, half, n_head, head_dim, neox);
    } else {
      strata_rope_pair(k, cs, p - q_pairs, half, n_head_kv, head_dim, neox);
    }
  }
}

// A decode step's RoPE and KV store in one launch (every row of the step a
// decode row): q rotated as strata_rope_rotate_qk; row row_of[r] of k
// rotated and, with row row_of[r] of v, stored as strata_store_kv_batch
// stores slot r (the same bits: the pair's rotation then its f16 rounding,
// in one thread).
STRATA_KERNEL strata_rope_store_kv_batch(float* q, float* k, const float* v, const float* cs,
                                         const unsigned long long* kv_base, const int* n_ctx,
                                         const int* pos, const int* row_of, int layer, int n,
                                         int n_head, int n_head_kv, int head_dim, int n_rot,
                                         int neox, int v_width) {
  strata_grid_dependency();
  const int half = n_rot / 2;
  const long long k_width = (long long)n_head_kv * head_dim;
  const long long q_pairs = (long long)n * n_head * half;
  const long long k_items = (long long)n * k_width;
  const long long total = q_pairs + k_items + (long long)n * v_width;
  for (long long p = strata_first(); p < total; p += strata_stride()) {
    if (p < q_pairs) {
      strata_rope_pair(q, cs, p, half, n_head, head_dim, neox);
      continue;
    }
    const long long e = p < q_pairs + k_items ? p - q_pairs : p - q_pairs - k_items;
    const long long width = p < q_pairs + k_items ? k_width : v_width;
    const int r = (int)(e / width);
    const long long c = e - (long long)r * width;
    const int t = row_of[r];
    unsigned short* base =
        (unsigned short*)kv_base[r] + (long long)layer * n_ctx[r] * (k_width + v_width);
    if (p >= q_pairs + k_items) {  // a value of V
      base[(long long)n_ctx[r] * k_width + (long long)pos[r] * v_width + c] =
          strata_to_f16(v[(long long)t * v_width + c]);
      continue;
    }
    const int d = (int)(c % head_dim);
    float* row = k + (long long)t * k_width + (c - d);  // the head's row
    unsigned short* cached = base + (long long)pos[r] * k_width + (c - d);
    if (d >= n_rot) {  // past the rotated dims
      cached[d] = strata_to_f16(row[d]);
    } else if (neox ? d < half : (d & 1) == 0) {  // the first of its pair: the pair's thread
      int a, b;
      strata_rope_head_pair(row, cs, t, neox ? d : d / 2, half, neox, &a, &b);
      cached[a] = strata_to_f16(row[a]);
      cached[b] = strata_to_f16(row[b]);
    }
  }
}

// silu(g) u, SwiGLU's value.
__device__ __forceinline__ float strata_swiglu_value(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

STRATA_KERNEL strata_swiglu(const float* gate, const float* up, float* out, long long n) {
  strata_grid_dependency();
  for (long long i = strata_first(); i < n; i += strata_stride()) {
    out[i] = strata_swiglu_value(gate[i], up[i]);
  }
}

STRATA_KERNEL strata_swiglu_quantize(const float* gate, const float* up, float* out,
                                     signed char* q, float* d, float* sums, long long n,
                                     int kind) {
  strata_grid_dependency();
  const int lane = threadIdx.x & 31;
  const long long warp = strata_first() >> 5, warps = strata_stride() >> 5;
  if (kind == 3) {
    for (long long b = warp; b < n / 256; b += warps) {
      float v[8];
      for (int j = 0; j < 8; ++j) {
        const long long i = b * 256 + lane + 32 * j;
        v[j] = strata_swiglu_value(gate[i], up[i]);
        out[i] = v[j];
      }
      strata_quantize_block_k(v, lane, q + b * 256, d + b * 8, sums + b * 8);
    }
  } else {
    for (long long b = warp; b < n / 32; b += warps) {
      const long long i = b * 32 + lane;
      const float v = strata_swiglu_value(gate[i], up[i]);
      out[i] = v;
      strata_quantize_unit(v, lane, q + b * 32, d + b, sums + b, kind);
    }
  }
}

STRATA_KERNEL strata_add(const float* a, const float* b, float* y, long long n) {
  strata_grid_dependency();
  for (long long i = strata_first(); i < n; i += strata_stride()) y[i] = a[i] + b[i];
}

STRATA_KERNEL strata_add_bias(float* x, const float* bias, long long n, int width) {
  strata_grid_dependency();
  const long long total = n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) x[i] += bias[i % width];
}

STRATA_KERNEL strata_add_bias_ids(float* x, const float* bias, const int* ids, long long n,
                                  int width) {
  strata_grid_dependency();
  const long long total = n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    x[i] += bias[(long long)ids[i / width] * width + i % width];
  }
}

STRATA_KERNEL strata_scale(float* x, float s, long long n) {
  strata_grid_dependency();
  for (long long i = strata_first(); i < n; i += strata_stride()) x[i] *= s;
}

STRATA_KERNEL strata_soft_cap(float* x, float cap, long long n) {
  strata_grid_dependency();
  const float inv = 1.0f / cap;
  for (long long i = strata_first(); i < n; i += strata_stride()) x[i] = tanhf(x[i] * inv) * cap;
}

STRATA_KERNEL strata_geglu(const float* gate, const float* up, float* out, long long n) {
  strata_grid_dependency();
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float kCoefA = 0.044715f;
  for (long long i = strata_first(); i < n; i += strata_stride()) {
    const float g = gate[i];
    float gelu;
    if (g <= -10.0f) {
      gelu = 0.0f;
    } else if (g >= 10.0f) {
      gelu = g;
    } else {
      const float g16 = strata_from_f16(strata_to_f16(g));
      const float t = 0.5f * g16 * (1.0f + tanhf(kSqrt2OverPi * g16 * (1.0f + kCoefA * g16 * g16)));
      gelu = strata_from_f16(strata_to_f16(t));
    }
    out[i] = gelu * up[i];
  }
}

STRATA_KERNEL strata_swiglu_oai(const float* gate, const float* up, float* out, long long n,
                                float alpha, float limit) {
  strata_grid_dependency();
  for (long long i = strata_first(); i < n; i += strata_stride()) {
    const float x = fminf(gate[i], limit);
    const float y = fminf(fmaxf(up[i], -limit), limit);
    const float glu = x / (1.0f + expf(alpha * (-x)));
    out[i] = glu * (y + 1.0f);
  }
}

STRATA_KERNEL strata_gather_rows(const float* src, const int* rows, float* dst, int n,
                                 int width) {
  strata_grid_dependency();
  const long long total = (long long)n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    const long long r = i / width;
    dst[i] = src[(long long)rows[r] * width + (i - r * width)];
  }
}

STRATA_KERNEL strata_scatter_rows(const float* src, const int* rows, float* dst, int n,
                                  int width) {
  strata_grid_dependency();
  const long long total = (long long)n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    const long long r = i / width;
    dst[(long long)rows[r] * width + (i - r * width)] = src[i];
  }
}

STRATA_KERNEL strata_moe_sum(const float* slots, const float* weights, float* y, int n, int k,
                             int width) {
  strata_grid_dependency();
  const long long total = (long long)n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    const long long t = i / width;
    const long long c = i - t * width;
    const float* o = slots + t * k * width + c;
    const float* w = weights + t * k;
    float sum = o[0] * w[0];
    for (int j = 1; j < k; ++j) sum += o[(long long)j * width] * w[j];
    y[i] = sum;
  }
}

STRATA_KERNEL strata_add_shared_expert(float* y, const float* shared, const float* g, int n,
                                       int width) {
  strata_grid_dependency();
  const long long total = (long long)n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    const float gt = g[i / width];
    const float gate = gt / (1.0f + expf(-gt)) / gt;
    y[i] += shared[i] * gate;
  }
}

STRATA_KERNEL strata_store_kv_batch(const float* k, const float* v,
                                    const unsigned long long* kv_base, const int* n_ctx,
                                    const int* pos, const int* row_of, int layer, int n,
                                    int k_width, int v_width) {
  strata_grid_dependency();
  const long long width = (long long)k_width + v_width;
  const long long total = (long long)n * width;
  for (long long i = strata_first(); i < total; i += strata_stride()) {
    const int r = (int)(i / width);
    const long long c = i - (long long)r * width;
    unsigned short* base = (unsigned short*)kv_base[r] + (long long)layer * n_ctx[r] * width;
    if (c < k_width) {
      base[(long long)pos[r] * k_width + c] = strata_to_f16(k[(long long)row_of[r] * k_width + c]);
    } else {
      const long long cv = c - k_width;
      base[(long long)n_ctx[r] * k_width + (long long)pos[r] * v_width + cv] =
          strata_to_f16(v[(long long)row_of[r] * v_width + cv]);
    }
  }
}

STRATA_KERNEL strata_store_kv(const float* k, const float* v, unsigned short* k_cache,
                              unsigned short* v_cache, int pos, int n, int k_width,
                              int v_width) {
  strata_grid_dependency();
  const long long nk = (long long)n * k_width, nv = (long long)n * v_width;
  for (long long i = strata_first(); i < nk; i += strata_stride()) {
    k_cache[(long long)pos * k_width + i] = strata_to_f16(k[i]);
  }
  for (long long i = strata_first(); i < nv; i += strata_stride()) {
    v_cache[(long long)pos * v_width + i] = strata_to_f16(v[i]);
  }
}


STRATA_KERNEL strata_round_rows(const float* x, float* y, long long n, int kind) {
  strata_grid_dependency();
  const int lane = threadIdx.x & 31;
  const long long warp = strata_first() >> 5, warps = strata_stride() >> 5;
  if (kind == 1) {
    for (long long i = strata_first(); i < n; i += strata_stride()) {
      y[i] = strata_from_f16(strata_to_f16(x[i]));
    }
  } else if (kind == 2 || kind == 4) {  // Q8_0 (and Q8_1's values): a value a lane
    for (long long b = warp; b < n / 32; b += warps) {
      int q;
      float exact;
      const float d = strata_q8_0(x[b * 32 + lane], &q, &exact);
      y[b * 32 + lane] = d * (float)q;
    }
  } else if (kind == 3) {  // Q8_K: values lane + 32 j, j < 8
    for (long long b = warp; b < n / 256; b += warps) {
      int q[8];
      const float d = strata_q8_k(x + b * 256, lane, q);
      for (int j = 0; j < 8; ++j) y[b * 256 + lane + 32 * j] = d * (float)q[j];
    }
  }
}

STRATA_KERNEL strata_quantize_rows(const float* x, signed char* q, float* d, float* sums,
                                   long long n, int kind) {
  strata_grid_dependency();
  if (kind != 2 && kind != 3 && kind != 4) return;
  strata_quantize_values(x, n, q, d, sums, kind, strata_first() >> 5, strata_stride() >> 5,
                         (int)threadIdx.x & 31);
}
