#include "worker/frame_upstream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/ordered_results.h"

namespace strata::worker {

namespace {
constexpr char kPeerClosed[] = "the previous stage closed the link";
// How long the close frame that says why the link ends may take, waiting
// for the results channel and then being sent: a previous stage that does
// not read (the owed bound) never takes it.
constexpr std::chrono::seconds kCloseWait{1};
}  // namespace

// The channels, shared with the results' sink (which may run after close:
// results of micro-batches that were still with the next stage).
struct FrameUpstream::Shared {
  std::atomic<bool> cancel{false};  // ends a join
  // One thread at a time sends on the results channel (the results' sink,
  // or the upstream thread's close frame); held while sending.
  std::timed_mutex send_mu;
  // The results channel takes no more frames: a send failed, or the close
  // frame went (set under send_mu).
  std::atomic<bool> send_failed{false};
  std::mutex mu;  // guards the pointers (the channels' own calls are not)
  std::unique_ptr<FrameChannel> forward;
  std::unique_ptr<FrameChannel> results;

  // Sends `r` on `out` (the results channel) unless it takes no more; a
  // failed send aborts both.
  void send(FrameChannel& out, const v1::MicroBatchResult& r) {
    std::lock_guard<std::timed_mutex> lock(send_mu);
    if (send_failed.load()) return;
    if (!send_result(out, r).ok()) {
      send_failed.store(true);
      abort_all();
    }
  }

  // Tells the previous stage why the link ends (its pending micro-batches
  // then fail at once: NCCL would not tell it that this rank aborted).
  // Best effort: given up after kCloseWait for the channel (a result send
  // stuck on a previous stage that does not read) and kCloseWait more for
  // the frame.
  void send_close(const std::string& why) {
    std::unique_lock<std::timed_mutex> lock(send_mu, kCloseWait);
    if (!lock.owns_lock() || send_failed.exchange(true)) return;
    FrameChannel* out = nullptr;
    {
      std::lock_guard<std::mutex> ptr_lock(mu);
      out = results.get();
    }
    if (out != nullptr) (void)out->send_within(close_frame(why), kCloseWait);
  }

  void abort_all() {
    cancel.store(true);
    std::lock_guard<std::mutex> lock(mu);
    if (forward != nullptr) forward->abort();
    if (results != nullptr) results->abort();
  }
};

FrameUpstream::FrameUpstream(std::shared_ptr<FrameTransport> transport,
                             const FrameLinkIds& ids, StageRelay& relay,
                             FrameUpstreamOptions options)
    : transport_(std::move(transport)),
      ids_(ids),
      relay_(relay),
      options_(std::move(options)),
      shared_(std::make_shared<Shared>()) {
  thread_ = std::thread([this] { run(); });
}

FrameUpstream::~FrameUpstream() { close(); }

void FrameUpstream::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  shared_->abort_all();
  if (thread_.joinable()) thread_.join();
}

std::string FrameUpstream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void FrameUpstream::end(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !ended_.empty()) return;  // close() came first: no failure
    ended_ = why;
  }
  if (why == kPeerClosed) {
    spdlog::info("{}: {}", options_.label, why);
  } else {
    spdlog::warn("{}: {}", options_.label, why);
    // Unless the results channel is down (or never joined), the previous
    // stage hears why.
    shared_->send_close(why);
  }
  shared_->abort_all();
}

void FrameUpstream::run() {
  absl::StatusOr<std::unique_ptr<FrameChannel>> forward =
      transport_->join(ids_.forward, 1, options_.join_timeout, &shared_->cancel,
                       FrameLimits{options_.max_rows, options_.n_embd});
  if (!forward.ok()) {
    end(absl::StrCat("joining the forward communicator: ",
                     forward.status().message()));
    return;
  }
  FrameChannel* in = forward->get();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->forward = std::move(*forward);
  }
  absl::StatusOr<std::unique_ptr<FrameChannel>> results = transport_->join(
      ids_.results, 0, options_.join_timeout, &shared_->cancel, FrameLimits{});  // no payload
  if (!results.ok()) {
    end(absl::StrCat("joining the results communicator: ",
                     results.status().message()));
    return;
  }
  FrameChannel* out = results->get();  // lives as long as shared_
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->results = std::move(*results);
    // close() may have aborted before the channels were stored.
    if (shared_->cancel.load()) {
      shared_->forward->abort();
      shared_->results->abort();
    }
  }
  // OrderedResults runs the sink one call at a time; Shared::send_mu keeps
  // it apart from the close frame.
  auto ordered = std::make_shared<OrderedResults>(
      [shared = shared_, out](v1::MicroBatchResult r) { shared->send(*out, r); });
  for (;;) {
    absl::StatusOr<v1::MicroBatch> batch = receive_micro_batch(*in);
    if (!batch.ok()) {
      if (batch.status().code() == absl::StatusCode::kUnavailable &&
          batch.status().message() == kLinkClosed) {
        end(kPeerClosed);
      } else {
        end(std::string(batch.status().message()));
      }
      return;
    }
    if (shared_->send_failed.load()) {
      end("sending a result failed");
      return;
    }
    if (const size_t owed = ordered->outstanding(); owed >= options_.max_owed) {
      end(absl::StrCat(owed, " results owed to the previous stage reach the bound of ",
                       options_.max_owed));
      return;
    }
    received_.fetch_add(1);
    relay_.process(ordered, *batch);
  }
}

}  // namespace strata::worker
