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
#define WG_BM 256  // weight rows a block: 128 a warpgroup, two m64 tiles
#define WG_BN 128  // tokens a block
#define WG_BK 32   // columns a step: one 32-value unit of every row
#define WG_A_BYTES (WG_BM * WG_BK * 2)  // a step's weight tile, f16: 16 KiB
#define WG_B_BYTES (WG_BN * WG_BK * 2)  // its token tile: 8 KiB
#define WG_SBO 128  // the core matrix 8 rows further (wgmma_ops.cuh)

// The byte offset of row `row`, halves 8 c .. 8 c + 7, of a step's tile of
// `rows` rows: core matrix (row / 8, c) at (rows / 8 c + row / 8) x 128
// bytes, its row row % 8 at 16 (row % 8) (wgmma_ops.cuh's K-major
// layout): the core matrix 8 halves further along k is rows x 16 bytes on
// (the descriptor's LBO).
template <int kRows>
__device__ __forceinline__ int wgmma_at(int row, int c) {
  return ((kRows / 8) * c + (row >> 3)) * 128 + (row & 7) * 16;
}

// A block's shared tiles, two buffers of each; 128-byte aligned (a
// descriptor's tiles need 16). 48 KiB: the most a block's static shared
// memory may be.
struct alignas(128) WgmmaTiles {
  unsigned char a[2][WG_A_BYTES];  // weight rows
  unsigned char b[2][WG_B_BYTES];  // tokens
};

