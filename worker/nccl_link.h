// The NCCL ActivationLink (DESIGN.md: activations "NCCL between GPUs"):
// micro-batches from this stage to the next as NCCL point-to-point
// transfers between two GPUs, in one host or across hosts, and the results
// back the same way. gRPC (worker/grpc_link.h) stays the link where NCCL is
// not available. Built only with CUDA and NCCL (STRATA_HAVE_NCCL).
//
// Two communicators of two ranks per link, one per direction, each driven
// by one thread on its own CUDA stream (NCCL calls on one communicator must
// not come from two threads at once):
//   forward: this stage rank 0, the next stage rank 1: micro-batch frames;
//   results: the next stage rank 0, this stage rank 1: result frames.
// Each frame (worker/nccl_frame.h) is two rounds of transfers: the 64-byte
// header, then its meta and its f32 payload (sizes from the header).
//
// Setup (the design; the coordinator's half is not wired yet): each
// communicator's ncclUniqueId is made by ncclGetUniqueId (make_nccl_id) in
// the stage that is rank 0 of it, which must stay up until both have
// joined, and handed to the other stage by the coordinator over the control
// RPC (LoadShardRequest.nccl, proto/strata/v1/worker.proto); both then
// call NcclChannel::join. NCCL refuses two ranks on one GPU ("invalid
// usage"): a link needs two GPUs; one GPU can test a communicator of one
// rank sending to itself (NcclChannel::exchange_with_self).
//
// Failure: every wait polls the stream and ncclCommGetAsyncError (the
// communicators are non-blocking), so a peer that dies or hangs fails the
// link after `timeout` (a result overdue by answer_timeout: DEADLINE_EXCEEDED;
// an NCCL error: UNAVAILABLE naming the peer), as activation_link.h says,
// instead of blocking forever; the communicators are aborted then.
//
// Ownership: the link owns its two channels. Threads: as ActivationLink;
// two per link (writer, reader), the callback on the reader.
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
#include "worker/activation_link.h"
#include "worker/nccl_frame.h"

namespace strata::worker {

// An ncclUniqueId's bytes (kNcclIdBytes, nccl_frame.h), kept out of
// headers so that callers do not need nccl.h.
using NcclId = std::array<uint8_t, kNcclIdBytes>;

// ncclGetUniqueId: starts NCCL's bootstrap listener in this process, which
// must stay up until every rank has joined. Unavailable with NCCL's error.
absl::StatusOr<NcclId> make_nccl_id();

struct NcclChannelOptions {
  int device = 0;  // CUDA device ordinal
  // Bound of joining and of each round of a frame once its header came.
  std::chrono::milliseconds timeout{30000};
};

// One communicator, one direction of frames, on its own CUDA stream, with
// device staging buffers grown to the largest frame seen. Not thread-safe
// except abort(): one thread at a time calls the rest.
class NcclChannel {
 public:
  // Joins communicator `id` as `rank` of `nranks` (1 or 2) on
  // options.device; blocks until every rank has joined or the timeout.
  // Errors: InvalidArgument (ranks), Unavailable (CUDA or NCCL, with its
  // message), DeadlineExceeded.
  static absl::StatusOr<std::unique_ptr<NcclChannel>> join(
      const NcclId& id, int nranks, int rank,
      const NcclChannelOptions& options = {});
  ~NcclChannel();
  NcclChannel(const NcclChannel&) = delete;
  NcclChannel& operator=(const NcclChannel&) = delete;

  // Sends `frame` to the other rank (a two-rank communicator).
  absl::Status send(const Frame& frame);
  // The other rank's next frame: waits for its header without a bound
  // (an idle link is fine) unless `deadline` gives one (polled: it may
  // change while waiting); the rest of the frame within the timeout.
  // The header is checked (decode_frame_header) before any buffer is sized.
  using DeadlineFn =
      std::function<std::optional<std::chrono::steady_clock::time_point>()>;
  absl::StatusOr<Frame> recv(const DeadlineFn& deadline = nullptr);
  // One-rank communicator only: sends `frame` to this rank and receives it
  // back, each round's send and recv in one NCCL group (what one GPU can
  // test: NCCL refuses two ranks on one GPU).
  absl::StatusOr<Frame> exchange_with_self(const Frame& frame);

  // Makes a waiting or later call fail with Unavailable("aborted"); the
  // thread using the channel aborts the communicator. Any thread.
  void abort() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(); }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

 private:
  struct Impl;  // CUDA and NCCL handles (nccl_link.cc)
  NcclChannel(std::unique_ptr<Impl> impl, int nranks, int rank,
              const NcclChannelOptions& options);

  std::unique_ptr<Impl> impl_;
  int nranks_;
  int rank_;
  NcclChannelOptions options_;
  std::atomic<bool> aborted_{false};
};

struct NcclLinkOptions {
  std::string peer_name;  // in messages: "worker w1 (nccl)"
  uint32_t n_embd = 0;    // the width of a hidden row (frame cols)
  // The oldest unanswered micro-batch waits at most this for its result.
  std::chrono::milliseconds answer_timeout{30000};
};

// The link from this stage (rank 0 of `forward`, rank 1 of `results`) to
// the next. InvalidArgument when a channel is missing or not two ranks of
// the right rank, or n_embd is 0.
absl::StatusOr<std::unique_ptr<ActivationLink>> make_nccl_link(
    std::unique_ptr<NcclChannel> forward, std::unique_ptr<NcclChannel> results,
    ActivationLink::ResultCallback on_result, const NcclLinkOptions& options);

// The next stage's side of the link (its worker runs its Stage between
// them): the next micro-batch from `forward` (rank 1 of it), checked;
// Unavailable("link closed") on the close frame or an abort.
absl::StatusOr<v1::MicroBatch> receive_micro_batch(NcclChannel& forward);
// A result back over `results` (rank 0 of it).
absl::Status send_result(NcclChannel& results,
                         const v1::MicroBatchResult& result);

}  // namespace strata::worker
