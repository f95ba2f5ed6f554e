// The frame link: an ActivationLink (worker/activation_link.h) whose
// micro-batches and results travel as frames (worker/nccl_frame.h) over two
// communicators of a FrameTransport (worker/frame_channel.h): NCCL between
// GPUs (DESIGN.md: activations "NCCL between GPUs"), or the in-memory fake
// in tests. gRPC (worker/grpc_link.h) stays the link where NCCL is not
// available.
//
// Two communicators of two ranks per link, one per direction, each driven
// by one thread:
//   forward: this stage rank 0, the next stage rank 1: micro-batch frames;
//   results: the next stage rank 0, this stage rank 1: result frames.
//
// Setup: once every stage of the pipeline loaded, each communicator's id is
// made (FrameTransport::make_id; for NCCL the worker's MakeNcclId RPC) by
// the stage that is its rank 0 and handed to both stages by the coordinator
// in LinkNcclRequest (proto/strata/v1/worker.proto). Both stages join in
// the background: this side in the link's writer thread (micro-batches sent
// meanwhile wait in its queue, their answer timeout running), the far side
// in its FrameUpstream (worker/frame_upstream.h), in the same order:
// forward, then results.
//
// Close: what is queued is answered with close's reason, not sent; the close
// frame gets a second (kCloseWait) before the channel is aborted.
//
// Failure, as activation_link.h asks of every link: a join that fails or
// times out, a peer that dies or hangs (a result overdue by
// answer_timeout: DEADLINE_EXCEEDED; a transport error: UNAVAILABLE), a
// result out of order, or the far side's close frame (with its reason when
// it ended the link on a failure: nccl_frame.h) breaks the link; every micro-batch not answered gets
// that error naming the peer, and both communicators are aborted. A link's
// ids serve one join: a broken link is remade only with new ids (the
// coordinator reloads the pipeline: coordinator/cluster.h).
//
// Ownership: the link shares the transport. Threads: as ActivationLink;
// two per link (writer, reader), the callback on the reader.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/activation_link.h"
#include "worker/frame_channel.h"

namespace strata::worker {

// The ids of a link's two communicators.
struct FrameLinkIds {
  LinkId forward{};  // micro-batches; rank 0 is the sending stage
  LinkId results{};  // results; rank 0 is the receiving stage
};

struct FrameLinkOptions {
  std::string peer_name;  // in messages: "worker w1 (nccl)"
  uint32_t n_embd = 0;    // the width of a hidden row (frame cols)
  uint32_t max_rows = kMaxFrameRows;  // of a micro-batch (the shard's max_batch_rows)
  // The oldest unanswered micro-batch waits at most this for its result.
  std::chrono::milliseconds answer_timeout{30000};
  // Joining each communicator (the far side has joined, or joins, in the
  // background once its shard is loaded).
  std::chrono::milliseconds join_timeout{30000};
};

// The link from this stage to the next. InvalidArgument when the transport
// is missing or n_embd is 0; joining happens in the background.
absl::StatusOr<std::unique_ptr<ActivationLink>> make_frame_link(
    std::shared_ptr<FrameTransport> transport, const FrameLinkIds& ids,
    ActivationLink::ResultCallback on_result, const FrameLinkOptions& options);

// The next stage's side (frame_upstream.h runs its Stage between them):
// the next micro-batch from `forward` (rank 1 of it), checked
// (unframe_micro_batch); Unavailable(kLinkClosed) on the close frame.
absl::StatusOr<v1::MicroBatch> receive_micro_batch(FrameChannel& forward);
// A result back over `results` (rank 0 of it).
absl::Status send_result(FrameChannel& results,
                         const v1::MicroBatchResult& result);

}  // namespace strata::worker
