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

// A warp's 32 rows x 32 tokens of results (2 x 4 mma tiles' accumulators,
// the m16n8 layout: acc[i][j][e] is row r0 + 16 i + g + 8 (e / 2), token
// k0 + 8 j + 2 t + e % 2) to the outputs, those inside n_rows and n_tok.
__device__ __forceinline__ void mma_put_tile(const float (*acc)[4][4], int r0, int k0, int g,
                                             int t, float* y0, float* y1, float* y2, int n0,
                                             int n1, int n_rows, int n_tok) {
STRATA_UNROLL
  for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
    for (int j = 0; j < 4; ++j) {
STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int row = r0 + 16 * i + g + (e >> 1) * 8;
        const int tok = k0 + 8 * j + 2 * t + (e & 1);
        if (row < n_rows && tok < n_tok) strata_put(y0, y1, y2, n0, n1, n_rows, row, tok, acc[i][j][e]);
      }
    }
  }
}

// Y = X W^T over a tile of MMA_BM weight rows and MMA_BN tokens: block b is
// rows (b % row_tiles) MMA_BM .., tokens (b / row_tiles) MMA_BN ..; 4 warps,
// each 32 rows x 32 tokens (2 x 4 mma tiles). Per MMA_BK step every thread
// dequantizes one 32-value unit of a weight row and rounds 32 values of a
// token to f16 into shared memory; the warps then run 4 k16 steps.
template <typename Format>
__device__ __forceinline__ void mma_tile(const u8* __restrict__ w, const float* x,
                                         float* y0, float* y1, float* y2, int n0, int n1,
                                         int n_rows, int n_cols, long long row_bytes, int n_tok) {
  // 16-byte aligned rows of 144 bytes: the fragments' ldmatrix rows.
  alignas(16) __shared__ unsigned short sa[MMA_BM][MMA_BK + MMA_PAD];  // [weight row][k]
  alignas(16) __shared__ unsigned short sb[MMA_BN][MMA_BK + MMA_PAD];  // [token][k]
  const int row_tiles = (n_rows + MMA_BM - 1) / MMA_BM;
  const int m0 = (int)(blockIdx.x % row_tiles) * MMA_BM;
  const int t0 = (int)(blockIdx.x / row_tiles) * MMA_BN;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
  // The row this lane gives ldmatrix: row lr of matrix lm.
  const int lm = lane >> 3, lr = lane & 7;
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
        Format::unit(w + (long long)r * row_bytes, n_cols, u, v);
      } else {
STRATA_UNROLL
        for (int l = 0; l < 32; ++l) v[l] = 0.0f;
      }
      // 8 halves a 16-byte store (the rows' 144 bytes and the 64 of a
      // half keep each store aligned).
STRATA_UNROLL
      for (int c = 0; c < 4; ++c) store_as(&sa[mine][32 * half + 8 * c], strata_mma_f16x8(v + 8 * c));
      const int tok = t0 + mine;
      const float* xr = x + (long long)tok * n_cols + 32 * u;
      const bool in = tok < n_tok && u < units;
STRATA_UNROLL
      for (int l = 0; l < 32; ++l) v[l] = in ? xr[l] : 0.0f;
STRATA_UNROLL
      for (int c = 0; c < 4; ++c) store_as(&sb[mine][32 * half + 8 * c], strata_mma_f16x8(v + 8 * c));
    }
    __syncthreads();
