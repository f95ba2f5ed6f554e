// StepTotals: the time a stage spent running micro-batches (Stage::run)
// and how many it ran, since its shard loaded. Reported in the worker's
// Health answer (step_seconds, steps) and by the coordinator as
// strata:worker_step_seconds (a summary: _sum and _count), so that
// rate(_sum) / rate(_count) is a stage's mean step time.
// Threads: any; relaxed atomics (one add per micro-batch).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace strata::worker {

class StepTotals {
 public:
  void add(std::chrono::steady_clock::duration d) {
    seconds_.fetch_add(std::chrono::duration<double>(d).count(),
                       std::memory_order_relaxed);
    steps_.fetch_add(1, std::memory_order_relaxed);
  }
  double seconds() const { return seconds_.load(std::memory_order_relaxed); }
  uint64_t steps() const { return steps_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> seconds_{0.0};
  std::atomic<uint64_t> steps_{0};
};

}  // namespace strata::worker
