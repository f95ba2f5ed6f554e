// Runs the CUDA kernel sources of worker/cuda/kernels/*.cuh on the CPU, for
// tests on machines without a GPU: every CUDA thread of a block is a
// std::thread; __syncthreads() is a barrier of the block's threads, a
// warp's __shfl_*_sync() a barrier of its 32; `__shared__` variables are
// function statics (blocks run one after another, so a block has them to
// itself). What this cannot show — timing, the PTX, launch limits, memory
// coalescing, races that the barriers hide — is left to the device tests.
//
// Usage (one translation unit):
//   #include "tests/cuda/cuda_emulator.h"   // defines the CUDA keywords
//   namespace k { #define THREADS 128
//                 #include "worker/cuda/kernels/matvec.cuh" }
//   cuda_emulation::launch(grid, block, [&] { k::strata_matvec_q4_0(...); });
//
// A thread that returns leaves the block's and its warp's barriers
// (arrive_and_drop), as exited threads stop counting on a device. A warp
// whose lanes do not all reach a shuffle deadlocks here; on a device that
// is undefined too.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/cpu/reference/fp16.h"

namespace strata::cuda_emulation {

struct Index {
  unsigned x = 0, y = 0, z = 0;
};

// The block being run and the calling thread's place in it.
struct BlockState {
  explicit BlockState(int threads)
      : sync(threads), warps(static_cast<size_t>((threads + 31) / 32)) {
    for (size_t w = 0; w < warps.size(); ++w) {
      const int lanes = std::min(32, threads - static_cast<int>(w) * 32);
      warps[w] = std::make_unique<Warp>(lanes);
    }
  }
  struct Warp {
    explicit Warp(int lanes) : meet(lanes) {}
    std::barrier<> meet;
    uint64_t slots[32] = {};
  };
  std::barrier<> sync;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local Index threadIdx, blockIdx;
inline Index blockDim, gridDim;  // set by launch, read-only while it runs
inline thread_local BlockState* this_block = nullptr;

inline void __syncthreads() { this_block->sync.arrive_and_wait(); }

// v of lane (this lane's ^ lane_mask).
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8);
  const unsigned lane = threadIdx.x & 31;
  BlockState::Warp& w = *this_block->warps[threadIdx.x / 32];
  std::memcpy(&w.slots[lane], &v, sizeof(T));
  w.meet.arrive_and_wait();
  T other;
  std::memcpy(&other, &w.slots[lane ^ static_cast<unsigned>(lane_mask)], sizeof(T));
  w.meet.arrive_and_wait();  // every lane has read before any writes again
  return other;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

inline float strata_host_f16_to_f32(unsigned short h) { return reference::f16_to_f32(h); }
inline unsigned short strata_host_f32_to_f16(float f) { return reference::f32_to_f16(f); }

// Runs `kernel` (a call of one entry point with its arguments) as a launch
// of grid x 1 x 1 blocks of `threads` x 1 x 1 threads would, block after
// block.
inline void launch(unsigned grid, unsigned threads, const std::function<void()>& kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    BlockState block(static_cast<int>(threads));
    std::vector<std::thread> lanes;
    lanes.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
      lanes.emplace_back([&, t] {
        blockIdx = {b, 0, 0};
        threadIdx = {t, 0, 0};
        this_block = &block;
        kernel();
        block.warps[t / 32]->meet.arrive_and_drop();
        block.sync.arrive_and_drop();
      });
    }
    for (std::thread& t : lanes) t.join();
  }
}

}  // namespace strata::cuda_emulation

// The CUDA keywords the kernel sources use, for a host compiler.
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define STRATA_KERNEL inline void
