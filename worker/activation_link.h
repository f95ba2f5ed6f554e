// ActivationLink: how micro-batches reach a pipeline stage and how its
// results come back (DESIGN.md seam). The coordinator holds one to the first
// stage; each stage that is not the last holds one to the next. The
// scheduler does not know which implementation it uses:
//   - gRPC: a strata.v1.Worker/Activations stream to host:port
//     (make_grpc_link, worker/grpc_link.h);
//   - in-process: the next Stage in the same process, on its own thread,
//     no serialisation (make_in_process_link, worker/in_process_link.h).
//
// Ordering: results arrive in the order the micro-batches were sent, one per
// micro-batch (a rejected one gets a result with error_code set).
// Failure: when the far side dies or stops answering, every micro-batch
// sent and not yet answered gets a result with error_code UNAVAILABLE (or
// DEADLINE_EXCEEDED) whose message names the stage, and the link is broken:
// send() then fails at once until the link is remade.
//
// Threads: send() may be called from one thread at a time; the result
// callback runs on the link's own thread and must not block for long.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "strata/v1/worker.pb.h"

namespace strata::worker {

class ActivationLink {
 public:
  using ResultCallback = std::function<void(v1::MicroBatchResult result)>;

  virtual ~ActivationLink() = default;

  // Who is on the far side, for messages: "worker 127.0.0.1:50061".
  virtual const std::string& peer() const = 0;

  // Queues `batch` for the stage. Unavailable when the link is broken.
  virtual absl::Status send(v1::MicroBatch batch) = 0;

  // True until the far side failed or close() was called.
  virtual bool healthy() const = 0;

  // Ends the stream; pending micro-batches get UNAVAILABLE results whose
  // message is "<peer>: <reason>" (e.g. "link closed", or why this side
  // closed it). Blocks until the link's thread has finished.
  virtual void close(const std::string& reason) = 0;
};

// close()'s reason when nothing more is known.
inline constexpr char kLinkClosed[] = "link closed";

}  // namespace strata::worker
