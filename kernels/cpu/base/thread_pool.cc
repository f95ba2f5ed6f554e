#include "kernels/cpu/base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace strata {
namespace {
// How long a worker spins for the next loop before it sleeps on the
// condition variable, and the caller for the workers before it yields: long
// enough to bridge the one-thread work between two ops of a forward pass
// and between two decode steps (tens of microseconds; an iteration count
// was about 6 us here, and the workers slept several times per token), short
// enough not to burn a core for long once the work stops.
constexpr auto kSpin = std::chrono::microseconds(500);

// Whether `until` has passed, checked every 64th spin (a clock read costs
// about as much as 64 pauses).
inline bool spun_out(int spin, std::chrono::steady_clock::time_point until) {
  return (spin & 63) == 63 && std::chrono::steady_clock::now() >= until;
}

// The CPUs in this process's affinity mask, in ascending order; empty when
// the mask cannot be read.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Pins the calling thread to `cpu`; a refusal (a container's cgroup, a
// seccomp filter) leaves it where it was.
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

// A spin-wait hint to the core (x86 PAUSE); nothing elsewhere.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads, Pinning pinning)
    : n_threads_(std::max(1, n_threads)), shares_(new Share[std::max(1, n_threads)]) {
  const std::vector<int> cpus = allowed_cpus();
  // More threads than CPUs: a spinning thread would hold the CPU that the
  // thread it waits for needs, so waits go straight to yield / sleep, and
  // nobody prefetches (the warm step would take a CPU from the work).
  oversubscribed_ = !cpus.empty() && n_threads_ > static_cast<int>(cpus.size());
  spin_ = oversubscribed_ ? std::chrono::microseconds(0) : kSpin;
  const bool pin = pinning == Pinning::kWorkers && !oversubscribed_ &&
                   static_cast<int>(cpus.size()) >= n_threads_;
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) {
    const int cpu = pin ? cpus[t] : -1;
    workers_.emplace_back([this, t, cpu] {
      if (cpu >= 0) pin_to(cpu);
      worker_main(t);
    });
  }
  pinned_ = pin && n_threads_ > 1;
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

bool ThreadPool::take(int s, bool front, int64_t* begin, int64_t* end) {
  std::atomic<uint64_t>& range = shares_[s].range;
  uint64_t cur = range.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t f = static_cast<int64_t>(cur & 0xFFFFFFFFu);
    const int64_t b = static_cast<int64_t>(cur >> 32);
    if (f >= b) return false;
    const int64_t nf = front ? std::min(b, f + chunk_) : f;
    const int64_t nb = front ? b : std::max(f, b - chunk_);
    const uint64_t next = static_cast<uint64_t>(nf) | static_cast<uint64_t>(nb) << 32;
    if (range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      *begin = front ? f : nb;
      *end = front ? nf : b;
      return true;
    }
  }
}

void ThreadPool::run_owned(int thread) {
  int64_t begin = 0, end = 0;
  while (take(thread, /*front=*/true, &begin, &end)) thunk_(fn_, begin, end, thread);
  for (int k = 1; k < n_threads_; ++k) {
    const int victim = (thread + k) % n_threads_;
    while (take(victim, /*front=*/false, &begin, &end)) thunk_(fn_, begin, end, thread);
  }
  shares_[thread].plan = warm_(warm_fn_, thread);
}

void ThreadPool::warm(const WarmPlan& plan, int64_t max_bytes, const uint64_t* seen) const {
  // A tile may be large (a 16-row Q4_0 group of 14,336-wide rows is 126
  // KiB), so
  // both the budget and the check for a new loop apply within it.
  auto moved_on = [&] {
    return seen != nullptr && generation_.load(std::memory_order_relaxed) != *seen;
  };
  int64_t bytes = 0;
  for (int64_t k = 0; k < plan.tiles; ++k) {
    for (int i = 0; i < plan.planes; ++i) {
      const uint8_t* p = plan.base[i] + k * plan.stride[i];
      const int64_t n = std::min(plan.stride[i], max_bytes - bytes);
      for (int64_t b = 0; b < n; b += 64) {
        __builtin_prefetch(p + b, 0, 2);
        if ((b & 4095) == 4032 && moved_on()) return;
      }
      bytes += n;
      if (bytes >= max_bytes) return;
    }
    if (moved_on()) return;
  }
}

