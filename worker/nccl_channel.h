// NCCL channels (worker/frame_channel.h): frames between two pipeline
// stages on GPUs, in one host or across hosts, as NCCL point-to-point
// transfers: the transport of the frame link (worker/frame_link.h) between
// GPU workers (DESIGN.md: activations "NCCL between GPUs"). Built only with
// CUDA and NCCL (STRATA_HAVE_NCCL).
//
// Each frame (worker/nccl_frame.h) is two rounds of transfers: the 64-byte
// header, then its meta and its f32 payload (sizes from the header), staged
// through device buffers sized at join for the channel's FrameLimits, on
// the channel's own CUDA stream.
//
// Ids: ncclGetUniqueId (make_nccl_id, NcclTransport::make_id) starts NCCL's
// bootstrap listener in the calling process, which must stay up until both
// ranks have joined; the worker makes them for the coordinator (MakeNcclId,
// proto/strata/v1/worker.proto). NCCL refuses two ranks on one GPU
// ("invalid usage"): a link needs two GPUs; one GPU can test a communicator
// of one rank sending to itself (NcclChannel::exchange_with_self).
//
// Failure: every wait polls the stream and ncclCommGetAsyncError (the
// communicators are non-blocking), so a peer that dies or hangs fails the
// call after its bound instead of blocking forever; the communicator is
// aborted then. ncclCommAbort frees device memory, which waits for every
// kernel on the device, and a receive parked on another communicator of
// this process (an idle link's) would never end: so before any
// communicator is aborted (or destroyed) every channel of the process is
// told to abort, and each aborts its own from the thread using it. One
// link failing thus fails every NCCL link of the worker; the coordinator
// loads the pipeline again either way (its ids are spent). And no channel
// posts a transfer while a communicator of the process is being joined (a
// transfer parked on the device could hold up the join's allocations).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/frame_channel.h"
#include "worker/nccl_frame.h"

namespace strata::worker {

// An ncclUniqueId's bytes (kNcclIdBytes, nccl_frame.h), kept out of
// headers so that callers do not need nccl.h.
using NcclId = LinkId;

// ncclGetUniqueId: starts NCCL's bootstrap listener in this process, which
// must stay up until every rank has joined. Unavailable with NCCL's error.
absl::StatusOr<NcclId> make_nccl_id();

struct NcclChannelOptions {
  int device = 0;  // CUDA device ordinal
  // Bound of joining and of each round of a frame once its header came.
  std::chrono::milliseconds timeout{30000};
  // The largest frame: with cols set, the device buffers are sized for it
  // at join and never change (cudaMalloc/cudaFree wait for the whole
  // device, where another communicator's receive may be parked); cols 0
  // (the default): any width, buffers grow (the one-rank tests).
  FrameLimits limits{kMaxFrameRows, 0, kMaxFrameMetaBytes};
};

// One communicator, one direction of frames, on its own CUDA stream, with
// device staging buffers sized at join (options.limits). Not thread-safe
// except abort(): one thread at a time calls the rest.
class NcclChannel final : public FrameChannel {
 public:
  // Joins communicator `id` as `rank` of `nranks` (1 or 2) on
  // options.device; blocks until every rank has joined, the timeout, or
  // `*cancel` (may be null). Errors: InvalidArgument (ranks), Unavailable
  // (CUDA or NCCL, with its message; "aborted" when cancelled),
  // DeadlineExceeded.
  static absl::StatusOr<std::unique_ptr<NcclChannel>> join(
      const NcclId& id, int nranks, int rank,
      const NcclChannelOptions& options = {},
      const std::atomic<bool>* cancel = nullptr);
  ~NcclChannel() override;
  NcclChannel(const NcclChannel&) = delete;
  NcclChannel& operator=(const NcclChannel&) = delete;

  // FrameChannel (two-rank communicators; FailedPrecondition on one rank):
  // send within options.timeout; recv's header as `deadline` says, the
  // rest within options.timeout.
  absl::Status send(const Frame& frame) override;
  absl::Status send_within(const Frame& frame, std::chrono::milliseconds limit) override;
  absl::StatusOr<Frame> recv(const DeadlineFn& deadline = nullptr) override;
  // One-rank communicator only: sends `frame` to this rank and receives it
  // back, each round's send and recv in one NCCL group (what one GPU can
  // test: NCCL refuses two ranks on one GPU).
  absl::StatusOr<Frame> exchange_with_self(const Frame& frame);

  // Makes a waiting or later call fail with Unavailable("aborted"); the
  // thread using the channel aborts the communicator (after telling every
  // channel of the process to abort: see above). Any thread.
  void abort() override { aborted_.store(true); }
  bool aborted() const override { return aborted_.load(); }
  int rank() const override { return rank_; }
  int nranks() const { return nranks_; }
  // The bound of each send and of a frame's rounds after its header
  // (options.timeout until changed).
  void set_timeout(std::chrono::milliseconds timeout) {
    options_.timeout = timeout;
  }

 private:
  struct Impl;  // CUDA and NCCL handles (nccl_channel.cc)
  // Unavailable when aborted; FailedPrecondition for a communicator of
  // other than `nranks` ranks.
  absl::Status usable(int nranks, const char* call) const;
  // After a header's round: the header received, checked (format, limits).
  absl::StatusOr<FrameHeader> received_header(const DeadlineFn& bound);
  // send() by `deadline`.
  absl::Status send_by(const Frame& frame, std::chrono::steady_clock::time_point deadline);
  NcclChannel(std::unique_ptr<Impl> impl, int nranks, int rank,
              const NcclChannelOptions& options);

  std::unique_ptr<Impl> impl_;
  int nranks_;
  int rank_;
  NcclChannelOptions options_;
  std::atomic<bool> aborted_{false};
};

// The FrameTransport of GPU `device` (frame_channel.h): ids from
// make_nccl_id, two-rank channels from NcclChannel::join (its timeout and
// limits the join's: buffers sized then; frames within `frame_timeout`).
std::shared_ptr<FrameTransport> make_nccl_transport(
    int device, std::chrono::milliseconds frame_timeout);

}  // namespace strata::worker
