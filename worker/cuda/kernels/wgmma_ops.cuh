// sm_90's warpgroup tensor-core instructions (wgmma.mma_async, PTX ISA
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions")
// for wgmma.cuh: compiled after mma_ops.cuh in one NVRTC program for
// -arch=compute_90a (wgmma is an sm_90a feature; nvrtc_compiler.h). With
// CUDA's keywords defined away it compiles as host C++, and the emulation
// (tests/cuda/cuda_emulator.h) runs each instruction by the layouts below.
//
// A warpgroup is 4 consecutive warps (threads 128 w .. 128 w + 127). One
// wgmma.mma_async.m64n128k16.f32.f16.f16 computes, for the warpgroup,
//   D [64][128] (+)= A [64][16] B [128][16]^T
// with A and B f16 in shared memory, each given by a matrix descriptor, and
// D f32 in registers, 64 a thread.
//
// Shared memory layout (PTX "Shared Memory Matrix Layout", K-major, no
// swizzle; CuTe's canonical ((8,m),(T,2k)):((1T,SBO),(1,LBO)) with T = 8
// halves): a "core matrix" is 8 rows x 16 bytes (8 halves of k) stored as
// 128 contiguous bytes, row r at 16 r; the core matrix 8 rows further is
// SBO bytes on (the stride dimension byte offset), the one 8 halves further
// along k LBO bytes on (the leading dimension byte offset).
//
// The descriptor (PTX "Matrix Descriptor Format"), 64 bits: bits 0-13 the
// start address, 16-29 LBO, 32-45 SBO, each (x & 0x3FFFF) >> 4; bits 49-51
// the base offset (0: no swizzle) and 62-63 the swizzle mode (0: none).
//
// Accumulator layout (PTX "Register Fragments", m64nNk16, f32 D): warp
// w = (thread / 32) % 4 of the warpgroup holds rows 16 w .. 16 w + 15;
// with g = lane / 4, t = lane % 4, register d[4 j + e] is
//   D[16 w + g + 8 (e / 2)][8 j + 2 t + e % 2]   (j = 0 .. N / 8 - 1),
// mma.sync's m16n8 layout repeated along N.
//
// The instructions are asynchronous: a group of them (committed by
// strata_wgmma_commit) reads its shared memory and writes its registers
// until strata_wgmma_wait<n>() returns with at most n groups pending. Until
// then neither the accumulators nor the shared tiles may be touched.
// Shared memory written by ordinary stores is made visible to them by
// strata_wgmma_smem_fence() (fence.proxy.async) before the barrier that
// precedes the instructions.

// The descriptor of a K-major, unswizzled tile at p (16-byte aligned) of
// shared memory: lbo and sbo in bytes (multiples of 16). `smem` is the
// block's shared buffer that p lies in: the emulation's addresses are
// offsets into it; a device's are shared-window addresses.
__device__ __forceinline__ unsigned long long strata_wgmma_desc(const void* smem, const void* p,
                                                                unsigned lbo, unsigned sbo) {
#if defined(__CUDA_ARCH__)
  (void)smem;
  const unsigned address = (unsigned)__cvta_generic_to_shared(p);
#else
  const unsigned address = (unsigned)((const char*)p - (const char*)smem);
#endif
  return (unsigned long long)((address & 0x3FFFF) >> 4) |
         ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32);
}

// Shared-memory stores so far (this thread's) visible to the async proxy
// that wgmma reads through; a barrier after it makes every thread's.
__device__ __forceinline__ void strata_wgmma_smem_fence() {
#if defined(__CUDA_ARCH__)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Orders the registers' ordinary accesses before the wgmma instructions
// that follow (PTX: wgmma.fence before the first wgmma.mma_async and
// whenever its registers were written otherwise).
__device__ __forceinline__ void strata_wgmma_fence() {
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void strata_wgmma_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#else
  strata_host_wgmma_commit();  // the emulation's
#endif
}

// Waits until at most N committed groups are pending.
template <int N>
__device__ __forceinline__ void strata_wgmma_wait() {
#if defined(__CUDA_ARCH__)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#else
  strata_host_wgmma_wait(N);  // the emulation's
#endif
}

// Keeps the compiler from moving ordinary accesses of an accumulator
// register across the asynchronous instructions (nothing on the host).
__device__ __forceinline__ void strata_wgmma_hold(float& r) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+f"(r)::"memory");
#else
  (void)r;
#endif
}

// d (+)= A B^T for the warpgroup: m64n128k16, f16 A (descriptor a) and B
// (descriptor b) in shared memory, both K-major; accumulate: 1 adds to d,
// 0 overwrites it. Asynchronous (above).
__device__ __forceinline__ void strata_wgmma_m64n128k16(float* d, unsigned long long a,
                                                        unsigned long long b, int accumulate,
                                                        const void* smem) {
#if defined(__CUDA_ARCH__)
  (void)smem;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
        "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
        "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
        "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
#else
  strata_host_wgmma_m64n128k16(d, a, b, accumulate, smem);  // the emulation's
#endif
}
