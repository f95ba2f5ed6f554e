// Runs the CUDA kernel sources of worker/cuda/kernels/*.cuh on the CPU, for
// tests on machines without a GPU. A block's CUDA threads are coroutines
// (ucontext, a stack each) that the calling OS thread runs in turn, each
// until it waits at a barrier or returns: __syncthreads() is a barrier of
// the block's threads, a warp's __shfl_xor_sync() a barrier of its lanes
// (a write, a barrier, a read, a barrier), and a warp's mma.sync
// (strata_host_mma_m16n8k16) the same over its fragments. `__shared__` variables are
// function statics (blocks run one after another, so a block has them to
// itself). Deterministic, and cheap enough for a whole model's launches (a
// switch costs about a microsecond; an OS thread per CUDA thread cost ~20 us
// to start). A missing barrier shows as results that change with the order
// threads and blocks run in (Schedule, below); two threads writing one
// byte of shared memory unordered (a lost update among them), and a read of
// shared memory the block never wrote, show under the race check
// (RaceCheckScope, cuda_emulator_race_check.h). What this cannot show —
// timing, the PTX, launch limits, memory coalescing, races in global
// memory — is left to the device tests.
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/reference/fp16.h"
#include "tests/cuda/cuda_emulator_race_check.h"

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

// Switching between coroutines. On x86-64 a few instructions that save the
// callee-saved registers and swap stacks (no system call: glibc's
// swapcontext also saves the signal mask, a system call each switch, which
// made a small model's step cost seconds); elsewhere, and under
// AddressSanitizer (which must be told of stack switches), ucontext.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define STRATA_EMULATOR_FAST_SWITCH 1
// strata_emulator_switch(void** save, void* load): pushes rbp, rbx, r12-r15,
// stores rsp in *save, loads `load` as rsp, pops them and returns there.
// Weak: each translation unit that includes this header defines it.
asm(R"(
  .text
  .weak strata_emulator_switch
  .type strata_emulator_switch, @function
strata_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size strata_emulator_switch, .-strata_emulator_switch
)");
extern "C" void strata_emulator_switch(void** save, void* load);
struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

// One block being run.
struct BlockRun {
  static constexpr size_t kStackBytes = 64 * 1024;
  // A wgmma.mma_async this thread issued (strata_host_wgmma_m64n128k16),
  // run when a wait_group lets it complete; group: its commit group
  // (-1: not committed yet).
  struct WgmmaOp {
    float* d = nullptr;
    unsigned long long a = 0, b = 0;
    int accumulate = 0;
    const void* smem = nullptr;
    int group = -1;
  };
  struct Thread {
    Context context;
    char* stack = nullptr;  // kStackBytes, from stacks()
    bool done = false;
    std::vector<WgmmaOp> wgmma;
    int wgmma_groups = 0;  // committed so far
  };
  struct Warp {
    Barrier meet;
    uint64_t slots[32] = {};
    uint32_t mma_a[32][4] = {};  // strata_host_mma_m16n8k16's fragments
    uint32_t mma_b[32][2] = {};
  };
  Context scheduler;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Barrier block;
  unsigned current = 0;
  const std::function<void()>* kernel = nullptr;
};

// Coroutine stacks, kept for the next block and launch (at most 1024
// threads a block).
inline std::vector<std::unique_ptr<char[]>>& stacks() {
  static std::vector<std::unique_ptr<char[]>> s;
  return s;
}

inline Index threadIdx, blockIdx;
inline Index blockDim, gridDim;  // set by launch, read-only while it runs
inline BlockRun* this_block = nullptr;