STRATA_UNROLL
    for (int kk = 0; kk < MMA_BK; kk += 16) {
      // The fragments (strata_mma_16816's layout) by ldmatrix: A's rows
      // 0-7 and 8-15 of halves kk.. then kk + 8..; B's tokens 8 j .. of
      // halves kk.. and kk + 8.., two token tiles a load.
      unsigned a[2][4], b[4][2];
STRATA_UNROLL
      for (int i = 0; i < 2; ++i) {
        strata_ldmatrix_x4(a[i], &sa[wm + 16 * i + lr + 8 * (lm & 1)][kk + 8 * (lm >> 1)]);
      }
STRATA_UNROLL
      for (int j = 0; j < 4; j += 2) {
        unsigned r[4];
        strata_ldmatrix_x4(r, &sb[wn + 8 * (j + (lm >> 1)) + lr][kk + 8 * (lm & 1)]);
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
STRATA_UNROLL
      for (int i = 0; i < 2; ++i)
STRATA_UNROLL
        for (int j = 0; j < 4; ++j) strata_mma_16816(acc[i][j], a[i], b[j]);
    }
    __syncthreads();  // the tile is read before the next step writes it
  }
  mma_put_tile(acc, m0 + wm, t0 + wn, g, t, y0, y1, y2, n0, n1, n_rows, n_tok);
}

