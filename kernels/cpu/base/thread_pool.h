// ThreadPool: a fixed set of worker threads that run one parallel loop at a
// time. Ops take a pool by reference; there is no global pool.
//
// Usage:
//   ThreadPool pool(4);  // 4 threads in all: the caller plus 3 workers
//   pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int thread) {
//     for (int64_t r = begin; r < end; ++r) ...;
//   });
//
// parallel_for splits [0, n) into contiguous chunks, runs them on the caller
// and the workers and returns when all are done. It does not allocate (the
// callable is passed by pointer), so it may be used on the decode path.
// `thread` is in [0, size()) and names per-thread scratch buffers: no two
// calls running at once have the same `thread`.
//
// No loop waits for a worker that has not started it: once the caller has
// done its part it takes whatever is still untaken (parallel_for: the chunks
// no worker has claimed, each run with that chunk's `thread`; the dynamic
// and owned loops: the items left), closes the loop and waits only for the
// workers inside it. A worker that another process has kept off its core
// (a loaded machine, a busy neighbour) then costs the loop its share of the
// work, not a scheduler time slice (measured with two busy loops on the 2
// CPUs, `strata speed -p 64 -n 32 -t 2`: tg32 30.2 and 122.7 tok/s when
// every loop waited for the descheduled worker, 110-135 now; docs/perf.md).
// A worker that arrives late skips the closed loop.
//
// Threads: one thread at a time may call parallel_for (the pool is owned by
// one forward pass); calls from inside a running loop are not allowed.
// Workers spin for 500 us (kSpin, thread_pool.cc) after each loop before
// they sleep, so
// back-to-back loops (one per op, with a few microseconds of one-thread work
// between them) do not pay a wake-up each: on a virtual machine waking a
// sleeping thread is a futex call by the waker and an interrupt to a halted
// vCPU, tens of microseconds, longer than a decode step's whole matmul.
//
// CPUs: the pool reads the process's affinity mask (sched_getaffinity) once.
// With more threads than CPUs in it (oversubscribed) nobody spins — the
// caller yields and a worker sleeps as soon as it waits, since a spinning
// thread would hold the CPU that the thread it waits for needs (measured,
// SmolLM2 Q4_1 on 2 CPUs, `strata speed -p 64 -n 32 -t 4`: tg32 5.5 tok/s
// with spinning, 101-119 without; -t 2 344) — and the
// prefetching warm step is skipped. With Pinning::kWorkers and no more
// threads than CPUs, worker t is pinned to the t-th CPU of the mask; the
// caller's thread (not the pool's) is left where it is. Pinning is off by
// default: on the 2-vCPU VMs here it changed neither pp512 nor tg128
// through the noise (docs/engine.md, threads: ten A/B pairs), and two
// pools in one host (two stages, two workers) would pin their workers to
// the same CPUs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // Whether workers are pinned to CPUs (see the top of this file).
  enum class Pinning { kNone, kWorkers };

  // n_threads >= 1 counts the calling thread; values < 1 mean 1.
  explicit ThreadPool(int n_threads, Pinning pinning = Pinning::kNone);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // More threads than CPUs in the affinity mask (no spinning, no warm step).
  bool oversubscribed() const { return oversubscribed_; }
  // Workers were pinned to CPUs of the mask (a refused pin still counts).
  bool pinned() const { return pinned_; }

  // Runs fn(begin, end, thread) over a partition of [0, n) into at most
  // size() contiguous chunks (chunks are multiples of `grain` except the
  // last). n <= 0 returns at once.
  template <typename Fn>
  void parallel_for(int64_t n, const Fn& fn, int64_t grain = 1) {
    run(n, grain, &invoke<Fn>, &fn, Mode::kStatic);
  }

  // As parallel_for, but the threads take chunks off a shared counter
  // (guided: each takes max(min_chunk, remaining / (2 size())) items) until
  // [0, n) is done, so a thread that runs slower — a busier core, a later
  // wake-up — does less, instead of the others waiting for it. fn may be
  // called several times per thread, each with a contiguous [begin, end).
  template <typename Fn>
  void parallel_for_dynamic(int64_t n, const Fn& fn, int64_t min_chunk = 1) {
    run(n, min_chunk, &invoke<Fn>, &fn, Mode::kDynamic);
  }

  // Memory a thread asks the caches for once its part of a loop is done:
  // `tiles` consecutive tiles of up to 4 planes, tile k of plane i being
  // the bytes [base[i] + k * stride[i], base[i] + (k + 1) * stride[i]).
  // Prefetches are hints: they never fault and change no result.
  struct WarmPlan {
    const uint8_t* base[4] = {};
    int64_t stride[4] = {};
    int planes = 0;
    int64_t tiles = 0;
  };

  // As parallel_for_dynamic, but thread t first works through its own share
  // [share_begin(n, t), share_begin(n, t + 1)) from the front, min_chunk
  // items at a time, so its calls walk one contiguous range in order (for a
  // decode matmul: one memory stream per thread, which the hardware
  // prefetcher follows); a thread whose share is done then takes min_chunk
  // items at a time from the back of the others' shares until none is left.
  // A pool of one thread makes one call fn(0, n, 0).
  //
  // Then each thread t calls plan(t) -> WarmPlan (while fn's caller is still
  // waiting, so warm may read its frame) and asks the caches for that plan:
  // a worker after it has reported its part done, for as long as no new loop
  // arrives (so a worker that would only wait for the caller's one-thread
  // work between two loops streams the next loop's first bytes instead);
  // the caller for at most kCallerWarmBytes of it, before it returns.
  // n >= 2^31 runs as parallel_for_dynamic, without the warm step.
  template <typename Fn, typename Plan>
  void parallel_for_owned(int64_t n, const Fn& fn, int64_t min_chunk,
                          const Plan& plan) {
    warm_ = &invoke_warm<Plan>;
    warm_fn_ = &plan;
    run(n, min_chunk, &invoke<Fn>, &fn, Mode::kOwned);
  }

  // The first item of thread t's share of n items in parallel_for_owned
  // (t = size() gives n).
  int64_t share_begin(int64_t n, int t) const { return n * t / n_threads_; }

  // Bytes of its warm plan the calling thread prefetches before it returns
  // from parallel_for_owned (it goes on to one-thread work at once).
  static constexpr int64_t kCallerWarmBytes = 8 << 10;

 private:
  using Thunk = void (*)(const void* fn, int64_t begin, int64_t end,
                         int thread);
  using WarmThunk = WarmPlan (*)(const void* fn, int thread);
  template <typename Fn>
  static void invoke(const void* fn, int64_t begin, int64_t end, int thread) {
    (*static_cast<const Fn*>(fn))(begin, end, thread);
  }
  template <typename Fn>
  static WarmPlan invoke_warm(const void* fn, int thread) {
    return (*static_cast<const Fn*>(fn))(thread);
  }
  enum class Mode { kStatic, kDynamic, kOwned };

  void run(int64_t n, int64_t grain, Thunk thunk, const void* fn, Mode mode);
  void worker_main(int thread);
  // Runs thread's part of the current loop; for kOwned also fills
  // shares_[thread].plan.
  void run_chunk(int thread);
  void run_owned(int thread);
  // Static: runs chunk `chunk` (as thread `chunk`) unless another thread
  // has claimed it in this loop.
  void run_static(int chunk);
  // True for the one thread that claims static chunk `chunk` in this loop.
  bool claim(int chunk);
  // Takes up to chunk_ items off the front (own share) or the back (another
  // thread's) of share s into [*begin, *end); false when it is empty.
  bool take(int s, bool front, int64_t* begin, int64_t* end);
  // Prefetches up to max_bytes of `plan`; stops early, when `seen` is given,
  // as soon as the generation moves past it (a new loop).
  void warm(const WarmPlan& plan, int64_t max_bytes, const uint64_t* seen) const;

  // One thread's share of parallel_for_owned: [front, back) packed as
  // front | back << 32, and its warm plan; a cache line or two of its own.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
    std::atomic<uint64_t> claimed{0};  // static: the generation that ran chunk t
    WarmPlan plan;
  };

  const int n_threads_;
  bool oversubscribed_ = false;
  bool pinned_ = false;
  std::chrono::microseconds spin_{0};  // how long a wait spins before it yields / sleeps
  std::vector<std::thread> workers_;

  // The current loop; written by the caller before the generation bumps.
  Thunk thunk_ = nullptr;
  const void* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;       // static: items per thread; dynamic: the least chunk
  Mode mode_ = Mode::kStatic;
  std::atomic<int64_t> next_{0};  // dynamic: the first item not yet taken
  std::unique_ptr<Share[]> shares_;  // owned: one per thread
  WarmThunk warm_ = nullptr;         // owned: each thread's warm plan
  const void* warm_fn_ = nullptr;

  std::atomic<uint64_t> generation_{0};
  uint64_t loop_gen_ = 0;               // the current loop's generation
  std::atomic<uint64_t> closed_{0};     // the last loop whose items are all taken
  std::atomic<int> active_{0};          // workers inside the current loop
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};  // workers waiting on wake_
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace strata