bool ThreadPool::claim(int chunk) {
  return shares_[chunk].claimed.exchange(loop_gen_, std::memory_order_acq_rel) != loop_gen_;
}

void ThreadPool::run_static(int chunk) {
  if (!claim(chunk)) return;
  const int64_t begin = std::min(n_, chunk_ * chunk);
  const int64_t end = std::min(n_, begin + chunk_);
  if (begin < end) thunk_(fn_, begin, end, chunk);
}

void ThreadPool::run_chunk(int thread) {
  if (mode_ == Mode::kOwned) {
    run_owned(thread);
    return;
  }
  if (mode_ == Mode::kStatic) {
    run_static(thread);
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
                     Mode mode) {
  if (n <= 0) return;
  // A share's ends are 32-bit fields: a longer loop runs dynamic, unwarmed.
  if (mode == Mode::kOwned && n >= (int64_t{1} << 31)) mode = Mode::kDynamic;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int64_t grains_per_thread = (n_grains + n_threads_ - 1) / n_threads_;
  if (n_threads_ == 1 || (n_grains == 1 && mode != Mode::kOwned)) {
    thunk(fn, 0, n, 0);
    if (mode == Mode::kOwned && !oversubscribed_) {
      warm(warm_(warm_fn_, 0), kCallerWarmBytes, nullptr);
    }
    return;
  }
  thunk_ = thunk;
  fn_ = fn;
  n_ = n;
  mode_ = mode;
  chunk_ = mode == Mode::kStatic ? grains_per_thread * grain : grain;
  next_.store(0, std::memory_order_relaxed);
  if (mode == Mode::kOwned) {
    for (int t = 0; t < n_threads_; ++t) {
      const uint64_t f = static_cast<uint64_t>(share_begin(n, t));
      const uint64_t b = static_cast<uint64_t>(share_begin(n, t + 1));
      shares_[t].range.store(f | b << 32, std::memory_order_relaxed);
    }
  }
  loop_gen_ = generation_.load(std::memory_order_relaxed) + 1;
  // seq_cst with the sleepers' count (worker_main): either a worker about
  // to sleep sees the new generation, or this sees it counted and wakes it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  run_chunk(0);
  // Whatever no worker has started is the caller's: static chunks not yet
  // claimed (run_owned and the dynamic loop already took every item left).
  if (mode == Mode::kStatic) {
    for (int t = 1; t < n_threads_; ++t) run_static(t);
  }
  if (mode == Mode::kOwned && !oversubscribed_) {
    warm(shares_[0].plan, kCallerWarmBytes, nullptr);
  }
  // Every item is taken. Close the loop: a worker that has not joined yet
  // (descheduled by another process, or still waking) sees it closed and
  // skips it, so the caller waits only for the workers inside it. seq_cst
  // with the workers' join (worker_main): either a joining worker sees the
  // loop closed, or this sees it counted in active_.
  closed_.store(loop_gen_, std::memory_order_seq_cst);
  // The others' chunks end within microseconds of ours when the work is
  // split evenly: spin first (a yield is a system call), then yield.
  const auto until = std::chrono::steady_clock::now() + spin_;
  bool yield = spin_.count() == 0;
  for (int spin = 0; active_.load(std::memory_order_seq_cst) != 0; ++spin) {
    if (!yield) {
      cpu_relax();
      yield = spun_out(spin, until);
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (int spin = 0; gen == seen && spin_.count() > 0 && !spun_out(spin, until);
         ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return generation_.load(std::memory_order_seq_cst) != seen;
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    // Join the loop unless the caller has already closed it (it then ran
    // this thread's part itself).
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (closed_.load(std::memory_order_seq_cst) >= seen) {
      active_.fetch_sub(1, std::memory_order_release);
      continue;
    }
    const bool owned = mode_ == Mode::kOwned;  // read before the caller may go on
    run_chunk(thread);
    active_.fetch_sub(1, std::memory_order_release);
    // The plan is this thread's own copy: the loop's caller may have
    // returned already. Stops when the next loop arrives.
    if (owned && !oversubscribed_) warm(shares_[thread].plan, INT64_MAX, &seen);
  }
}

}  // namespace strata
