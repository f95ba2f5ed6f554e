// The tensor-core matrix kernel on sm_90's warpgroup instructions (prefill,
// issue 32): see wgmma_source.h (formula, tiles, numerics, launch). CUDA
// C++ for NVRTC (-arch=compute_90a), compiled after matvec.cuh (its formats
// and strata_put), mma_ops.cuh (strata_mma_f16) and wgmma_ops.cuh in one
// program; with CUDA's keywords defined away it also compiles as host C++,
// and the emulation runs wgmma by its documented layouts.
#if THREADS != 256
#error "the wgmma kernel is written for 2 warpgroups a block (-DTHREADS=256)"
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma.cuh needs sm_90a's instructions (-arch=compute_90a)"
#endif
#define WG_BM 128  // weight rows a block: 64 a warpgroup
#define WG_BN 128  // tokens a block
#define WG_BK 32   // columns a step: one 32-value unit of every row
#define WG_TILE_BYTES (128 * WG_BK * 2)  // a 128-row tile of a step, f16
// Core matrices 8 halves further along k: 16 of them (128 rows) on.
#define WG_LBO (16 * 128)
#define WG_SBO 128  // 8 rows further

// The byte offset of row `row` (0-127), halves 8 c .. 8 c + 7 of a step's
// tile: core matrix (row / 8, c) at (16 c + row / 8) x 128 bytes, its row
// row % 8 at 16 (row % 8) (wgmma_ops.cuh's K-major layout).
__device__ __forceinline__ int wgmma_at(int row, int c) {
  return (16 * c + (row >> 3)) * 128 + (row & 7) * 16;
}

// A block's shared tiles, [buffer][A (weight rows), B (tokens)]; 128-byte
// aligned (a descriptor's tiles need 16).
struct alignas(128) WgmmaTiles {
  unsigned char t[2][2][WG_TILE_BYTES];
};

// Eight f16 of 8 floats, as one 16-byte store's words.
__device__ __forceinline__ uint4 wgmma_halves(const float* v) {
  uint4 h;
  h.x = strata_pack(strata_mma_f16(v[0]), strata_mma_f16(v[1]));
  h.y = strata_pack(strata_mma_f16(v[2]), strata_mma_f16(v[3]));
  h.z = strata_pack(strata_mma_f16(v[4]), strata_mma_f16(v[5]));
  h.w = strata_pack(strata_mma_f16(v[6]), strata_mma_f16(v[7]));
  return h;
}

// Y = X W^T over a tile of WG_BM weight rows and WG_BN tokens: block b is
// rows (b % row_tiles) WG_BM .., tokens (b / row_tiles) WG_BN ... Each
// step (32 columns) thread i fills half `i % 2` (16 values) of weight row
// i / 2's unit and of token i / 2's columns, f16, into one of two shared
// buffers; warpgroup v then multiplies its 64 rows by the 128 tokens with
// two m64n128k16 wgmma. The step's global loads (Format::fetch, x) are
// issued before the step before is multiplied and unpacked into the other
// buffer while the tensor cores run it: one wait and one barrier a step.
template <typename Format>
__device__ __forceinline__ void wgmma_tile(const u8* __restrict__ w, const float* x, float* y0,
                                           float* y1, float* y2, int n0, int n1, int n_rows,
                                           int n_cols, long long row_bytes, int n_tok) {
  __shared__ WgmmaTiles tiles;
  unsigned char (*smem)[2][WG_TILE_BYTES] = tiles.t;  // [buffer][A, B]
  const int row_tiles = (n_rows + WG_BM - 1) / WG_BM;
  const int m0 = (int)(blockIdx.x % row_tiles) * WG_BM;
  const int t0 = (int)(blockIdx.x / row_tiles) * WG_BN;
  const int mine = threadIdx.x >> 1, half = threadIdx.x & 1;
  const int r = m0 + mine, tok = t0 + mine;
  const int group = threadIdx.x >> 7;  // the warpgroup: rows 64 group ..
  float acc[64];
STRATA_UNROLL
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

  // The step's loads, in flight until stage() uses them.
  UnitBits wbits;
  float4 xv[4];
  auto fetch = [&](int u) {
    if (r < n_rows) Format::fetch(w + (long long)r * row_bytes, n_cols, u, &wbits);
    if (tok < n_tok) {
      const float* xr = x + (long long)tok * n_cols + 32 * u + 16 * half;  // 64-byte aligned
STRATA_UNROLL
      for (int i = 0; i < 4; ++i) xv[i] = load_as<float4>(xr + 4 * i);
    }
  };
  // The loads as f16 in buffer b: this thread's 16 values of the row's
  // unit (value = scale q - min, the format's dequantized value) and of
  // the token's columns (zeros past the matrix and the tokens).
  auto stage = [&](int u, int b) {
    float v[16];
    if (r < n_rows) {
      unsigned int q[8];
      float scale[2] = {0.0f, 0.0f}, min = 0.0f;
      Format::unpack_words(wbits, u, q, scale, &min);
      const float s = Format::kI8Scales == 2 && half ? scale[1] : scale[0];
STRATA_UNROLL
      for (int l = 0; l < 16; ++l) {
        v[l] = (float)(signed char)byte_of(q + 4 * half, l) * s - min;
      }
    } else {
STRATA_UNROLL
      for (int l = 0; l < 16; ++l) v[l] = 0.0f;
    }
    unsigned char* a = smem[b][0];
    *(uint4*)(a + wgmma_at(mine, 2 * half)) = wgmma_halves(v);
    *(uint4*)(a + wgmma_at(mine, 2 * half + 1)) = wgmma_halves(v + 8);
    const bool in = tok < n_tok;
STRATA_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[4 * i + 0] = in ? xv[i].x : 0.0f;
      v[4 * i + 1] = in ? xv[i].y : 0.0f;
      v[4 * i + 2] = in ? xv[i].z : 0.0f;
      v[4 * i + 3] = in ? xv[i].w : 0.0f;
    }
    unsigned char* bt = smem[b][1];
    *(uint4*)(bt + wgmma_at(mine, 2 * half)) = wgmma_halves(v);
    *(uint4*)(bt + wgmma_at(mine, 2 * half + 1)) = wgmma_halves(v + 8);
    strata_wgmma_smem_fence();
  };

  const int steps = n_cols / WG_BK;
  fetch(0);
  stage(0, 0);
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int b = s & 1;
    if (s + 1 < steps) fetch(s + 1);