// Saves the running context in `from` and runs `to`.
inline void switch_to(Context& from, Context& to) {
#if defined(STRATA_EMULATOR_FAST_SWITCH)
  strata_emulator_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// Back to the scheduler until it resumes this thread.
inline void yield() {
  BlockRun& b = *this_block;
  switch_to(b.threads[b.current].context, b.scheduler);
}

// The running thread, for the race check.
inline RaceCheckThread race_check_thread() {
  const BlockRun& b = *this_block;
  const unsigned t = b.current;
  return {blockIdx.x, t, b.block.generation, b.warps[t / 32].meet.generation};
}
// The running thread stops at file:line: when the race check is on, what
// changed in shared memory since the last stop is its writes.
inline void stop_at(const char* file, int line) {
  if (race_check.on && this_block != nullptr) race_check_stop(race_check_thread(), file, line);
}

inline void wait_at(Barrier& barrier, const char* file, int line) {
  stop_at(file, line);
  const uint64_t generation = barrier.generation;
  ++barrier.arrived;
  barrier.release_if_complete();
  while (barrier.generation == generation) yield();
}

// Whether file:line (the file by its base name) is `at` ("file.cuh:line";
// nullptr: none).
inline bool is_at(const char* at, const char* file, int line) {
  if (at == nullptr) return false;
  char here[256];
  std::snprintf(here, sizeof here, "%s:%d", base_name(file), line);
  return std::strcmp(here, at) == 0;
}
// A barrier left out, for checking that the tests notice ("file.cuh:line"
// of a __syncthreads or __syncwarp call, from STRATA_EMULATOR_DROP_BARRIER;
// scripts/barrier-check.sh).
inline bool dropped(const char* file, int line) {
  static const char* drop = std::getenv("STRATA_EMULATOR_DROP_BARRIER");
  return is_at(drop, file, line);
}
// An atomicAdd taken for a plain read, add and write, for checking that
// the race check notices ("file.cuh:line" of the call, from
// STRATA_EMULATOR_PLAIN_ATOMIC; scripts/barrier-check.sh). Its sums are
// the same here (a thread's read, add and write is never interleaved):
// only the race check can tell.
inline bool made_plain(const char* file, int line) {
  static const char* plain = std::getenv("STRATA_EMULATOR_PLAIN_ATOMIC");
  return is_at(plain, file, line);
}

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (!dropped(file, line)) wait_at(this_block->block, file, line);
}
// A barrier of the warp's lanes (each lane runs up to it in turn).
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  if (!dropped(file, line)) wait_at(this_block->warps[threadIdx.x / 32].meet, file, line);
}

