// The int8 matrix x few-columns kernel on the tensor cores: see
// matvec_source.h (matvec3_mma_entry). CUDA C++ for NVRTC, compiled after
// matvec.cuh (its formats, matvec_i8's sums) and mma_ops.cuh (mma.sync) in
// the matvec program; with CUDA's keywords defined away it also compiles
// as host C++ for the emulation.
//
// It gives matvec_i8's sums bit for bit, so that a column's results never
// depend on how many columns a launch has (batch invariance): mma.sync
// m16n8k32 gives each unit's exact integer dot products for 16 rows x 8
// columns, and each is scaled by matvec_i8's expression and added where
// matvec_i8 adds it. There lane l of a row's warp (of split part p, R =
// ROW_WARPS) sums the terms of units p 32 + l, p 32 + l + 32 R, ... in
// order from 0, the warp adds its 32 lanes' sums by xor shuffles (16, 8,
// 4, 2, 1) and the parts' sums are added in part order. The shuffles' tree,
// with its leaves in bit-reversed lane order (leaf i = lane bitrev5(i)),
// is the complete binary tree over i in order: its root is T(0..15) +
// T(16..31), its lowest sums lanes l and l ^ 16. So this kernel walks the
// lanes in that order, sums a lane's units as matvec_i8's lane does, and
// merges each finished lane sum into five running subtree sums, a binary
// counter's: at leaf i, while bit b of i is set, v = sub[b] + v, else
// sub[b] = v. Float addition commutes, so the operands' sides never
// matter; only the tree does.
#ifndef STRATA_MATVEC_MMA_TILES
#define STRATA_MATVEC_MMA_TILES ((NCOLS + 7) / 8)  // n8 tiles of columns
#endif

// Lane l's leaf: l with its 5 bits reversed (and back).
__device__ __forceinline__ int strata_bitrev5(int l) {
  return ((l & 1) << 4) | ((l & 2) << 2) | (l & 4) | ((l & 8) >> 2) | ((l & 16) >> 4);
}

