// OrderedResults: hands the results of micro-batches to a sink in the order
// the micro-batches arrived, whichever thread completes them and in
// whatever order they complete (a rejected micro-batch is answered at once,
// one that went down the pipeline when the next stage answers).
//
// Usage:
//   OrderedResults out([](v1::MicroBatchResult r) { write(r); });
//   uint64_t t = out.reserve();   // when the micro-batch arrives
//   ...
//   out.complete(t, std::move(result));  // any thread, any order
//
// Threads: any thread may call any method. The sink runs on a thread that
// called complete(), one call at a time, in ticket order, without the
// internal lock held (so it may call reserve() or complete()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "strata/v1/worker.pb.h"

namespace strata::worker {

class OrderedResults {
 public:
  using Sink = std::function<void(v1::MicroBatchResult result)>;

  explicit OrderedResults(Sink sink) : sink_(std::move(sink)) {}

  // The ticket of the next micro-batch.
  uint64_t reserve();
  // Its result; delivers every result that is now next in order.
  void complete(uint64_t ticket, v1::MicroBatchResult result);
  // Reserved and not yet delivered (a result in the sink counts until the
  // sink returns).
  size_t outstanding() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_ = 0;  // the next ticket to hand out
  uint64_t head_ = 0;  // the next ticket to deliver
  // Results of tickets [head_, next_), filled as they complete.
  std::deque<std::optional<v1::MicroBatchResult>> slots_;
  bool delivering_ = false;  // a thread is running the sink
  Sink sink_;
};

// An error result for micro-batch `batch_id`.
v1::MicroBatchResult error_result(uint64_t batch_id, int code,
                                  std::string message);

}  // namespace strata::worker
