#include "kernels/cpu/reference/ops/thread_pool.h"

#include <algorithm>

namespace strata {
namespace {
// Spin iterations before a worker sleeps on the condition variable: long
// enough to bridge the gap between two ops of one forward pass (a few
// microseconds), short enough not to burn a shared core while idle.
constexpr int kSpinIterations = 20000;

// A spin-wait hint to the core (x86 PAUSE); nothing elsewhere.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) {
    workers_.emplace_back([this, t] { worker_main(t); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_chunk(int thread) {
  if (!dynamic_) {
    const int64_t begin = std::min(n_, chunk_ * thread);
    const int64_t end = std::min(n_, begin + chunk_);
    if (begin < end) thunk_(fn_, begin, end, thread);
    return;
  }
  int64_t begin = next_.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t left = n_ - begin;
    if (left <= 0) return;
    const int64_t take =
        std::min(left, std::max(chunk_, left / (2 * int64_t{n_threads_})));
    if (next_.compare_exchange_weak(begin, begin + take,
                                    std::memory_order_relaxed)) {
      thunk_(fn_, begin, begin + take, thread);
      begin = next_.load(std::memory_order_relaxed);
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, Thunk thunk, const void* fn,
                     bool dynamic) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int64_t grains_per_thread = (n_grains + n_threads_ - 1) / n_threads_;
  if (n_threads_ == 1 || n_grains == 1) {
    thunk(fn, 0, n, 0);
    return;
  }
  thunk_ = thunk;
  fn_ = fn;
  n_ = n;
  dynamic_ = dynamic;
  chunk_ = dynamic ? grain : grains_per_thread * grain;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunk(0);
  // The other chunks end within microseconds of ours when the work is
  // split evenly: spin first (a yield is a system call), then yield.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return generation_.load(std::memory_order_acquire) != seen;
      });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    run_chunk(thread);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace strata
