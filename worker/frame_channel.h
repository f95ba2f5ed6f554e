// FrameChannel and FrameTransport: the seam under the frame link
// (worker/frame_link.h) between two pipeline stages. A transport moves
// frames (worker/nccl_frame.h: a 64-byte header, meta, f32 payload) over a
// communicator of two ranks that both stages join with one id. Two
// implementations:
//   - NCCL point-to-point between two GPUs (worker/nccl_channel.h; built
//     with CUDA and NCCL), whose ids are ncclUniqueIds;
//   - in memory, between stages of one process (tests/worker/
//     in_memory_transport.h: the fake the link and the worker service's
//     wiring are tested with where there is no GPU).
//
// One link uses two communicators, one a direction, so that each is driven
// by one thread (NCCL calls on one communicator must not come from two
// threads at once): see frame_link.h.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/nccl_frame.h"

namespace strata::worker {

// A communicator's id: an ncclUniqueId's 128 bytes (kNcclIdBytes), opaque
// outside the transport that made it.
using LinkId = std::array<uint8_t, kNcclIdBytes>;

// One end (one rank) of a two-rank communicator. Not thread-safe except
// abort() and aborted(): one thread at a time calls the rest.
class FrameChannel {
 public:
  virtual ~FrameChannel() = default;

  // Sends `frame` to the other rank; returns once it is handed over
  // (NCCL: the transfer completed), within the transport's timeout.
  // Unavailable (the far side failed, or aborted), DeadlineExceeded.
  virtual absl::Status send(const Frame& frame) = 0;
  // As send(), but given up (DeadlineExceeded) after `limit` when that is
  // sooner than the transport's timeout: a frame that is not worth waiting
  // for (the close frame of a link that ends).
  virtual absl::Status send_within(const Frame& frame, std::chrono::milliseconds limit) = 0;

  // When a wait must end: nullopt for no bound. Asked while waiting (the
  // answer may change: a link bounds a wait only while it owes answers).
  using DeadlineFn =
      std::function<std::optional<std::chrono::steady_clock::time_point>()>;

  // The other rank's next frame: its header is waited for without a bound
  // (an idle link is fine) unless `deadline` gives one, the rest within
  // the transport's timeout. The header is checked (decode_frame_header)
  // before any buffer is sized from it. Unavailable (the far side failed,
  // or aborted), DeadlineExceeded, InvalidArgument (a bad header).
  virtual absl::StatusOr<Frame> recv(const DeadlineFn& deadline = nullptr) = 0;

  // Makes a waiting or later call fail with Unavailable("aborted"). Any
  // thread.
  virtual void abort() = 0;
  virtual bool aborted() const = 0;

  virtual int rank() const = 0;  // 0 or 1
};

// Makes ids and joins communicators. Threads: any thread may call any
// method.
class FrameTransport {
 public:
  virtual ~FrameTransport() = default;

  // "nccl" (what MakeNcclId, LinkNccl and Describe call it) or the
  // fake's name, for messages.
  virtual const std::string& name() const = 0;

  // A new communicator's id. The process that made it must stay up until
  // both ranks have joined (NCCL: its bootstrap listener runs here).
  // Unavailable with the transport's error.
  virtual absl::StatusOr<LinkId> make_id() = 0;

  // Joins communicator `id` as `rank` (0 or 1) of two, for frames within
  // `limits`; blocks until the other rank has joined, `timeout` has passed
  // (DeadlineExceeded), or `*cancel` became true (Unavailable "aborted";
  // may be null). InvalidArgument for a rank outside {0, 1}; Unavailable
  // with the transport's error.
  virtual absl::StatusOr<std::unique_ptr<FrameChannel>> join(
      const LinkId& id, int rank, std::chrono::milliseconds timeout,
      const std::atomic<bool>* cancel, const FrameLimits& limits) = 0;
};

}  // namespace strata::worker
