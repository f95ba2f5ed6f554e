// Flash attention of a prompt chunk on the tensor cores (issue 32): see
// flash_attention_source.h (the formula, tiles, numerics and launch). CUDA
// C++ for NVRTC, compiled after mma_ops.cuh in one program; with CUDA's
// keywords defined away it also compiles as host C++ (the emulation,
// tests/cuda/cuda_emulator.h).
#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef THREADS
#define THREADS 128
#endif
#if THREADS != 128 || HEAD_DIM % 16 != 0 || HEAD_DIM > 256
#error "flash attention: 4 warps a block, HEAD_DIM a multiple of 16 up to 256"
#endif
#ifndef STRATA_KERNEL
#define STRATA_KERNEL extern "C" __global__ void __launch_bounds__(THREADS)
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define FA_ROWS 64                             // query rows a block (16 a warp)
#define FA_KEYS (HEAD_DIM <= 128 ? 64 : 32)    // keys a step (48 KiB of shared memory)
#define FA_PAD 8                               // halves after each shared row

#if defined(__CUDA_ARCH__)
#define STRATA_FA_UNROLL _Pragma("unroll")
#else
#define STRATA_FA_UNROLL
#endif

STRATA_KERNEL strata_flash_attention_rows(const float* q,
                                          const unsigned short* k_cache,
                                          const unsigned short* v_cache,
                                          float* out, int pos0, int n_rows,
                                          int window, int n_head, int n_head_kv, float scale,
                                          float softcap, const float* __restrict__ sinks) {
  strata_grid_dependency();
  __shared__ unsigned short sk[FA_KEYS][HEAD_DIM + FA_PAD];  // [key][d]
  __shared__ unsigned short svt[HEAD_DIM][FA_KEYS + FA_PAD]; // [d][key]: V transposed
  const int h = blockIdx.x % n_head;
  const int r0 = (int)(blockIdx.x / n_head) * FA_ROWS;
  const int r1 = r0 + FA_ROWS < n_rows ? r0 + FA_ROWS : n_rows;
  const int kvh = h / (n_head / n_head_kv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // This lane's two rows (fragment rows g and g + 8 of its warp's 16), the
  // last key each sees (its own position) and the first (its window's).
  int row[2], last[2], first[2];
  for (int i = 0; i < 2; ++i) {
    row[i] = r0 + 16 * warp + g + 8 * i;
    last[i] = row[i] < n_rows ? pos0 + row[i] : -1;  // a row past the chunk sees none
    first[i] = window > 0 && last[i] + 1 > window ? last[i] + 1 - window : 0;
  }

  // Q [16 rows][HEAD_DIM] of the warp as A fragments, rounded to f16.
  unsigned qa[HEAD_DIM / 16][4];
STRATA_FA_UNROLL
  for (int kt = 0; kt < HEAD_DIM / 16; ++kt) {
STRATA_FA_UNROLL
    for (int f = 0; f < 4; ++f) {
      const int i = f & 1, d = 16 * kt + 2 * t + 8 * (f >> 1);
      unsigned short lo = 0, hi = 0;
      if (row[i] < n_rows) {
        const float* qr = q + ((long long)row[i] * n_head + h) * HEAD_DIM + d;
        lo = strata_mma_f16(qr[0]);
        hi = strata_mma_f16(qr[1]);
      }
      qa[kt][f] = strata_pack(lo, hi);
    }
  }
  float o[HEAD_DIM / 8][4];
STRATA_FA_UNROLL
  for (int dt = 0; dt < HEAD_DIM / 8; ++dt)
STRATA_FA_UNROLL
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // The block's keys: from its first row's window to its last row.
  const int begin0 = window > 0 && pos0 + r0 + 1 > window ? pos0 + r0 + 1 - window : 0;
  const int kend = pos0 + r1;
  for (int kb = (begin0 / FA_KEYS) * FA_KEYS; kb < kend; kb += FA_KEYS) {
    __syncthreads();  // the previous step's tiles are read
    for (int i = threadIdx.x; i < FA_KEYS * HEAD_DIM / 2; i += THREADS) {
      const int j = i / (HEAD_DIM / 2), d = 2 * (i % (HEAD_DIM / 2));
      const int key = kb + j;
      unsigned short k0 = 0, k1 = 0, v0 = 0, v1 = 0;  // past the chunk: zeros, masked
      if (key < kend) {
        const long long at = ((long long)key * n_head_kv + kvh) * HEAD_DIM + d;
        k0 = k_cache[at];
        k1 = k_cache[at + 1];
        v0 = v_cache[at];
        v1 = v_cache[at + 1];
      }
      sk[j][d] = k0;
      sk[j][d + 1] = k1;
      svt[d][j] = v0;
      svt[d + 1][j] = v1;
    }
    __syncthreads();

    // S = Q K^T [16][FA_KEYS], then the soft cap, the scale and the mask.
    float s[FA_KEYS / 8][4];
STRATA_FA_UNROLL
    for (int nt = 0; nt < FA_KEYS / 8; ++nt) {
STRATA_FA_UNROLL
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
STRATA_FA_UNROLL
      for (int kt = 0; kt < HEAD_DIM / 16; ++kt) {
        const unsigned b[2] = {strata_pair(&sk[8 * nt + g][16 * kt + 2 * t]),
                               strata_pair(&sk[8 * nt + g][16 * kt + 2 * t + 8])};
        strata_mma_16816(s[nt], qa[kt], b);
      }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
STRATA_FA_UNROLL
    for (int nt = 0; nt < FA_KEYS / 8; ++nt) {
STRATA_FA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1, key = kb + 8 * nt + 2 * t + (e & 1);
        float v = s[nt][e];
        if (softcap > 0.0f) v = softcap * tanhf(v / softcap);
        v *= scale;
        if (key > last[i] || key < first[i]) v = -INFINITY;
        s[nt][e] = v;
        tile_max[i] = fmaxf(tile_max[i], v);
      }
    }
    // Online softmax: the row's maximum over its 4 lanes, the old sums and
    // outputs rescaled to it, p = exp(s - m).
    float alpha[2];
STRATA_FA_UNROLL
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      alpha[i] = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
STRATA_FA_UNROLL
    for (int dt = 0; dt < HEAD_DIM / 8; ++dt)
STRATA_FA_UNROLL
      for (int e = 0; e < 4; ++e) o[dt][e] *= alpha[e >> 1];
STRATA_FA_UNROLL
    for (int nt = 0; nt < FA_KEYS / 8; ++nt) {
STRATA_FA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const float p = m[i] == -INFINITY ? 0.0f : expf(s[nt][e] - m[i]);
        s[nt][e] = p;
        l[i] += p;
      }
    }
    // O += P V: P's accumulator fragments are the A fragments of the next
    // mma (keys 16 kt .. + 16: S tiles 2 kt and 2 kt + 1), rounded to f16.
STRATA_FA_UNROLL
    for (int kt = 0; kt < FA_KEYS / 16; ++kt) {
      const unsigned a[4] = {
          strata_pack(strata_mma_f16(s[2 * kt][0]), strata_mma_f16(s[2 * kt][1])),
          strata_pack(strata_mma_f16(s[2 * kt][2]), strata_mma_f16(s[2 * kt][3])),
          strata_pack(strata_mma_f16(s[2 * kt + 1][0]), strata_mma_f16(s[2 * kt + 1][1])),
          strata_pack(strata_mma_f16(s[2 * kt + 1][2]), strata_mma_f16(s[2 * kt + 1][3]))};
STRATA_FA_UNROLL
      for (int dt = 0; dt < HEAD_DIM / 8; ++dt) {
        const unsigned b[2] = {strata_pair(&svt[8 * dt + g][16 * kt + 2 * t]),
                               strata_pair(&svt[8 * dt + g][16 * kt + 2 * t + 8])};
        strata_mma_16816(o[dt], a, b);
      }
    }
  }

  // The row's sum over its 4 lanes; a sink logit joins the maximum and the
  // sum (gpt-oss); out = O / l.
STRATA_FA_UNROLL
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  float inv[2];
STRATA_FA_UNROLL
  for (int i = 0; i < 2; ++i) {
    float a = 1.0f;
    if (sinks != nullptr) {
      const float sink = sinks[h], m_final = fmaxf(m[i], sink);
      a = expf(m[i] - m_final);
      l[i] = l[i] * a + expf(sink - m_final);
    }
    inv[i] = a / l[i];
  }
STRATA_FA_UNROLL
  for (int dt = 0; dt < HEAD_DIM / 8; ++dt) {
STRATA_FA_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      if (row[i] < n_rows) {
        out[((long long)row[i] * n_head + h) * HEAD_DIM + 8 * dt + 2 * t + (e & 1)] =
            o[dt][e] * inv[i];
      }
    }
  }
}
