// The tensor-core matrix kernel (prefill, issue 32): see mma_source.h (the
// formula, tiles, numerics and launch). CUDA C++ for NVRTC, compiled after
// matvec.cuh (its formats and strata_put) and mma_ops.cuh (the mma.sync
// helpers) in one program; with CUDA's keywords defined away it also
// compiles as host C++, and the emulation (tests/cuda/cuda_emulator.h) runs
// mma.sync by its documented fragment layout.
#if THREADS != 128
#error "the tensor-core kernel is written for 4 warps a block (-DTHREADS=128)"
#endif
#define MMA_BM 64   // weight rows a block
#define MMA_BN 64   // activation rows (tokens) a block
#define MMA_BK 64   // columns a step: two 32-value units a weight row
#define MMA_PAD 8   // halves after each shared row: conflict-free fragment loads

// Y = X W^T over a tile of MMA_BM weight rows and MMA_BN tokens: block b is
// rows (b % row_tiles) MMA_BM .., tokens (b / row_tiles) MMA_BN ..; 4 warps,
// each 32 rows x 32 tokens (2 x 4 mma tiles). Per MMA_BK step every thread
// dequantizes one 32-value unit of a weight row and rounds 32 values of a
// token to f16 into shared memory; the warps then run 4 k16 steps.
template <typename Format>
__device__ __forceinline__ void mma_tile(const u8* __restrict__ w, const float* __restrict__ x,
                                         float* y0, float* y1, float* y2, int n0, int n1,
                                         int n_rows, int n_cols, long long row_bytes, int n_tok) {
  __shared__ unsigned short sa[MMA_BM][MMA_BK + MMA_PAD];  // [weight row][k]
  __shared__ unsigned short sb[MMA_BN][MMA_BK + MMA_PAD];  // [token][k]
  const int row_tiles = (n_rows + MMA_BM - 1) / MMA_BM;
  const int m0 = (int)(blockIdx.x % row_tiles) * MMA_BM;
  const int t0 = (int)(blockIdx.x / row_tiles) * MMA_BN;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
  // What this thread fills: row / token `mine` of the tile, unit `half`
  // of the step.
  const int mine = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int units = n_cols / 32;
  float acc[2][4][4];
STRATA_UNROLL
  for (int i = 0; i < 2; ++i)
STRATA_UNROLL
    for (int j = 0; j < 4; ++j)
STRATA_UNROLL
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  for (int k0 = 0; k0 < n_cols; k0 += MMA_BK) {
    const int u = k0 / 32 + half;
    {
      float v[32];
      const int r = m0 + mine;
      if (r < n_rows && u < units) {
        Format::unit(w + (long long)r * row_bytes, u, v);
      } else {
STRATA_UNROLL
        for (int l = 0; l < 32; ++l) v[l] = 0.0f;
      }
STRATA_UNROLL
      for (int l = 0; l < 32; ++l) sa[mine][32 * half + l] = strata_mma_f16(v[l]);
      const int tok = t0 + mine;
      const float* xr = x + (long long)tok * n_cols + 32 * u;
      const bool in = tok < n_tok && u < units;
STRATA_UNROLL
      for (int l = 0; l < 32; ++l) sb[mine][32 * half + l] = strata_mma_f16(in ? xr[l] : 0.0f);
    }
    __syncthreads();
STRATA_UNROLL
    for (int kk = 0; kk < MMA_BK; kk += 16) {
      unsigned a[2][4], b[4][2];
STRATA_UNROLL
      for (int i = 0; i < 2; ++i) {
        const int r = wm + 16 * i + g;
        a[i][0] = strata_pair(&sa[r][kk + 2 * t]);
        a[i][1] = strata_pair(&sa[r + 8][kk + 2 * t]);
        a[i][2] = strata_pair(&sa[r][kk + 2 * t + 8]);
        a[i][3] = strata_pair(&sa[r + 8][kk + 2 * t + 8]);
      }
STRATA_UNROLL
      for (int j = 0; j < 4; ++j) {
        const int c = wn + 8 * j + g;
        b[j][0] = strata_pair(&sb[c][kk + 2 * t]);
        b[j][1] = strata_pair(&sb[c][kk + 2 * t + 8]);
      }
STRATA_UNROLL
      for (int i = 0; i < 2; ++i)
STRATA_UNROLL
        for (int j = 0; j < 4; ++j) strata_mma_16816(acc[i][j], a[i], b[j]);
    }
    __syncthreads();  // the tile is read before the next step writes it
  }
STRATA_UNROLL
  for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
    for (int j = 0; j < 4; ++j) {
STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm + 16 * i + g + (e >> 1) * 8;
        const int tok = t0 + wn + 8 * j + 2 * t + (e & 1);
        if (row < n_rows && tok < n_tok) strata_put(y0, y1, y2, n0, n1, n_rows, row, tok, acc[i][j][e]);
      }
    }
  }
}

// strata_mma3_<type>: matvec3_entry's arguments and outputs for n_tok rows
// of x (any number), one launch (mma_source.h).
#define STRATA_MMA_ENTRY(type, Format)                                                   \
  STRATA_KERNEL strata_mma3_##type(const u8* w, const float* x, float* y0, float* y1,   \
                                   float* y2, int n0, int n1, int n_rows, int n_cols,   \
                                   long long row_bytes, int n_tok) {                    \
    mma_tile<Format>(w, x, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, n_tok);       \
  }

#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_0)
STRATA_MMA_ENTRY(q4_0, Q4_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_1)
STRATA_MMA_ENTRY(q4_1, Q4_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_0)
STRATA_MMA_ENTRY(q5_0, Q5_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_1)
STRATA_MMA_ENTRY(q5_1, Q5_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q8_0)
STRATA_MMA_ENTRY(q8_0, Q8_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_mxfp4)
STRATA_MMA_ENTRY(mxfp4, MXFP4)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_k)
STRATA_MMA_ENTRY(q4_k, Q4_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_k)
STRATA_MMA_ENTRY(q5_k, Q5_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q6_k)
STRATA_MMA_ENTRY(q6_k, Q6_K)
#endif