STRATA_UNROLL
    for (int i = 0; i < 64; ++i) strata_wgmma_hold(acc[i]);
    strata_wgmma_fence();
STRATA_UNROLL
    for (int k = 0; k < 2; ++k) {  // the step's two k16 halves, in order
      const unsigned long long da = strata_wgmma_desc(
          smem, smem[b][0] + (32 * k + 8 * group) * 128, WG_LBO, WG_SBO);
      const unsigned long long db =
          strata_wgmma_desc(smem, smem[b][1] + 32 * k * 128, WG_LBO, WG_SBO);
      strata_wgmma_m64n128k16(acc, da, db, 1, smem);
    }
    strata_wgmma_commit();
    if (s + 1 < steps) stage(s + 1, b ^ 1);  // buffer b ^ 1 was read a step ago
    strata_wgmma_wait<0>();
STRATA_UNROLL
    for (int i = 0; i < 64; ++i) strata_wgmma_hold(acc[i]);
    __syncthreads();  // buffer b ^ 1 is whole, and every warpgroup is done with b
  }

  // The accumulators (wgmma_ops.cuh's layout) to the outputs.
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
STRATA_UNROLL
  for (int j = 0; j < 16; ++j) {
STRATA_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int row = m0 + 64 * group + 16 * warp + g + 8 * (e >> 1);
      const int tk = t0 + 8 * j + 2 * t + (e & 1);
      if (row < n_rows && tk < n_tok) strata_put(y0, y1, y2, n0, n1, n_rows, row, tk, acc[4 * j + e]);
    }
  }
}

// strata_wgmma3_<type>: strata_mma3_<type>'s arguments and outputs (mma.cuh)
// on the warpgroup instructions.
#define STRATA_WGMMA_ENTRY(type, Format)                                                  \
  STRATA_KERNEL strata_wgmma3_##type(const u8* w, const float* x, float* y0, float* y1,  \
                                     float* y2, int n0, int n1, int n_rows, int n_cols,  \
                                     long long row_bytes, int n_tok) {                   \
    strata_grid_dependency();                                                            \
    wgmma_tile<Format>(w, x, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, n_tok);      \
  }

#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_0)
STRATA_WGMMA_ENTRY(q4_0, Q4_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_1)
STRATA_WGMMA_ENTRY(q4_1, Q4_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_0)
STRATA_WGMMA_ENTRY(q5_0, Q5_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_1)
STRATA_WGMMA_ENTRY(q5_1, Q5_1)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q8_0)
STRATA_WGMMA_ENTRY(q8_0, Q8_0)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_mxfp4)
STRATA_WGMMA_ENTRY(mxfp4, MXFP4)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q4_k)
STRATA_WGMMA_ENTRY(q4_k, Q4_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q5_k)
STRATA_WGMMA_ENTRY(q5_k, Q5_K)
#endif
#if !defined(STRATA_ONE_TYPE) || defined(STRATA_TYPE_q6_k)
STRATA_WGMMA_ENTRY(q6_k, Q6_K)
#endif