// Y = X W^T over a tile of WG_BM weight rows and WG_BN tokens, x given as
// int8 rows (xq [n_tok][n_cols], xd [n_tok][n_cols / 32]: value = d q):
// block b is rows (b % row_tiles) WG_BM .., tokens (b / row_tiles) WG_BN
// ... Each step (32 columns) thread i unpacks weight row i's unit
// (Format::unpack_words: value = scale q - min) and half i % 2 of token
// i / 2's 32 values (d q) to f16 into one of two shared buffers;
// warpgroup v then multiplies its 128 rows (two m64 tiles) by the 128
// tokens with four m64n128k16 wgmma. A step's global loads are issued two
// steps ahead, into one of two register sets (a block is alone on its
// multiprocessor: no other block's work hides a load's latency, so a load
// has a whole step of the tensor cores to arrive), and unpacked into the
// other shared buffer while the tensor cores run the step before: one
// wait and one barrier a step.
template <typename Format>
__device__ __forceinline__ void wgmma_tile(const u8* __restrict__ w, const signed char* xq,
                                           const float* xd, float* y0, float* y1, float* y2,
                                           int n0, int n1, int n_rows, int n_cols,
                                           long long row_bytes, int n_tok) {
  __shared__ WgmmaTiles tiles;
  const int row_tiles = (n_rows + WG_BM - 1) / WG_BM;
  const int m0 = (int)(blockIdx.x % row_tiles) * WG_BM;
  const int t0 = (int)(blockIdx.x / row_tiles) * WG_BN;
  const int r = m0 + (int)threadIdx.x;  // the weight row this thread unpacks
  const int tok = t0 + (int)(threadIdx.x >> 1), half = threadIdx.x & 1;
  const int group = threadIdx.x >> 7;  // the warpgroup: rows 128 group ..
  const int units = n_cols / 32;
  float acc[2][64];  // [m64 tile][wgmma_ops.cuh's accumulator layout]
STRATA_UNROLL
  for (int h = 0; h < 2; ++h)
STRATA_UNROLL
    for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

  // A step's loads, in flight until stage() uses them: step u's in set
  // u % 2 (two named sets, never an array indexed at run time: registers).
  struct Loads {
    UnitBits wbits;
    uint4 xv;
    float xs;
  };
  Loads even, odd;
  even.xv = odd.xv = uint4{0u, 0u, 0u, 0u};
  even.xs = odd.xs = 0.0f;
  auto fetch = [&](int u, Loads& l) {
    if (r < n_rows) Format::fetch(w + (long long)r * row_bytes, n_cols, u, &l.wbits);
    if (tok < n_tok) {
      l.xv = load_as<uint4>(xq + (long long)tok * n_cols + 32 * u + 16 * half);  // 16-byte aligned
      l.xs = xd[(long long)tok * units + u];
    }
  };
  // The loads as f16 in buffer b (zeros past the matrix and the tokens).
  auto stage = [&](int u, int b, const Loads& loads) {
    const UnitBits& wbits = loads.wbits;
    const uint4 xv = loads.xv;
    const float xs = loads.xs;
    unsigned int q[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
    float scale[2] = {0.0f, 0.0f}, min = 0.0f;
    if (r < n_rows) {
      Format::unpack_words(wbits, u, q, scale, &min);
      if (Format::kI8Scales == 1) scale[1] = scale[0];
    }
    const int row = (int)threadIdx.x;
STRATA_UNROLL
    for (int c = 0; c < 4; ++c) {  // 8 values at a time: few registers live
      float v[8];
STRATA_UNROLL
      for (int l = 0; l < 8; ++l) {
        v[l] = signed_byte_float(q, 8 * c + l) * scale[c >> 1] - min;
      }
      store_as(tiles.a[b] + wgmma_at<WG_BM>(row, c), strata_mma_f16x8(v));
    }
    const unsigned int xw[4] = {xv.x, xv.y, xv.z, xv.w};
    const bool in = tok < n_tok;
    const int token = (int)(threadIdx.x >> 1);
STRATA_UNROLL
    for (int c = 0; c < 2; ++c) {
      float v[8];
STRATA_UNROLL
      for (int l = 0; l < 8; ++l) v[l] = in ? signed_byte_float(xw, 8 * c + l) * xs : 0.0f;
      store_as(tiles.b[b] + wgmma_at<WG_BN>(token, 2 * half + c), strata_mma_f16x8(v));
    }
    strata_wgmma_smem_fence();
  };

  // Step u: step u + 2's loads into u's set (stage(u) has read it), the
  // tensor cores on buffer u % 2, step u + 1 unpacked from the other set
  // into the other buffer.
  auto step = [&](int u, Loads& mine, Loads& next) {
    const int b = u & 1;
    if (u + 2 < units) fetch(u + 2, mine);
STRATA_UNROLL
    for (int h = 0; h < 2; ++h)
STRATA_UNROLL
      for (int i = 0; i < 64; ++i) strata_wgmma_hold(acc[h][i]);
    strata_wgmma_fence();
STRATA_UNROLL
    for (int k = 0; k < 2; ++k) {  // the step's two k16 halves, in order
      const unsigned long long db = strata_wgmma_desc(&tiles, tiles.b[b] + (2 * k) * (WG_BN / 8) * 128,
                                                      WG_BN * 16, WG_SBO);
STRATA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int row0 = 128 * group + 64 * h;
        const unsigned long long da = strata_wgmma_desc(
            &tiles, tiles.a[b] + ((2 * k) * (WG_BM / 8) + row0 / 8) * 128, WG_BM * 16, WG_SBO);
        strata_wgmma_m64n128k16(acc[h], da, db, 1, &tiles);
      }
    }
    strata_wgmma_commit();
    if (u + 1 < units) stage(u + 1, b ^ 1, next);  // buffer b ^ 1 was read a step ago
    strata_wgmma_wait<0>();
STRATA_UNROLL
    for (int h = 0; h < 2; ++h)
STRATA_UNROLL
      for (int i = 0; i < 64; ++i) strata_wgmma_hold(acc[h][i]);
    __syncthreads();  // buffer b ^ 1 is whole, and every warpgroup is done with b
  };
  fetch(0, even);
  if (units > 1) fetch(1, odd);
  stage(0, 0, even);
  __syncthreads();
  for (int u = 0; u < units; u += 2) {
    step(u, even, odd);
    if (u + 1 < units) step(u + 1, odd, even);
  }

  // The accumulators (wgmma_ops.cuh's layout) to the outputs, a row at a
  // time: its output and stride found once (strata_put's choice).
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
STRATA_UNROLL
  for (int h = 0; h < 2; ++h) {
STRATA_UNROLL
    for (int e2 = 0; e2 < 2; ++e2) {
      const int row = m0 + 128 * group + 64 * h + 16 * warp + g + 8 * e2;
      if (row >= n_rows) continue;
      float* yr;
      long long stride;
      if (row < n0) {
        yr = y0 + row;
        stride = n0;
      } else if (row < n0 + n1) {
        yr = y1 + (row - n0);
        stride = n1;
      } else {
        yr = y2 + (row - n0 - n1);
        stride = n_rows - n0 - n1;
      }
STRATA_UNROLL
      for (int j = 0; j < 16; ++j) {
STRATA_UNROLL
        for (int p = 0; p < 2; ++p) {
          const int tk = t0 + 8 * j + 2 * t + p;
          if (tk < n_tok) yr[(long long)tk * stride] = acc[h][4 * j + 2 * e2 + p];
        }
      }
    }
  }
}

// strata_wgmma3_<type>: strata_mma3_<type>'s outputs (mma.cuh) on the
// warpgroup instructions, from int8 rows (strata_quantize_rows).
#define STRATA_WGMMA_ENTRY(type, Format)                                                     \
  STRATA_KERNEL strata_wgmma3_##type(const u8* w, const signed char* xq, const float* xd,   \
                                     float* y0, float* y1, float* y2, int n0, int n1,       \
                                     int n_rows, int n_cols, long long row_bytes,           \
                                     int n_tok) {                                           \
    strata_grid_dependency();                                                               \
    wgmma_tile<Format>(w, xq, xd, y0, y1, y2, n0, n1, n_rows, n_cols, row_bytes, n_tok);    \
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