// matvec_i8's outputs for NCOLS int8 columns: a warp takes 16 rows (a
// block blockDim.x / 2 rows), each unit its 16 rows' q staged in shared
// memory (two lanes a row, unit_words) and multiplied by each 8-column
// tile with mma.sync (mma_unit_sums: Q6_K's halves apart).
template <typename Format>
__device__ __forceinline__ void matvec_mma_i8(const u8* __restrict__ w, const signed char* xq,
                                              const float* xd, const float* xs, float* y0,
                                              float* y1, float* y2, int n0, int n1, int n_rows,
                                              int n_cols, long long row_bytes) {
  constexpr int kTiles = STRATA_MATVEC_MMA_TILES;
  __shared__ unsigned int sq[THREADS / 32][16][9];  // [warp][row][q words; 1 of padding]
  __shared__ float ssc[THREADS / 32][16][3];        // [warp][row][scale 0, scale 1, min]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = (blockIdx.x * (blockDim.x / 32) + warp) * 16;
  if (row0 >= n_rows) return;  // a whole warp past the end (no block barrier below)
  // The row this lane unpacks, two lanes a row (past the end: row 0, whose
  // sums are not written, as matvec_i8 reads it).
  const int mine = lane >> 1, half = lane & 1;
  const u8* wr = w + (long long)(row0 + mine < n_rows ? row0 + mine : 0) * row_bytes;
  const int units = n_cols / 32;
  float sub[5][kTiles][4], total[kTiles][4];
STRATA_UNROLL
  for (int j = 0; j < kTiles; ++j)
STRATA_UNROLL
    for (int e = 0; e < 4; ++e) {
      total[j][e] = 0.0f;
STRATA_UNROLL
      for (int b = 0; b < 5; ++b) sub[b][j][e] = 0.0f;
    }

  for (int part = 0; part < ROW_WARPS; ++part) {
    for (int i = 0; i < 32; ++i) {
      float cur[kTiles][4];  // lane bitrev5(i)'s sums, as matvec_i8's acc
STRATA_UNROLL
      for (int j = 0; j < kTiles; ++j)
STRATA_UNROLL
        for (int e = 0; e < 4; ++e) cur[j][e] = 0.0f;
      for (int u = 32 * part + strata_bitrev5(i); u < units; u += 32 * ROW_WARPS) {
        unsigned int q[8];
        float scale[2] = {0.0f, 0.0f}, min = 0.0f;
        Format::unit_words(wr, n_cols, u, q, scale, &min);
        __syncwarp();  // the unit before is read
STRATA_UNROLL
        for (int k = 0; k < 4; ++k) sq[warp][mine][4 * half + k] = q[4 * half + k];
        if (half == 0) {
          ssc[warp][mine][0] = scale[0];
          ssc[warp][mine][1] = scale[1];
          ssc[warp][mine][2] = min;
        }
        __syncwarp();
        const unsigned int a[4] = {sq[warp][g][t], sq[warp][g + 8][t], sq[warp][g][4 + t],
                                   sq[warp][g + 8][4 + t]};
        const float s0[2] = {ssc[warp][g][0], ssc[warp][g + 8][0]};
        const float s1[2] = {ssc[warp][g][1], ssc[warp][g + 8][1]};
        const float mn[2] = {ssc[warp][g][2], ssc[warp][g + 8][2]};
STRATA_UNROLL
        for (int j = 0; j < kTiles; ++j) {
          // B: column 8 j + g's q, values 4 t .. 4 t + 3 and 16 + 4 t ..
          const int c = 8 * j + g;
          unsigned int b[2] = {0u, 0u};
          if (c < NCOLS) {
            const u8* xc = (const u8*)xq + (long long)c * n_cols + 32 * u;
            b[0] = load_as<unsigned int>(xc + 4 * t);
            b[1] = load_as<unsigned int>(xc + 16 + 4 * t);
          }
          int sum0[4], sum1[4];
          mma_unit_sums<Format::kI8Scales>(a, b, sum0, sum1);
STRATA_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int col = 8 * j + 2 * t + (e & 1), h = e >> 1;
            if (col >= NCOLS) continue;
            const long long at = (long long)col * units + u;
            const float dx = xd[at];
            const float sx = Format::kI8Min ? xs[at] : 0.0f;
            if (Format::kI8Scales == 1) {  // matvec_i8's expressions, term for term
              if (Format::kI8Q8_1) {
                cur[j][e] += s0[h] * dx * small_int_float(sum0[e]) - mn[h] * sx;
              } else if (Format::kI8Min) {
                cur[j][e] += s0[h] * dx * small_int_float(sum0[e]) - mn[h] * dx * sx;
              } else {
                cur[j][e] += s0[h] * dx * small_int_float(sum0[e]);
              }
            } else {
              cur[j][e] += s0[h] * dx * small_int_float(sum0[e]) +
                           s1[h] * dx * small_int_float(sum1[e]);
            }
          }
        }
      }
      // Leaf i into the tree (the binary counter above); at i = 31 v is
      // the part's sum, added to the others in part order.
STRATA_UNROLL
      for (int j = 0; j < kTiles; ++j) {
STRATA_UNROLL
        for (int e = 0; e < 4; ++e) {
          // Up the levels while i's bit is 1 (adding the subtree kept
          // there), to the first 0 bit, which keeps v; past level 4, v is
          // the whole part. (Levels unrolled: sub stays in registers.)
          float v = cur[j][e];
          bool kept = false;
STRATA_UNROLL
          for (int level = 0; level < 5; ++level) {
            if (kept) continue;
            if (((i >> level) & 1) == 0) {
              sub[level][j][e] = v;
              kept = true;
            } else {
              v = sub[level][j][e] + v;
            }
          }
          if (!kept) total[j][e] = part == 0 ? v : total[j][e] + v;
        }
      }
    }
  }
STRATA_UNROLL
  for (int j = 0; j < kTiles; ++j) {
STRATA_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
      if (row < n_rows && col < NCOLS) strata_put(y0, y1, y2, n0, n1, n_rows, row, col, total[j][e]);
    }
  }
}

// strata_matvec3_mma_<type>: strata_matvec3_i8_<type>'s arguments and
// outputs, bit for bit (matvec_source.h).
#define STRATA_MATVEC_MMA_ENTRY(type, Format)                                                    \
  STRATA_KERNEL strata_matvec3_mma_##type(const u8* w, const signed char* xq, const float* xd,  \
                                          const float* xs, float* y0, float* y1, float* y2,     \
                                          int n0, int n1, int n_rows, int n_cols,               \
                                          long long row_bytes) {                                \
    strata_grid_dependency();                                                                   \
    matvec_mma_i8<Format>(w, xq, xd, xs, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes);        \
  }

#if !defined(STRATA_MATVEC_NO_ENTRIES)
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_0)
STRATA_MATVEC_MMA_ENTRY(q4_0, Q4_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_1)
STRATA_MATVEC_MMA_ENTRY(q4_1, Q4_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_0)
STRATA_MATVEC_MMA_ENTRY(q5_0, Q5_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_1)
STRATA_MATVEC_MMA_ENTRY(q5_1, Q5_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q8_0)
STRATA_MATVEC_MMA_ENTRY(q8_0, Q8_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_mxfp4)
STRATA_MATVEC_MMA_ENTRY(mxfp4, MXFP4)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_k)
STRATA_MATVEC_MMA_ENTRY(q4_k, Q4_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_k)
STRATA_MATVEC_MMA_ENTRY(q5_k, Q5_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q6_k)
STRATA_MATVEC_MMA_ENTRY(q6_k, Q6_K)
#endif
#endif
