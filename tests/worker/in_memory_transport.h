// InMemoryTransport: the FrameTransport (worker/frame_channel.h) the frame
// link and the worker service's NCCL wiring are tested with where there is
// no GPU: communicators between threads of one process, with NCCL's
// contract as the link sees it:
//   - ids are 128 opaque bytes from make_id(); join() blocks until both
//     ranks joined (or the timeout, or the cancel flag); an id unknown to
//     this transport, or a rank joined twice, is refused;
//   - a frame travels as NCCL carries it: its header as 64 encoded bytes
//     (decoded and checked on receipt, decode_frame_header), then meta and
//     payload of the sizes the header gives;
//   - a frame beyond the channel's FrameLimits is refused, sent or
//     received;
//   - a rank that aborts or is destroyed fails the other rank's waits with
//     Unavailable (as a dead peer's sockets fail NCCL), at once; or, after
//     set_silent_aborts(true), not at all (as an ncclCommAbort between two
//     GPUs of one host, which the peer never hears of).
// Test hooks: send_raw (bytes a hostile peer would send), and the joins
// seen so far.
//
// Threads: any thread may call the transport; a channel as FrameChannel.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "worker/frame_channel.h"

namespace strata::worker_test {

class InMemoryTransport final : public worker::FrameTransport {
 public:
  const std::string& name() const override { return name_; }
  absl::StatusOr<worker::LinkId> make_id() override;
  absl::StatusOr<std::unique_ptr<worker::FrameChannel>> join(
      const worker::LinkId& id, int rank, std::chrono::milliseconds timeout,
      const std::atomic<bool>* cancel, const worker::FrameLimits& limits) override;

  // Ranks that have joined communicator `id` (0, 1 or 2).
  int joined(const worker::LinkId& id);
  // Whether rank `rank` of communicator `id` aborted or was destroyed.
  bool left(const worker::LinkId& id, int rank);
  // Communicators made so far.
  int made();
  // Frames sent so far over every communicator.
  uint64_t frames() const { return frames_.load(); }
  // Every rank of every communicator leaves (a network failure): waits on
  // them fail with Unavailable.
  void break_all();
  // Communicators made from now on return a send only once the other rank
  // received it, as NCCL does (by default a send returns at once).
  void set_rendezvous(bool on) { rendezvous_.store(on); }
  // Communicators made from now on do not tell a rank that the other one
  // aborted or left: its waits go on (a send then waits forever under
  // rendezvous).
  void set_silent_aborts(bool on) { silent_aborts_.store(on); }

  // One message as it would cross the wire.
  struct Message {
    std::vector<uint8_t> header;  // 64 bytes when well formed
    std::string meta;
    std::vector<float> payload;
  };
  struct Comm;  // in_memory_transport.cc

 private:
  std::mutex mu_;
  std::map<worker::LinkId, std::shared_ptr<Comm>> comms_;
  std::shared_ptr<std::atomic<uint64_t>> counter_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::atomic<uint64_t>& frames_ = *counter_;
  std::atomic<bool> rendezvous_{false};
  std::atomic<bool> silent_aborts_{false};
  uint64_t next_ = 0;
  const std::string name_ = "nccl";  // as the worker service names its links
};

// Sends raw bytes as `channel`'s next frame (a hostile or broken peer).
// `channel` must come from an InMemoryTransport.
absl::Status send_raw(worker::FrameChannel& channel,
                      InMemoryTransport::Message message);

}  // namespace strata::worker_test
