// FrameUpstream: the receiving side of a frame link (worker/frame_link.h):
// the previous stage's micro-batches come in over the forward
// communicator, run through this stage's StageRelay, and their results go
// back over the results communicator, in the order the micro-batches came
// (as the Activations stream does for a gRPC link: worker_service.h).
//
// Its thread joins forward (rank 1), then results (rank 0), as the sending
// side does, waiting for the previous stage at most `join_timeout` (the
// coordinator links both stages at once, after every shard loaded: the
// worker gives its answer_timeout_ms). Then it receives until the close
// frame, a transport error, or close().
//
// Bad input: each frame is checked (unframe_micro_batch) before it runs; a
// bad one ends the link, as does a peer owing max_owed results (it sends
// and never reads). Either is logged and, best effort (a second to get the
// results channel, a second to send), told to the previous stage as a
// close frame with its reason (nccl_frame.h): its pending micro-batches
// then fail at once, naming this stage and the reason. A previous stage
// that does not read never takes it, and learns when its oldest
// micro-batch is overdue.
//
// Ownership: borrows the relay, which must outlive the upstream's close()
// (the results of micro-batches still with the next stage may arrive after
// close: they are dropped). Threads: one; close() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "worker/frame_channel.h"
#include "worker/frame_link.h"
#include "worker/stage_relay.h"

namespace strata::worker {

struct FrameUpstreamOptions {
  std::string label;  // "worker w2: link from the previous stage (nccl)"
  std::chrono::milliseconds join_timeout{30000};
  size_t max_owed = 256;  // results owed to the peer at once
  uint32_t n_embd = 0;    // the width of a hidden row (frame cols)
  uint32_t max_rows = kMaxFrameRows;  // of a micro-batch (the shard's max_batch_rows)
};

class FrameUpstream {
 public:
  FrameUpstream(std::shared_ptr<FrameTransport> transport,
                const FrameLinkIds& ids, StageRelay& relay,
                FrameUpstreamOptions options);
  ~FrameUpstream();
  FrameUpstream(const FrameUpstream&) = delete;
  FrameUpstream& operator=(const FrameUpstream&) = delete;

  // Ends the link (aborting a join or a wait) and waits for the thread.
  void close();

  // Micro-batches received and handed to the relay so far.
  uint64_t received() const { return received_.load(); }
  // Why the link ended: "" while it runs or when close() ended it; "the
  // previous stage closed the link" after its close frame; else the error.
  std::string ended() const;

 private:
  struct Shared;  // the results channel, shared with the results' sink

  void run();
  void end(const std::string& why);

  const std::shared_ptr<FrameTransport> transport_;
  const FrameLinkIds ids_;
  StageRelay& relay_;
  const FrameUpstreamOptions options_;
  std::shared_ptr<Shared> shared_;
  std::atomic<uint64_t> received_{0};
  mutable std::mutex mu_;
  bool closed_ = false;  // guarded by mu_: close() was called
  std::string ended_;    // guarded by mu_
  std::thread thread_;
};

}  // namespace strata::worker
