// ThreadPool (kernels/cpu/base/thread_pool.h): every loop kind covers its
// range once, with the thread indices and shares it documents; a slow or
// descheduled thread costs a loop its share, not a wait; pinning.
#include "kernels/cpu/base/thread_pool.h"

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(ThreadPool, CoversRangeOnceWithManyLoops) {
  ThreadPool pool(4);
  std::vector<int> hits(1001, 0);
  for (int loop = 0; loop < 200; ++loop) {
    pool.parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
  }
  for (int h : hits) ASSERT_EQ(h, 200);
}

TEST(ThreadPool, DynamicCoversRangeOnceInContiguousChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1001}) {
      for (int64_t min_chunk : {1, 3, 50, 5000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::atomic<int> calls{0};
        pool.parallel_for_dynamic(n, [&](int64_t b, int64_t e, int t) {
          ASSERT_LT(b, e);
          ASSERT_GE(t, 0);
          ASSERT_LT(t, threads);
          // Every chunk but the range's last has at least min_chunk items.
          if (e < n) {
            ASSERT_GE(e - b, std::min(min_chunk, n));
          }
          for (int64_t i = b; i < e; ++i) ++hits[i];
          ++calls;
        }, min_chunk);
        for (int h : hits) ASSERT_EQ(h, 1) << n << " " << min_chunk << " " << threads;
        EXPECT_LE(calls.load(), (n + min_chunk - 1) / min_chunk);
      }
    }
  }
}

TEST(ThreadPool, DynamicGivesASlowThreadLess) {
  ThreadPool pool(2);
  std::atomic<int64_t> done[2] = {0, 0};
  pool.parallel_for_dynamic(400, [&](int64_t b, int64_t e, int t) {
    // Thread 1 is ten times slower per item.
    std::this_thread::sleep_for(std::chrono::microseconds((t == 1 ? 500 : 50) * (e - b)));
    done[t] += e - b;
  }, 4);
  EXPECT_EQ(done[0] + done[1], 400);
  EXPECT_GT(done[0].load(), 2 * done[1].load()) << done[0] << " vs " << done[1];
}

TEST(ThreadPool, OwnedCoversRangeOnceOwnShareFirstInOrder) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1001}) {
      for (int64_t min_chunk : {1, 3, 50, 5000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::vector<std::vector<std::pair<int64_t, int64_t>>> calls(threads);
        std::vector<int> warmed(threads, 0);
        pool.parallel_for_owned(
            n,
            [&](int64_t b, int64_t e, int t) {
              // One thread runs the range in one call.
              if (threads > 1) {
                EXPECT_LE(e - b, min_chunk);
              }
              for (int64_t i = b; i < e; ++i) ++hits[i];
              calls[t].emplace_back(b, e);
            },
            min_chunk, [&](int t) {
              ++warmed[t];
              return ThreadPool::WarmPlan{};
            });
        for (int h : hits) ASSERT_EQ(h, 1) << n << " " << min_chunk << " " << threads;
        // The caller always plans its warm step; a worker only when it
        // joined the loop before the caller closed it.
        EXPECT_EQ(warmed[0], 1);
        for (int t = 0; t < threads; ++t) {
          EXPECT_LE(warmed[t], 1) << t;
          // The calls a thread makes inside its own share walk it from its
          // start, each beginning where the last ended (others take from
          // its back end).
          const int64_t own_b = pool.share_begin(n, t), own_e = pool.share_begin(n, t + 1);
          int64_t at = own_b;
          for (auto [b, e] : calls[t]) {
            if (b < own_b || b >= own_e) continue;
            EXPECT_EQ(b, at) << "thread " << t << " n " << n << " chunk " << min_chunk;
            at = e;
          }
          if (threads == 1) {
            EXPECT_EQ(at, n);
          }
        }
      }
    }
  }
}

TEST(ThreadPool, OwnedLetsAFastThreadTakeFromASlowOnesShare) {
  ThreadPool pool(2);
  std::atomic<int64_t> done[2] = {0, 0};
  std::atomic<int64_t> taken_from_1{0};
  pool.parallel_for_owned(
      400,
      [&](int64_t b, int64_t e, int t) {
        // Thread 1 is ten times slower per item.
        std::this_thread::sleep_for(std::chrono::microseconds((t == 1 ? 500 : 50) * (e - b)));
        done[t] += e - b;
        if (t == 0 && b >= pool.share_begin(400, 1)) taken_from_1 += e - b;
      },
      4, [](int) { return ThreadPool::WarmPlan{}; });
  EXPECT_EQ(done[0] + done[1], 400);
  EXPECT_GT(done[0].load(), 2 * done[1].load()) << done[0] << " vs " << done[1];
  EXPECT_GT(taken_from_1.load(), 0);
}

