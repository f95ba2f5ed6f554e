// StreamWriter: writes one gRPC stream's results (an Activations stream's,
// or the last stage's Results stream) on the caller's thread, and lets a
// watchdog cut a stream whose peer stopped reading.
//
// A gRPC synchronous Write blocks once the peer's HTTP/2 flow-control
// window is full, that is when the peer does not read. The thread that
// writes is a shared one (the stage's thread for Results, the link reader
// of the next stage for an Activations stream's relayed results), so a
// peer that never reads would stall every sequence on the worker and let
// the results owed to that stream pile up. Two bounds:
//   - a Write that has not returned `stall` after it began is a peer that
//     does not read: cancel_if_stalled() cancels the stream (its Write then
//     returns false and every later write is dropped);
//   - the stream's owner cancels it with overflow() when the results it
//     owes pass its bound (WorkerService: kMaxOutstandingResults).
// Either way status() is RESOURCE_EXHAUSTED naming the bound, and the
// results owed afterwards are dropped as they come (their memory freed).
//
// Threads: any thread may call any method; writes are serialised (one
// Write at a time, in call order). close() waits for a Write under way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "strata/v1/worker.pb.h"

namespace strata::worker {

class StreamWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // Blocking write; false when the stream has ended.
  using WriteFn = std::function<bool(const v1::MicroBatchResult& result)>;
  // Cancels the stream (grpc::ServerContext::TryCancel): a Write under way
  // returns false soon after.
  using CancelFn = std::function<void()>;

  // `label` names the stream in status() ("Activations stream from
  // 127.0.0.1:5555").
  StreamWriter(WriteFn write, CancelFn cancel, std::string label);

  // Writes `result`; false when the stream failed, was cut or closed (the
  // result is dropped).
  bool write(const v1::MicroBatchResult& result);
  // Cuts the stream when a Write has been under way for `stall` or longer
  // at `now`; true when it did (now, not before).
  bool cancel_if_stalled(Clock::time_point now,
                         std::chrono::milliseconds stall);
  // Cuts the stream: the peer owes `what` past its bound.
  void overflow(const std::string& what);
  // Whether writes fail from now on (the peer went away, or it was cut).
  bool failed() const;
  // OK, or RESOURCE_EXHAUSTED when the stream was cut (saying why).
  absl::Status status() const;
  // Waits up to `wait` for the next write to end.
  void wait_a_while(
      std::chrono::milliseconds wait = std::chrono::milliseconds(100));
  // No write after this returns (waits for one under way).
  void close();

 private:
  void cut(std::string why);  // requires mu_

  const WriteFn write_;
  const CancelFn cancel_;
  const std::string label_;
  std::mutex write_mu_;  // one Write at a time; taken before mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false;
  Clock::time_point write_began_{};
  bool failed_ = false;
  bool closed_ = false;
  std::string cut_;  // why the stream was cut; empty when it was not
};

}  // namespace strata::worker
