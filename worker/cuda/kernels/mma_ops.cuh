// The tensor-core helpers of the kernels that use mma.sync (mma.cuh, the
// matrix kernel; matvec_mma.cuh; flash_attention.cuh): compiled before them in one NVRTC
// program (mma_source.h). With CUDA's keywords defined away it compiles as
// host C++; the emulation (tests/cuda/cuda_emulator.h) then provides
// strata_host_mma_m16n8k16 and the f16 conversions.

// f32 -> f16 bits, round to nearest even; beyond the f16 range it
// saturates to +-65504 (an activation that large is kept finite, a NaN
// stays NaN).
__device__ __forceinline__ unsigned short strata_mma_f16(float f) {
  f = f > 65504.0f ? 65504.0f : (f < -65504.0f ? -65504.0f : f);
#if defined(__CUDA_ARCH__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return strata_host_f32_to_f16(f);
#endif
}

// Two floats as f16 bits in one register (lo the first element), each as
// strata_mma_f16 rounds it, by one conversion instruction for both.
__device__ __forceinline__ unsigned strata_mma_f16x2(float lo, float hi) {
  lo = lo > 65504.0f ? 65504.0f : (lo < -65504.0f ? -65504.0f : lo);
  hi = hi > 65504.0f ? 65504.0f : (hi < -65504.0f ? -65504.0f : hi);
#if defined(__CUDA_ARCH__)
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // the first source: the upper half
  return r;
#else
  return (unsigned)strata_host_f32_to_f16(lo) | ((unsigned)strata_host_f32_to_f16(hi) << 16);
#endif
}

// d += a b for one warp: A 16x16 f16 (row-major), B 16x8 f16 (column-
// major), D 16x8 f32, each lane holding its fragments as PTX's "Matrix
// Fragments for mma.m16n8k16 with floating point type" lays them out
// (g = lane / 4, t = lane % 4):
//   a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
//   a[3] = A[g+8][2t+8, 2t+9]; b[0] = B[2t, 2t+1][g], b[1] = B[2t+8,
//   2t+9][g]; d[0..1] = D[g][2t, 2t+1], d[2..3] = D[g+8][2t, 2t+1]
// (a register's low half is the first element).
__device__ __forceinline__ void strata_mma_16816(float* d, const unsigned* a, const unsigned* b) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  strata_host_mma_m16n8k16(d, a, b);  // the emulation's
#endif
}

// d += a b for one warp, integers: A 16x32 s8 (row-major), B 32x8 s8
// (column-major), D 16x8 s32, as PTX's "Matrix Fragments for mma.m16n8k32"
// (integer types) lays them out (g = lane / 4, t = lane % 4; a register's
// lowest byte the first element): a[0] = A[g][4t .. 4t+3], a[1] =
// A[g+8][4t ..], a[2] = A[g][16+4t ..], a[3] = A[g+8][16+4t ..]; b[0] =
// B[4t .. 4t+3][g], b[1] = B[16+4t ..][g]; d[0..1] = D[g][2t, 2t+1],
// d[2..3] = D[g+8][2t, 2t+1]. Exact (no saturation at these sizes).
__device__ __forceinline__ void strata_mma_16832_s8(int* d, const unsigned* a, const unsigned* b) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  strata_host_mma_m16n8k32_s8(d, a, b);  // the emulation's
#endif
}

// The same for A 16x16 s8 and B 16x8 s8 (PTX's "Matrix Fragments for
// mma.m16n8k16" with integer types): a[0] = A[g][4t .. 4t+3], a[1] =
// A[g+8][4t ..]; b[0] = B[4t .. 4t+3][g]; d as above. Exact.
__device__ __forceinline__ void strata_mma_16816_s8(int* d, const unsigned* a, const unsigned* b) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]));
#else
  strata_host_mma_m16n8k16_s8(d, a, b);  // the emulation's
#endif
}

// One unit's integer dot products of an A tile a (16 weight rows, int8
// words) and a B tile b (8 tokens): sum0, and with kScales 2 (a scale each
// 16 values, Q6_K) the two halves apart, each by an m16n8k16 mma.sync on
// its half of the k32 fragments (a[0..1] and b[0] hold values 0-15, a[2..3]
// and b[1] values 16-31): sum0 values 0-15, sum1 values 16-31.
template <int kScales>
__device__ __forceinline__ void mma_unit_sums(const unsigned* a, const unsigned* b, int* sum0,
                                              int* sum1) {
  for (int e = 0; e < 4; ++e) sum0[e] = sum1[e] = 0;
  if (kScales == 1) {
    strata_mma_16832_s8(sum0, a, b);
  } else {
    strata_mma_16816_s8(sum0, a, b);
    strata_mma_16816_s8(sum1, a + 2, b + 1);
  }
}

// Four 8x8 matrices of 16-bit elements (16-byte rows) from shared memory
// to the warp's fragments, one instruction (PTX's ldmatrix .x4): lane l
// gives the address of row l % 8 of matrix l / 8 (16-byte aligned), and
// r[m] of lane l is matrix m's row l / 4, bytes 4 (l % 4) .. +3 — for
// 16-bit values the elements (l / 4, 2 (l % 4) .. +1), for int8 ones
// (l / 4, 4 (l % 4) .. +3): the m16n8k16 / m16n8k32 A fragment a[0..3]
// when the matrices are a 16-row tile's rows 0-7 and 8-15 of its first
// 16 bytes, then of its next 16; two B fragments (b[0], b[1] of tokens
// 0-7, then of 8-15) when they are tokens 0-7 of the first and next 16
// bytes, then tokens 8-15's. Every lane of the warp calls it.
__device__ __forceinline__ void strata_ldmatrix_x4(unsigned* r, const void* row) {
#if defined(__CUDA_ARCH__)
  const unsigned address = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#else
  strata_host_ldmatrix_x4(r, row);  // the emulation's
#endif
}

// Eight f16 of 8 floats (each as strata_mma_f16 rounds it), as one
// 16-byte store's words.
__device__ __forceinline__ uint4 strata_mma_f16x8(const float* v) {
  uint4 h;
  h.x = strata_mma_f16x2(v[0], v[1]);
  h.y = strata_mma_f16x2(v[2], v[3]);
  h.z = strata_mma_f16x2(v[4], v[5]);
  h.w = strata_mma_f16x2(v[6], v[7]);
  return h;
}

// Two f16 at p (p even) as one register.
__device__ __forceinline__ unsigned strata_pair(const unsigned short* p) {
  return (unsigned)p[0] | ((unsigned)p[1] << 16);
}


// f16 bits lo and hi as one register (lo the first element).
__device__ __forceinline__ unsigned strata_pack(unsigned short lo, unsigned short hi) {
  return (unsigned)lo | ((unsigned)hi << 16);
}