// The same tile on the int8 tensor cores, for the types whose products with
// Q8 values are integer (Format::unit_words: value = scale q - min per 32-value
// unit; Q6_K: a scale each 16 values, Format::kI8Scales 2, its halves summed
// apart by two m16n8k16 mma.sync): x is given as int8 rows xq [n_tok][n_cols] with per-unit scales xd
// and sums of q xb ([n_tok][n_cols / 32]; strata_quantize_rows, the values
// the cpu backend multiplies). Per unit, mma.sync m16n8k32 s8 gives the
// exact integer dot product sumi of a weight row's and a token's q, and
//   y += (scale_w d_x) sumi - (min_w d_x) sum_x
// in unit order (the cpu backend's legacy-quant sum, d_w d_x sumi; for the
// K-quants the same value as its f32 sum of dequantized weights).
// The K-quants (Format::kI8Super: a 256-value block's units share d, dmin
// and, on the Q8_K rows they pair with, d_x) sum a block in integers
// first, each unit's sumi times its integer sub-scale and its sum_x times
// its integer min, and then add
//   y += (d_w d_x) isum - (dmin_w d_x) imin
// a block (ggml's q4_K x q8_K dot product has the same shape): a quarter of
// the float work a unit. |isum| < 2^28 for every K-quant (8 units of
// 32 x 31 x 127 x 63 at most, Q6_K's 16 halves of 16 x 32 x 127 x 127).
// imin (Q4_K, Q5_K: a min each unit) is a block's product of its rows'
// 8 integer mins m (0-63) and its tokens' 8 unit sums of q (within +-4064,
// split as 64 h + l: h in -64..63, l in 0..63, both int8), so the tensor
// cores give it once a block: two mma.sync of A = the rows' m (k 0-7, the
// rest zero) times B = the tokens' h and l, imin = 64 sum m h + sum m l,
// exact, as the two integer multiply-adds a unit and accumulator it
// replaces were.
// Shared rows hold 64 bytes of q and 16 of padding (20 words: the fragment
// loads' banks differ). The shared tiles are double-buffered: each step's
// global loads (Format::fetch, the rows' int8 words) are issued before the
// warps multiply the step before, and unpacked into the other buffer after
// it, so a block waits on memory once, not once a step (one barrier a step).
template <typename Format>
__device__ __forceinline__ void mma_tile_i8(const u8* __restrict__ w,
                                            const signed char* xq,
                                            const float* xd,
                                            const float* xb, float* y0, float* y1,
                                            float* y2, int n0, int n1, int n_rows, int n_cols,
                                            long long row_bytes, int n_tok) {
  // [buffer][weight row][64 q bytes, 16 padding]: 16-byte aligned rows of
  // 80 bytes, the fragments' ldmatrix rows.
  alignas(16) __shared__ unsigned sa[2][MMA_BM][20];
  alignas(16) __shared__ unsigned sb[2][MMA_BN][20];  // [buffer][token][...]
  // The scales a lane reads a unit, packed so that one 16-byte load gets a
  // row's or two tokens' (a unit's epilogue: 8 loads, not 28):
  // [buffer][row][unit of the step] (scale of values 0-15, of 16-31
  // (Format::kI8Scales 2; else the same), min, 0), [buffer][token pair]
  // [unit] (d, sum of the even token, d, sum of the odd one).
  alignas(16) __shared__ float4 sw_f[2][MMA_BM][2];
  alignas(16) __shared__ float4 sx_f[2][MMA_BN / 2][2];
  // The K-quants' integers: [buffer][row][unit][sc, Q6_K's second sc]
  // (one 8-byte load); and [buffer][row][d, dmin] of the step's block.
  alignas(16) __shared__ int2 sw_int[2][MMA_BM][2];
  // The mins' block products' operands: [block parity][row][unit of the
  // block] m, [block parity][token][unit] h and l (above).
  __shared__ signed char sw_m[2][MMA_BM][8], sx_h[2][MMA_BN][8], sx_l[2][MMA_BN][8];
  __shared__ float sw_d[2][MMA_BM][2];
  const int row_tiles = (n_rows + MMA_BM - 1) / MMA_BM;
  const int m0 = (int)(blockIdx.x % row_tiles) * MMA_BM;
  const int t0 = (int)(blockIdx.x / row_tiles) * MMA_BN;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
  const int lm = lane >> 3, lr = lane & 7;  // this lane's ldmatrix row: row lr of matrix lm
  // What this thread fills each step: weight row `mine` and token `mine`
  // of the tile, unit `half` of the step.
  const int mine = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int units = n_cols / 32;
  const int r = m0 + mine, tok = t0 + mine;
  float acc[2][4][4];
  int isum[2][4][4];  // the K-quants' block sums of sc sumi
STRATA_UNROLL
  for (int i = 0; i < 2; ++i)
STRATA_UNROLL
    for (int j = 0; j < 4; ++j)
STRATA_UNROLL
      for (int e = 0; e < 4; ++e) {
        acc[i][j][e] = 0.0f;
        isum[i][j][e] = 0;
      }

  // The step's loads, in flight until stage() uses them.
  UnitBits wbits;
  uint4 xlo = {0u, 0u, 0u, 0u}, xhi = {0u, 0u, 0u, 0u};
  float xdv = 0.0f, xbv = 0.0f;
  bool in_w = false, in_x = false;
  auto fetch = [&](int k0) {
    const int u = k0 / 32 + half;
    in_w = r < n_rows && u < units;
    in_x = tok < n_tok && u < units;
    if (in_w) Format::fetch(w + (long long)r * row_bytes, n_cols, u, &wbits);
    if (in_x) {
      const u8* xr = (const u8*)xq + (long long)tok * n_cols + 32 * u;  // 32-byte aligned
      xlo = load_as<uint4>(xr);
      xhi = load_as<uint4>(xr + 16);
      xdv = xd[(long long)tok * units + u];
      xbv = xb[(long long)tok * units + u];
    }
  };
  // The loads, unpacked into buffer b.
  auto stage = [&](int k0, int b) {
    const int u = k0 / 32 + half;
    unsigned int q[8];
    if constexpr (Format::kI8Super) {
      int sc[2] = {0, 0}, m = 0;
      float d = 0.0f, dmin = 0.0f;
      if (in_w) {
        Format::unpack_ints(wbits, u, q, sc, &m, &d, &dmin);
      } else {
STRATA_UNROLL
        for (int l = 0; l < 8; ++l) q[l] = 0u;
      }
      sw_int[b][mine][half] = int2{sc[0], sc[1]};  // .y: Q6_K's second; unused by the others
      sw_m[(u / 8) & 1][mine][u % 8] = (signed char)m;
      if (half == 0) {  // the step's two units are in one block
        sw_d[b][mine][0] = d;
        sw_d[b][mine][1] = dmin;
      }
    } else {
      float scale[2] = {0.0f, 0.0f}, min = 0.0f;
      if (in_w) {
        Format::unpack_words(wbits, u, q, scale, &min);
        if (Format::kI8Scales == 1) scale[1] = scale[0];
      } else {
STRATA_UNROLL
        for (int l = 0; l < 8; ++l) q[l] = 0u;
      }
      sw_f[b][mine][half] = float4{scale[0], scale[1], min, 0.0f};
    }
STRATA_UNROLL
    for (int l = 0; l < 8; ++l) sa[b][mine][8 * half + l] = q[l];
    const uint4 lo = in_x ? xlo : uint4{0u, 0u, 0u, 0u}, hi = in_x ? xhi : uint4{0u, 0u, 0u, 0u};
    sb[b][mine][8 * half + 0] = lo.x;
    sb[b][mine][8 * half + 1] = lo.y;
    sb[b][mine][8 * half + 2] = lo.z;
    sb[b][mine][8 * half + 3] = lo.w;
    sb[b][mine][8 * half + 4] = hi.x;
    sb[b][mine][8 * half + 5] = hi.y;
    sb[b][mine][8 * half + 6] = hi.z;
    sb[b][mine][8 * half + 7] = hi.w;
    float4& pair = sx_f[b][mine >> 1][half];  // this token's half of it
    if (mine & 1) {
      pair.z = in_x ? xdv : 0.0f;
      pair.w = in_x ? xbv : 0.0f;
    } else {
      pair.x = in_x ? xdv : 0.0f;
      pair.y = in_x ? xbv : 0.0f;
    }
    if constexpr (Format::kI8Super) {
      const int sum_q = in_x ? (int)xbv : 0;  // a sum of q: an integer
      sx_h[(u / 8) & 1][mine][u % 8] = (signed char)(sum_q >> 6);  // floor: sum_q = 64 h + l
      sx_l[(u / 8) & 1][mine][u % 8] = (signed char)(sum_q & 63);
    }
  };

  fetch(0);
  int b = 0;
  for (int k0 = 0; k0 < n_cols; k0 += MMA_BK, b ^= 1) {
    stage(k0, b);
    __syncthreads();  // buffer b is whole; the other one was read a step ago
    if (k0 + MMA_BK < n_cols) fetch(k0 + MMA_BK);
STRATA_UNROLL
    for (int k = 0; k < 2; ++k) {  // the step's two units, in order
      // The fragments (strata_mma_16832_s8's layout) by ldmatrix: the
      // unit's 32 bytes of each row are words 8 k .. 8 k + 7, A's rows
      // 0-7 and 8-15 of its first 16 bytes then of its next; B two token
      // tiles a load.
      unsigned a[2][4], bf[4][2];
STRATA_UNROLL
      for (int i = 0; i < 2; ++i) {
        strata_ldmatrix_x4(a[i], &sa[b][wm + 16 * i + lr + 8 * (lm & 1)][8 * k + 4 * (lm >> 1)]);
      }
STRATA_UNROLL
      for (int j = 0; j < 4; j += 2) {
        unsigned r4[4];
        strata_ldmatrix_x4(r4, &sb[b][wn + 8 * (j + (lm >> 1)) + lr][8 * k + 4 * (lm & 1)]);
        bf[j][0] = r4[0];
        bf[j][1] = r4[1];
        bf[j + 1][0] = r4[2];
        bf[j + 1][1] = r4[3];
      }
      if constexpr (Format::kI8Super) {
        // This lane's rows' integer sub-scales for the unit (Q6_K: two).
        int wsc[2][2][2];
STRATA_UNROLL
        for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int2 sc = sw_int[b][wm + 16 * i + g + 8 * h][k];
            wsc[i][h][0] = sc.x;
            wsc[i][h][1] = Format::kI8Scales == 2 ? sc.y : 0;
          }
        }
STRATA_UNROLL
        for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
          for (int j = 0; j < 4; ++j) {
            int sum0[4], sum1[4];
            mma_unit_sums<Format::kI8Scales>(a[i], bf[j], sum0, sum1);
STRATA_UNROLL
            for (int e = 0; e < 4; ++e) {
              if (Format::kI8Scales == 1) {
                isum[i][j][e] += wsc[i][e >> 1][0] * sum0[e];
              } else {  // Q6_K: each half its scale, no min
                isum[i][j][e] += wsc[i][e >> 1][0] * sum0[e] + wsc[i][e >> 1][1] * sum1[e];
              }
            }
          }
        }
      } else {
        // This lane's rows' and tokens' scales for the unit, in registers.
        // ws[i][h][v]: row half h of tile i, the scale of values 16 v ...
        float ws[2][2][2], wmin[2][2], xs[4][2], xsum[4][2];
STRATA_UNROLL
        for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
          for (int h = 0; h < 2; ++h) {
            const float4 f = sw_f[b][wm + 16 * i + g + 8 * h][k];
            ws[i][h][0] = f.x;
            ws[i][h][1] = f.y;
            wmin[i][h] = f.z;
          }
        }