// v of lane (this lane's ^ lane_mask).
template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  static_assert(sizeof(T) <= 8);
  const unsigned lane = threadIdx.x & 31;
  BlockRun::Warp& w = this_block->warps[threadIdx.x / 32];
  std::memcpy(&w.slots[lane], &v, sizeof(T));
  wait_at(w.meet, file, line);
  T other;
  std::memcpy(&other, &w.slots[lane ^ static_cast<unsigned>(lane_mask)], sizeof(T));
  wait_at(w.meet, file, line);  // every lane has read before any writes again
  return other;
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 for the warp: every
// lane gives its A and B fragments, then computes its four D elements from
// the whole tiles, by the fragment layout PTX documents (g = lane / 4, t =
// lane % 4): A[row][k] is in lane 4 (row % 8) + (k % 8) / 2, register
// (row >= 8) + 2 (k >= 8), half k % 2; B[k][col] in lane 4 col + (k % 8) /
// 2, register k >= 8, half k % 2; d[i] is D[g + 8 (i >= 2)][2t + i % 2].
// The products (exact in float) are summed in k order onto d.
inline float strata_emulated_half(uint32_t reg, int half) {
  return reference::f16_to_f32(static_cast<unsigned short>(half ? reg >> 16 : reg & 0xffff));
}
// The warp's mma.sync: every lane gives its A and B fragments, then sets
// its four D elements d[i] = sum(d[i], D[row][col]) with row = g + 8 (i >=
// 2), col = 2t + i % 2, `sum` reading the whole tiles' fragments.
template <typename T, typename Sum>
void strata_emulated_mma(T* d, const unsigned* a, const unsigned* b, Sum sum, const char* file,
                         int line) {
  const unsigned lane = threadIdx.x & 31;
  BlockRun::Warp& w = this_block->warps[threadIdx.x / 32];
  std::memcpy(w.mma_a[lane], a, sizeof w.mma_a[lane]);
  std::memcpy(w.mma_b[lane], b, sizeof w.mma_b[lane]);
  wait_at(w.meet, file, line);
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
  for (int i = 0; i < 4; ++i) d[i] = sum(w, g + 8 * (i >> 1), 2 * t + (i & 1), d[i]);
  wait_at(w.meet, file, line);  // every lane has read before any writes again
}
inline void strata_host_mma_m16n8k16(float* d, const unsigned* a, const unsigned* b,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  strata_emulated_mma(d, a, b, [](const BlockRun::Warp& w, int row, int col, float sum) {
    for (int k = 0; k < 16; ++k) {
      const float av = strata_emulated_half(
          w.mma_a[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2);
      const float bv = strata_emulated_half(w.mma_b[4 * col + (k % 8) / 2][k >= 8], k % 2);
      sum += av * bv;
    }
    return sum;
  }, file, line);
}

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 for the warp, by the
// fragment layout PTX documents for integer types: A[row][k] is in lane 4
// (row % 8) + (k % 16) / 4, register (row >= 8) + 2 (k >= 16), byte k % 4;
// B[k][col] in lane 4 col + (k % 16) / 4, register k >= 16, byte k % 4;
// d[i] is D[g + 8 (i >= 2)][2t + i % 2]. Integer sums: exact.
inline int strata_emulated_s8(uint32_t reg, int byte) {
  return static_cast<int8_t>(static_cast<uint8_t>(reg >> (8 * byte)));
}
inline void strata_host_mma_m16n8k32_s8(int* d, const unsigned* a, const unsigned* b,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  strata_emulated_mma(d, a, b, [](const BlockRun::Warp& w, int row, int col, int sum) {
    for (int k = 0; k < 32; ++k) {
      const int av = strata_emulated_s8(
          w.mma_a[4 * (row % 8) + (k % 16) / 4][(row >= 8) + 2 * (k >= 16)], k % 4);
      const int bv = strata_emulated_s8(w.mma_b[4 * col + (k % 16) / 4][k >= 16], k % 4);
      sum += av * bv;
    }
    return sum;
  }, file, line);
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 for the warp: lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned: a
// misaligned one aborts, as it faults on a device); register m of lane l
// is matrix m's row l / 4, bytes 4 (l % 4) .. +3.
[[noreturn]] inline void strata_host_misaligned(const void* p, size_t bytes);
inline void strata_host_ldmatrix_x4(unsigned* r, const void* row,
                                    const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) strata_host_misaligned(row, 16);
  const unsigned lane = threadIdx.x & 31;
  BlockRun::Warp& w = this_block->warps[threadIdx.x / 32];
  w.slots[lane] = reinterpret_cast<uintptr_t>(row);
  wait_at(w.meet, file, line);
  for (int m = 0; m < 4; ++m) {
    const auto* src = reinterpret_cast<const unsigned char*>(w.slots[8 * m + lane / 4]);
    std::memcpy(&r[m], src + 4 * (lane % 4), sizeof(unsigned));
  }
  wait_at(w.meet, file, line);  // every lane has read before any writes again
}

// mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32: A[row][k] in lane 4
// (row % 8) + k / 4, register row >= 8, byte k % 4; B[k][col] in lane
// 4 col + k / 4, its one register, byte k % 4 (2 and 1 registers a lane,
// kept in the first of the warp's fragment slots).
inline void strata_host_mma_m16n8k16_s8(int* d, const unsigned* a, const unsigned* b,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const unsigned a4[4] = {a[0], a[1], 0u, 0u}, b2[2] = {b[0], 0u};
  strata_emulated_mma(d, a4, b2, [](const BlockRun::Warp& w, int row, int col, int sum) {
    for (int k = 0; k < 16; ++k) {
      const int av = strata_emulated_s8(w.mma_a[4 * (row % 8) + k / 4][row >= 8], k % 4);
      const int bv = strata_emulated_s8(w.mma_b[4 * col + k / 4][0], k % 4);
      sum += av * bv;
    }
    return sum;
  }, file, line);
}

// sm_90's wgmma (worker/cuda/kernels/wgmma_ops.cuh) for one thread of a
// warpgroup. The instruction is asynchronous on a device; here it is
// recorded when issued and computed when strata_wgmma_wait lets its group
// complete, from the shared memory as it is then, so a kernel that writes
// a tile before waiting for the wgmma reading it gets wrong sums here too,
// and one that never waits leaves its accumulators unwritten (and aborts
// at its end). Each of the thread's 64 accumulators d[4 j + e] is
// D[16 w + g + 8 (e / 2)][8 j + 2 t + e % 2] (w: the warp within the
// warpgroup, g = lane / 4, t = lane % 4), its A and B elements read
// through the descriptors' K-major unswizzled layout (start + (row / 8)
// SBO + (row % 8) 16 + (k / 8) LBO + (k % 8) 2 bytes); the products
// (exact in float) summed in k order onto d, or onto 0 when not
// accumulating.
inline float strata_emulated_wgmma_f16(const void* smem, unsigned long long desc, int row, int k) {
  if ((desc >> 62) != 0 || ((desc >> 49) & 7) != 0) {
    std::fprintf(stderr, "cuda_emulation: wgmma descriptor %llx: only unswizzled tiles\n", desc);
    std::abort();
  }
  const size_t start = (desc & 0x3FFF) << 4, lbo = ((desc >> 16) & 0x3FFF) << 4,
               sbo = ((desc >> 32) & 0x3FFF) << 4;
  const size_t at = start + static_cast<size_t>(row / 8) * sbo + static_cast<size_t>(row % 8) * 16 +
                    static_cast<size_t>(k / 8) * lbo + static_cast<size_t>(k % 8) * 2;
  uint16_t h;
  std::memcpy(&h, static_cast<const unsigned char*>(smem) + at, sizeof h);
  return reference::f16_to_f32(h);
}
inline void strata_emulated_wgmma_run(const BlockRun::WgmmaOp& op) {
  const unsigned in_group = threadIdx.x % 128;
  const int warp = static_cast<int>(in_group / 32), lane = static_cast<int>(in_group % 32);
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 64; ++i) {
    const int row = 16 * warp + g + 8 * ((i & 3) >> 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
    float sum = op.accumulate ? op.d[i] : 0.0f;
    for (int k = 0; k < 16; ++k) {
      sum += strata_emulated_wgmma_f16(op.smem, op.a, row, k) *
             strata_emulated_wgmma_f16(op.smem, op.b, col, k);
    }
    op.d[i] = sum;
  }
}
inline void strata_host_wgmma_m64n128k16(float* d, unsigned long long a, unsigned long long b,
                                         int accumulate, const void* smem) {
  this_block->threads[this_block->current].wgmma.push_back({d, a, b, accumulate, smem, -1});
}
inline void strata_host_wgmma_commit() {
  BlockRun::Thread& th = this_block->threads[this_block->current];
  ++th.wgmma_groups;
  for (BlockRun::WgmmaOp& op : th.wgmma) {
    if (op.group < 0) op.group = th.wgmma_groups;
  }
}
inline void strata_host_wgmma_wait(int pending) {
  BlockRun::Thread& th = this_block->threads[this_block->current];
  std::vector<BlockRun::WgmmaOp> left;
  for (const BlockRun::WgmmaOp& op : th.wgmma) {
    if (op.group >= 0 && op.group <= th.wgmma_groups - pending) {
      strata_emulated_wgmma_run(op);
    } else {
      left.push_back(op);
    }
  }
  th.wgmma = std::move(left);
}

// worker/cuda/kernels/grid.cuh's wait for the kernel before: launches run
// one after another here (its guard: the kernel sources define none).
#define STRATA_GRID_DEPENDENCY
inline void strata_grid_dependency() {}

// __dp4a(a, b, c) on signed bytes: c + the sum of the four products of a's
// and b's bytes (matvec.cuh dot4_i8).
inline int strata_host_dp4a(unsigned a, unsigned b, int c) {
  for (int byte = 0; byte < 4; ++byte) {
    c += strata_emulated_s8(a, byte) * strata_emulated_s8(b, byte);
  }
  return c;
}

// __byte_perm(lo, hi, s) with selectors below 8 (matvec.cuh pick_bytes):
// byte j of the result is byte (s >> 4 j) & 7 of {lo, hi}.
inline unsigned strata_host_byte_perm(unsigned lo, unsigned hi, unsigned s) {
  const unsigned long long bytes = lo | (static_cast<unsigned long long>(hi) << 32);
  unsigned r = 0;
  for (int j = 0; j < 4; ++j) {
    const unsigned pick = (s >> (4 * j)) & 7u;
    r |= static_cast<unsigned>((bytes >> (8 * pick)) & 255u) << (8 * j);
  }
  return r;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// CUDA's vector types, as laid out on the device.
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// Blocks run one after another here: every write is seen by the next.
inline void __threadfence() {}
// A thread runs until it waits at a barrier or returns, so a read, add and
// write is atomic here as on the device. Returns the old value.
template <typename T>
T atomicAdd(T* address, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  stop_at(file, line);
  const T old = *address;
  *address = old + value;
  if (race_check.on && this_block != nullptr) {
    race_check_written(race_check_thread(), address, sizeof(T), !made_plain(file, line), file,
                       line);
  }
  return old;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float strata_host_f16_to_f32(unsigned short h) { return reference::f16_to_f32(h); }
// A vector load at an address a GPU would fault on (matvec.cuh load_as).
[[noreturn]] inline void strata_host_misaligned(const void* p, size_t bytes) {
  std::fprintf(stderr, "cuda_emulation: a %zu-byte load at %p is misaligned\n", bytes, p);
  std::abort();
}
inline unsigned short strata_host_f32_to_f16(float f) { return reference::f32_to_f16(f); }

// The body of every coroutine: the kernel, then leaving the barriers.
inline void run_thread() {
  BlockRun& b = *this_block;
  (*b.kernel)();
  const unsigned t = b.current;
  stop_at("the kernel's end", 0);
  if (!b.threads[t].wgmma.empty()) {
    std::fprintf(stderr, "cuda_emulation: thread %u ended with a wgmma never waited for\n", t);
    std::abort();
  }
  b.threads[t].done = true;
  ++progress;
  --b.block.alive;
  b.block.release_if_complete();
  BlockRun::Warp& w = b.warps[t / 32];
  --w.meet.alive;
  w.meet.release_if_complete();
#if defined(STRATA_EMULATOR_FAST_SWITCH)
  // Back to the scheduler for good (it never resumes a finished thread).
  Context dead;
  switch_to(dead, b.scheduler);
#endif
}  // ucontext: returns to uc_link, the scheduler

// A coroutine on `stack` that starts in run_thread and ends in `scheduler`.
// Apart from launch: getcontext returns twice, which GCC warns about for
// the caller's locals.
[[gnu::noinline]] inline void make_thread(BlockRun::Thread& t, char* stack,
                                          Context* scheduler) {
  t.stack = stack;
#if defined(STRATA_EMULATOR_FAST_SWITCH)
  (void)scheduler;
  // The stack as strata_emulator_switch leaves it: six registers (zero),
  // then run_thread as the return address, then a slot for run_thread's
  // own (never used) return address, so that run_thread starts with rsp =
  // 8 mod 16 as after a call.
  auto top = reinterpret_cast<uintptr_t>(stack + BlockRun::kStackBytes) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(&run_thread);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  t.context.sp = sp;
#else
  getcontext(&t.context.uc);
  t.context.uc.uc_stack.ss_sp = stack;
  t.context.uc.uc_stack.ss_size = BlockRun::kStackBytes;
  t.context.uc.uc_link = &scheduler->uc;
  makecontext(&t.context.uc, run_thread, 0);
#endif
}

// The order the blocks of a launch, and the threads of a block, run in. A
// device promises none, so a kernel's results must not depend on it: a
// read of shared memory another thread writes with no barrier between gives
// other values in another order, so the kernel tests run in each
// (tests/cuda/kernels_fixture.h). In the first three a block's live threads
// run in rounds, each thread up to its next barrier, so its warps keep in
// step; in the warps-alone ones each warp runs as far as it can (to a
// barrier of the block, or its end) before the next starts, as a warp
// ahead of the others on a device, which is what shows a buffer refilled
// with no barrier after its last read. Blocks run one after another in
// every order, so a block reading what another block of the launch writes
// shows only as an order's other values, and a lost update (two threads'
// read-add-write of one address) in none (in shared memory the race check
// shows it).
enum class Schedule {
  kInOrder,             // blocks and threads by index
  kReversed,            // by index, from the last
  kShuffled,            // a fresh permutation of each launch's blocks and each round (seeded)
  kWarpsAlone,          // blocks and warps by index, each warp alone as far as it goes
  kWarpsAloneReversed,  // the same from the last block and warp
};
inline constexpr Schedule kSchedules[] = {Schedule::kInOrder, Schedule::kReversed,
                                          Schedule::kShuffled, Schedule::kWarpsAlone,
                                          Schedule::kWarpsAloneReversed};
// "in_order", "reversed", "shuffled", "warps_alone", "warps_alone_reversed".
inline const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kInOrder: return "in_order";
    case Schedule::kReversed: return "reversed";
    case Schedule::kShuffled: return "shuffled";
    case Schedule::kWarpsAlone: return "warps_alone";
    case Schedule::kWarpsAloneReversed: return "warps_alone_reversed";
  }
  return "?";
}
inline Schedule schedule = Schedule::kInOrder;
inline uint64_t schedule_state = 0x9E3779B97F4A7C15ull;  // kShuffled's

// `schedule` for a scope, in order again after it.
class ScheduleScope {
 public:
  explicit ScheduleScope(Schedule s) { schedule = s; }
  ~ScheduleScope() { schedule = Schedule::kInOrder; }
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;
};

// `order` = [0, n) in `schedule`'s order.
inline void schedule_order(std::vector<unsigned>& order, unsigned n) {
  order.resize(n);
  const bool reversed =
      schedule == Schedule::kReversed || schedule == Schedule::kWarpsAloneReversed;
  for (unsigned i = 0; i < n; ++i) order[i] = reversed ? n - 1 - i : i;
  if (schedule != Schedule::kShuffled) return;
  for (unsigned i = n; i > 1; --i) {  // Fisher-Yates on splitmix64's draws
    uint64_t z = (schedule_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::swap(order[i - 1], order[z % i]);
  }
}

// Runs thread t of `run` up to its next barrier or its end; returns
// whether it ended there.
inline bool resume(BlockRun& run, unsigned t) {
  if (run.threads[t].done) return false;
  run.current = t;
  threadIdx = {t, 0, 0};
  switch_to(run.scheduler, run.threads[t].context);
  return run.threads[t].done;
}

// Runs `kernel` (a call of one entry point with its arguments) as a launch
// of grid x 1 x 1 blocks of `threads` x 1 x 1 threads would, block after
// block, in `schedule`'s order. Not reentrant; one launch at a time in a
// process.
inline void launch(unsigned grid, unsigned threads, const std::function<void()>& kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {threads, 1, 1};
  const bool warps_alone =
      schedule == Schedule::kWarpsAlone || schedule == Schedule::kWarpsAloneReversed;
  std::vector<unsigned> blocks, turns;
  schedule_order(blocks, grid);
  for (const unsigned b : blocks) {
    BlockRun run;
    run.kernel = &kernel;
    run.threads.resize(threads);
    run.warps.resize((threads + 31) / 32);
    run.block.alive = static_cast<int>(threads);
    for (size_t w = 0; w < run.warps.size(); ++w) {
      run.warps[w].meet.alive = static_cast<int>(std::min<size_t>(32, threads - 32 * w));
    }
    while (stacks().size() < threads) stacks().emplace_back(new char[BlockRun::kStackBytes]);
    for (unsigned t = 0; t < threads; ++t) {
      make_thread(run.threads[t], stacks()[t].get(), &run.scheduler);
    }
    blockIdx = {b, 0, 0};
    this_block = &run;
    if (race_check.on) race_check_block_begins();
    for (int live = static_cast<int>(threads); live > 0;) {
      const uint64_t before = progress;
      if (warps_alone) {
        schedule_order(turns, static_cast<unsigned>(run.warps.size()));
        for (const unsigned w : turns) {
          const unsigned end = std::min(threads, 32 * w + 32);
          // Its lanes in turn until a round of them moves no barrier: each
          // then waits at one of the block's, or has ended.
          for (uint64_t seen = ~progress; seen != progress;) {
            seen = progress;
            for (unsigned t = 32 * w; t < end; ++t) live -= resume(run, t) ? 1 : 0;
          }
        }
      } else {
        schedule_order(turns, threads);
        for (const unsigned t : turns) live -= resume(run, t) ? 1 : 0;
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
// In a section of their own, for the race check
// (cuda_emulator_race_check.h). GCC and clang leave variables in a named
// section without AddressSanitizer's red zones, so the section is the
// variables side by side.
#define __shared__ static __attribute__((section("strata_shared")))
#define STRATA_KERNEL inline void
