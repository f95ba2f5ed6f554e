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
// `thread` is in [0, size()) and names per-thread scratch buffers.
//
// Threads: one thread at a time may call parallel_for (the pool is owned by
// one forward pass); calls from inside a running loop are not allowed.
// Workers spin briefly after each loop before they sleep, so back-to-back
// loops (one per op) do not pay a wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // n_threads >= 1 counts the calling thread; values < 1 mean 1.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(begin, end, thread) over a partition of [0, n) into at most
  // size() contiguous chunks (chunks are multiples of `grain` except the
  // last). n <= 0 returns at once.
  template <typename Fn>
  void parallel_for(int64_t n, const Fn& fn, int64_t grain = 1) {
    run(n, grain, &invoke<Fn>, &fn, /*dynamic=*/false);
  }

  // As parallel_for, but the threads take chunks off a shared counter
  // (guided: each takes max(min_chunk, remaining / (2 size())) items) until
  // [0, n) is done, so a thread that runs slower — a busier core, a later
  // wake-up — does less, instead of the others waiting for it. fn may be
  // called several times per thread, each with a contiguous [begin, end).
  template <typename Fn>
  void parallel_for_dynamic(int64_t n, const Fn& fn, int64_t min_chunk = 1) {
    run(n, min_chunk, &invoke<Fn>, &fn, /*dynamic=*/true);
  }

 private:
  using Thunk = void (*)(const void* fn, int64_t begin, int64_t end,
                         int thread);
  template <typename Fn>
  static void invoke(const void* fn, int64_t begin, int64_t end, int thread) {
    (*static_cast<const Fn*>(fn))(begin, end, thread);
  }

  void run(int64_t n, int64_t grain, Thunk thunk, const void* fn, bool dynamic);
  void worker_main(int thread);
  void run_chunk(int thread);

  const int n_threads_;
  std::vector<std::thread> workers_;

  // The current loop; written by the caller before the generation bumps.
  Thunk thunk_ = nullptr;
  const void* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;       // static: items per thread; dynamic: the least chunk
  bool dynamic_ = false;
  std::atomic<int64_t> next_{0};  // dynamic: the first item not yet taken

  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace strata