STRATA_UNROLL
        for (int j = 0; j < 4; ++j) {
          // Tokens wn + 8 j + 2 t and the one after: one pair.
          const float4 f = sx_f[b][(wn + 8 * j) / 2 + t][k];
          xs[j][0] = f.x;
          xsum[j][0] = f.y;
          xs[j][1] = f.z;
          xsum[j][1] = f.w;
        }
STRATA_UNROLL
        for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
          for (int j = 0; j < 4; ++j) {
            int sum0[4], sum1[4];
            mma_unit_sums<Format::kI8Scales>(a[i], bf[j], sum0, sum1);
STRATA_UNROLL
            for (int e = 0; e < 4; ++e) {
              const float dx = xs[j][e & 1];
              if (Format::kI8Scales == 1) {
                // Q8_1 rows (Format::kI8Q8_1): xsum is the unit's s = f16(d sum q).
                const float min_term = Format::kI8Q8_1 ? wmin[i][e >> 1] * xsum[j][e & 1]
                                                       : wmin[i][e >> 1] * dx * xsum[j][e & 1];
                acc[i][j][e] += ws[i][e >> 1][0] * dx * small_int_float(sum0[e]) - min_term;
              } else {  // a scale each 16 values
                acc[i][j][e] += ws[i][e >> 1][0] * dx * small_int_float(sum0[e]) +
                                ws[i][e >> 1][1] * dx * small_int_float(sum1[e]);
              }
            }
          }
        }
      }
    }
    if constexpr (Format::kI8Super) {
      if ((k0 + MMA_BK) % 256 == 0) {  // the end of a 256-value block: its float terms
        // The mins' products (Q4_K, Q5_K): m of rows g and g + 8 of each
        // row tile in k 0-7 of A (lanes t = 0, 1), h and l of token g of
        // each token tile in k 0-7 of B.
        const int p = (k0 / 256) & 1;
        unsigned am[2][4] = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}};
        unsigned bh[4][2] = {{0u, 0u}, {0u, 0u}, {0u, 0u}, {0u, 0u}};
        unsigned bl[4][2] = {{0u, 0u}, {0u, 0u}, {0u, 0u}, {0u, 0u}};
        if (Format::kI8Scales == 1 && t < 2) {
STRATA_UNROLL
          for (int i = 0; i < 2; ++i) {
            am[i][0] = *(const unsigned*)&sw_m[p][wm + 16 * i + g][4 * t];
            am[i][1] = *(const unsigned*)&sw_m[p][wm + 16 * i + g + 8][4 * t];
          }
STRATA_UNROLL
          for (int j = 0; j < 4; ++j) {
            bh[j][0] = *(const unsigned*)&sx_h[p][wn + 8 * j + g][4 * t];
            bl[j][0] = *(const unsigned*)&sx_l[p][wn + 8 * j + g][4 * t];
          }
        }
