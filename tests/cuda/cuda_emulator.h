// Runs the CUDA kernel sources of worker/cuda/kernels/*.cuh on the CPU, for
// tests on machines without a GPU. A block's CUDA threads are coroutines
// (ucontext, a stack each) that the calling OS thread runs in turn, each
// until it waits at a barrier or returns: __syncthreads() is a barrier of
// the block's threads, a warp's __shfl_xor_sync() a barrier of its lanes
// (a write, a barrier, a read, a barrier). `__shared__` variables are
// function statics (blocks run one after another, so a block has them to
// itself). Deterministic, and cheap enough for a whole model's launches (a
// switch costs about a microsecond; an OS thread per CUDA thread cost ~20 us
// to start). What this cannot show — timing, the PTX, launch limits, memory
// coalescing, races that the barriers hide — is left to the device tests.
//
// Usage (one translation unit):
//   #include "tests/cuda/cuda_emulator.h"   // defines the CUDA keywords
//   namespace k { using namespace strata::cuda_emulation;
//                 #define THREADS 128
//                 #include "worker/cuda/kernels/matvec.cuh" }
//   cuda_emulation::launch(grid, block, [&] { k::strata_matvec_q4_0(...); });
//
// A thread that returns stops counting at its block's and warp's barriers,
// as exited threads do on a device. A barrier some live thread never
// reaches is a deadlock on a device; here it aborts the test process with
// a message.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/reference/fp16.h"

namespace strata::cuda_emulation {

struct Index {
  unsigned x = 0, y = 0, z = 0;
};

// Barriers opened and threads finished, in this process: a round of a
// block's threads that moves it is no deadlock.
inline uint64_t progress = 0;

// A barrier of `alive` coroutines: the last to arrive releases the others.
struct Barrier {
  int alive = 0;
  int arrived = 0;
  uint64_t generation = 0;
  void release_if_complete() {
    if (arrived > 0 && arrived == alive) {
      arrived = 0;
      ++generation;
      ++progress;
    }
  }
};

// One block being run.
struct BlockRun {
  static constexpr size_t kStackBytes = 64 * 1024;
  struct Thread {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    bool done = false;
  };
  struct Warp {
    Barrier meet;
    uint64_t slots[32] = {};
  };
  ucontext_t scheduler;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Barrier block;
  unsigned current = 0;
  const std::function<void()>* kernel = nullptr;
};

inline Index threadIdx, blockIdx;
inline Index blockDim, gridDim;  // set by launch, read-only while it runs
inline BlockRun* this_block = nullptr;

// Back to the scheduler until it resumes this thread.
inline void yield() {
  BlockRun& b = *this_block;
  swapcontext(&b.threads[b.current].context, &b.scheduler);
}

inline void wait_at(Barrier& barrier) {
  const uint64_t generation = barrier.generation;
  ++barrier.arrived;
  barrier.release_if_complete();
  while (barrier.generation == generation) yield();
}

inline void __syncthreads() { wait_at(this_block->block); }

// v of lane (this lane's ^ lane_mask).
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8);
  const unsigned lane = threadIdx.x & 31;
  BlockRun::Warp& w = this_block->warps[threadIdx.x / 32];
  std::memcpy(&w.slots[lane], &v, sizeof(T));
  wait_at(w.meet);
  T other;
  std::memcpy(&other, &w.slots[lane ^ static_cast<unsigned>(lane_mask)], sizeof(T));
  wait_at(w.meet);  // every lane has read before any writes again
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

// The body of every coroutine: the kernel, then leaving the barriers.
inline void run_thread() {
  BlockRun& b = *this_block;
  (*b.kernel)();
  const unsigned t = b.current;
  b.threads[t].done = true;
  ++progress;
  --b.block.alive;
  b.block.release_if_complete();
  BlockRun::Warp& w = b.warps[t / 32];
  --w.meet.alive;
  w.meet.release_if_complete();
}  // returns to uc_link: the scheduler

// A coroutine that starts in run_thread and returns to `scheduler`. Apart
// from launch: getcontext returns twice, which GCC warns about for the
// caller's locals.
[[gnu::noinline]] inline void make_thread(BlockRun::Thread& t, ucontext_t* scheduler) {
  t.stack.reset(new char[BlockRun::kStackBytes]);
  getcontext(&t.context);
  t.context.uc_stack.ss_sp = t.stack.get();
  t.context.uc_stack.ss_size = BlockRun::kStackBytes;
  t.context.uc_link = scheduler;
  makecontext(&t.context, run_thread, 0);
}

// Runs `kernel` (a call of one entry point with its arguments) as a launch
// of grid x 1 x 1 blocks of `threads` x 1 x 1 threads would, block after
// block. Not reentrant; one launch at a time in a process.
inline void launch(unsigned grid, unsigned threads, const std::function<void()>& kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  for (unsigned b = 0; b < grid; ++b) {
    BlockRun run;
    run.kernel = &kernel;
    run.threads.resize(threads);
    run.warps.resize((threads + 31) / 32);
    run.block.alive = static_cast<int>(threads);
    for (size_t w = 0; w < run.warps.size(); ++w) {
      run.warps[w].meet.alive = static_cast<int>(std::min<size_t>(32, threads - 32 * w));
    }
    for (BlockRun::Thread& t : run.threads) make_thread(t, &run.scheduler);
    blockIdx = {b, 0, 0};
    this_block = &run;
    for (int live = static_cast<int>(threads); live > 0;) {
      const uint64_t before = progress;
      for (unsigned t = 0; t < threads; ++t) {
        if (run.threads[t].done) continue;
        run.current = t;
        threadIdx = {t, 0, 0};
        swapcontext(&run.scheduler, &run.threads[t].context);
        if (run.threads[t].done) --live;
      }
      if (live > 0 && progress == before) {  // every live thread waits for good
        std::fprintf(stderr, "cuda_emulation: block %u deadlocked at a barrier\n", b);
        std::abort();
      }
    }
    this_block = nullptr;
  }
}

}  // namespace strata::cuda_emulation

// The CUDA keywords the kernel sources use, for a host compiler.
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define STRATA_KERNEL inline void