TEST(ThreadPool, OwnedWarmPlanMayOutliveTheCallersFrame) {
  // A worker prefetches its plan after the loop returns: the plan is copied,
  // and a loop right after (the plan still being prefetched) runs correctly.
  std::vector<uint8_t> memory(1 << 20, 1);  // outlives the pool's workers
  ThreadPool pool(3);
  for (int loop = 0; loop < 300; ++loop) {
    std::vector<int> hits(97, 0);
    pool.parallel_for_owned(
        static_cast<int64_t>(hits.size()),
        [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) ++hits[i];
        },
        5, [&](int t) {
          ThreadPool::WarmPlan plan;
          plan.base[0] = memory.data() + t * 4096;
          plan.stride[0] = 4096;
          plan.base[1] = memory.data() + (1 << 19);
          plan.stride[1] = 64;
          plan.planes = 2;
          plan.tiles = 64;
          return plan;
        });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

// The CPUs of this process's affinity mask, ascending.
std::vector<int> mask_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

TEST(ThreadPool, MoreThreadsThanCpusStillCoverEveryLoopOnce) {
  const int cpus = static_cast<int>(mask_cpus().size());
  ASSERT_GT(cpus, 0);
  const int threads = 2 * cpus + 1;
  ThreadPool pool(threads);
  EXPECT_TRUE(pool.oversubscribed());
  EXPECT_FALSE(pool.pinned());
  std::vector<int> hits(313, 0);
  const int64_t n = static_cast<int64_t>(hits.size());
  auto count = [&](int64_t b, int64_t e, int t) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, threads);
    for (int64_t i = b; i < e; ++i) ++hits[i];
  };
  for (int loop = 0; loop < 100; ++loop) {
    pool.parallel_for(n, count);
    pool.parallel_for_dynamic(n, count, 7);
    pool.parallel_for_owned(n, count, 5, [](int) { return ThreadPool::WarmPlan{}; });
  }
  for (int h : hits) ASSERT_EQ(h, 300);
}

// Each static chunk runs once with its own `thread`, whoever runs it.
TEST(ThreadPool, StaticChunksRunOnceEachWithTheirOwnThreadIndex) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int loop = 0; loop < 2000; ++loop) {
      std::vector<std::atomic<int>> seen(threads);
      std::vector<int> hits(97, 0);
      pool.parallel_for(97, [&](int64_t b, int64_t e, int t) {
        ASSERT_EQ(seen[t].fetch_add(1), 0) << "thread index " << t << " twice";
        for (int64_t i = b; i < e; ++i) ++hits[i];
      });
      for (int h : hits) ASSERT_EQ(h, 1);
    }
  }
}

// A loop does not wait for a worker that has not joined it. Worker 1 is
// held off the pool by a signal whose handler waits for `g_release` (as a
// busy machine keeps a thread off its core); the caller runs 20 loops
// alone meanwhile. A pool that waited for every worker would hang here.
std::atomic<bool> g_release{false};
std::atomic<bool> g_held{false};
void hold_until_released(int) {
  g_held.store(true);
  const timespec ms{0, 1000000};
  while (!g_release.load()) nanosleep(&ms, nullptr);
}

TEST(ThreadPool, LoopsDoNotWaitForAWorkerThatHasNotJoined) {
  ThreadPool pool(2);
  std::atomic<pid_t> worker_tid{0};
  for (int loop = 0; loop < 100000 && worker_tid.load() == 0; ++loop) {
    pool.parallel_for_dynamic(64, [&](int64_t, int64_t, int t) {
      if (t == 1) worker_tid = static_cast<pid_t>(syscall(SYS_gettid));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  ASSERT_NE(worker_tid.load(), 0) << "worker 1 never joined a loop";
  struct sigaction act {}, old {};
  act.sa_handler = hold_until_released;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &act, &old), 0);
  g_release = false;
  g_held = false;
  ASSERT_EQ(syscall(SYS_tgkill, getpid(), worker_tid.load(), SIGUSR1), 0);
  while (!g_held.load()) std::this_thread::yield();
  std::vector<int> hits(1000, 0);
  for (int loop = 0; loop < 20; ++loop) {
    pool.parallel_for(1000, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    });
    pool.parallel_for_dynamic(1000, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    }, 10);
    pool.parallel_for_owned(1000, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++hits[i];
    }, 10, [](int) { return ThreadPool::WarmPlan{}; });
  }
  for (int h : hits) ASSERT_EQ(h, 60);
  g_release = true;
  // The worker comes back and takes part again.
  std::vector<int> again(1000, 0);
  for (int loop = 0; loop < 50; ++loop) {
    pool.parallel_for_dynamic(1000, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) ++again[i];
    });
  }
  for (int h : again) ASSERT_EQ(h, 50);
  sigaction(SIGUSR1, &old, nullptr);
}

TEST(ThreadPool, PinsEachWorkerToItsOwnCpuOfTheMask) {
  const std::vector<int> cpus = mask_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU in the affinity mask: nothing to pin";
  const int threads = static_cast<int>(std::min<size_t>(cpus.size(), 4));
  ThreadPool pool(threads, ThreadPool::Pinning::kWorkers);
  EXPECT_FALSE(pool.oversubscribed());
  EXPECT_TRUE(pool.pinned());
  // Each worker reports its own mask from inside a loop (dynamic: `t` is
  // the thread that runs the call). A worker may miss a loop (the caller
  // takes what nobody has started), so loop until every one has reported.
  std::vector<int> count(threads, -1), cpu(threads, -1);
  const std::thread::id caller = std::this_thread::get_id();
  for (int loop = 0; loop < 100000; ++loop) {
    pool.parallel_for_dynamic(64, [&](int64_t, int64_t, int t) {
      if (t == 0) {
        ASSERT_EQ(std::this_thread::get_id(), caller);
      }
      cpu_set_t set;
      CPU_ZERO(&set);
      ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
      count[t] = CPU_COUNT(&set);
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) cpu[t] = c;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
    if (std::count(count.begin(), count.end(), -1) == 0) break;
  }
  // The caller (thread 0) is not the pool's to pin.
  EXPECT_EQ(count[0], static_cast<int>(cpus.size()));
  for (int t = 1; t < threads; ++t) {
    EXPECT_EQ(count[t], 1) << "worker " << t;
    EXPECT_EQ(cpu[t], cpus[t]) << "worker " << t;
  }
  ThreadPool unpinned(threads);  // the default
  EXPECT_FALSE(unpinned.pinned());
}

}  // namespace
}  // namespace strata