STRATA_UNROLL
        for (int i = 0; i < 2; ++i) {
STRATA_UNROLL
          for (int j = 0; j < 4; ++j) {
            int dh[4] = {0, 0, 0, 0}, dl[4] = {0, 0, 0, 0};
            if (Format::kI8Scales == 1) {
              strata_mma_16832_s8(dh, am[i], bh[j]);
              strata_mma_16832_s8(dl, am[i], bl[j]);
            }
            const float4 pair = sx_f[b][(wn + 8 * j) / 2 + t][0];  // the block's d_x
STRATA_UNROLL
            for (int e = 0; e < 4; ++e) {
              const int rr = wm + 16 * i + g + 8 * (e >> 1);
              const float dx = (e & 1) ? pair.z : pair.x;
              const int imin = 64 * dh[e] + dl[e];
              acc[i][j][e] += sw_d[b][rr][0] * dx * (float)isum[i][j][e] -
                              sw_d[b][rr][1] * dx * (float)imin;
              isum[i][j][e] = 0;
            }
          }
        }
      }
    }
  }
  mma_put_tile(acc, m0 + wm, t0 + wn, g, t, y0, y1, y2, n0, n1, n_rows, n_tok);
}

// strata_mma3_i8_<type>: strata_mma3_<type>'s tile and outputs from int8 rows.
#define STRATA_MMA_I8_ENTRY(type, Format)                                                     \
  STRATA_KERNEL strata_mma3_i8_##type(const u8* w, const signed char* xq, const float* xd,   \
                                      const float* xb, float* y0, float* y1, float* y2,      \
                                      int n0, int n1, int n_rows, int n_cols,                \
                                      long long row_bytes, int n_tok) {                      \
    strata_grid_dependency();                                                                \
    mma_tile_i8<Format>(w, xq, xd, xb, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, n_tok); \
  }

// strata_mma3_<type>: matvec3_entry's arguments and outputs for n_tok rows
// of x (any number), one launch (mma_source.h).
#define STRATA_MMA_ENTRY(type, Format)                                                   \
  STRATA_KERNEL strata_mma3_##type(const u8* w, const float* x, float* y0, float* y1,   \
                                   float* y2, int n0, int n1, int n_rows, int n_cols,   \
                                   long long row_bytes, int n_tok) {                    \
    strata_grid_dependency();                                                           \
    mma_tile<Format>(w, x, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, n_tok);       \
  }

#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_0)
STRATA_MMA_ENTRY(q4_0, Q4_0)
STRATA_MMA_I8_ENTRY(q4_0, Q4_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_1)
STRATA_MMA_ENTRY(q4_1, Q4_1)
STRATA_MMA_I8_ENTRY(q4_1, Q4_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_0)
STRATA_MMA_ENTRY(q5_0, Q5_0)
STRATA_MMA_I8_ENTRY(q5_0, Q5_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_1)
STRATA_MMA_ENTRY(q5_1, Q5_1)
STRATA_MMA_I8_ENTRY(q5_1, Q5_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q8_0)
STRATA_MMA_ENTRY(q8_0, Q8_0)
STRATA_MMA_I8_ENTRY(q8_0, Q8_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_mxfp4)
STRATA_MMA_ENTRY(mxfp4, MXFP4)
STRATA_MMA_I8_ENTRY(mxfp4, MXFP4)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_k)
STRATA_MMA_ENTRY(q4_k, Q4_K)
STRATA_MMA_I8_ENTRY(q4_k, Q4_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_k)
STRATA_MMA_ENTRY(q5_k, Q5_K)
STRATA_MMA_I8_ENTRY(q5_k, Q5_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q6_k)
STRATA_MMA_ENTRY(q6_k, Q6_K)
STRATA_MMA_I8_ENTRY(q6_k, Q6_K)
#endif
