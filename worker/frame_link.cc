#include "worker/frame_link.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/ordered_results.h"

namespace strata::worker {

namespace {

using Clock = std::chrono::steady_clock;

// How long close() lets the writer hand the close frame over.
constexpr std::chrono::seconds kCloseWait{1};

class FrameLink final : public ActivationLink {
 public:
  FrameLink(std::shared_ptr<FrameTransport> transport, const FrameLinkIds& ids,
            ResultCallback on_result, const FrameLinkOptions& options)
      : peer_(options.peer_name.empty()
                  ? absl::StrCat("worker (", transport->name(), ")")
                  : options.peer_name),
        options_(options),
        transport_(std::move(transport)),
        ids_(ids),
        on_result_(std::move(on_result)),
        writer_([this] { write_loop(); }),
        reader_([this] {
          read_loop();
          // A broken link answers what it owes at once (close() answers
          // with its own reason when it came first).
          bool broke;
          {
            std::lock_guard<std::mutex> lock(mu_);
            broke = failed_;
          }
          if (broke) fail_pending(absl::StatusCode::kUnavailable, "");
        }) {}

  ~FrameLink() override { close(kLinkClosed); }

  const std::string& peer() const override { return peer_; }

  absl::Status send(v1::MicroBatch batch) override {
    const uint64_t batch_id = batch.batch_id();
    absl::StatusOr<Frame> frame =
        frame_micro_batch(std::move(batch), options_.n_embd);
    if (!frame.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(peer_, ": ", frame.status().message()));
    }
    if (absl::Status st = batch_limits().check(frame->header); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(peer_, ": ", st.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) {
      return absl::UnavailableError(absl::StrCat(peer_, ": ", broken_reason_));
    }
    outbox_.push_back(std::move(*frame));
    pending_.push_back({batch_id, Clock::now()});
    cv_.notify_all();
    return absl::OkStatus();
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !broken_ && !closed_;
  }

  void close(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      // What is queued is not sent: close answers it (fail_pending).
      outbox_.clear();
      cancel_.store(true);  // a join still waiting for the far side ends
      cv_.notify_all();
    }
    // The writer sends the close frame (unless the link is broken); a far
    // side that no longer receives gets kCloseWait, then the channel is
    // aborted (a send would otherwise wait out the transport's timeout).
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, kCloseWait, [&] { return writer_done_; })) {
        FrameChannel* forward = forward_.get();
        lock.unlock();
        if (forward != nullptr) forward->abort();
      }
    }
    writer_.join();
    FrameChannel* results = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      results = results_.get();
      cv_.notify_all();
    }
    // Channels are aborted without mu_ held: a transport may ask the
    // reader's deadline (which takes mu_) under a lock of its own.
    if (results != nullptr) results->abort();
    reader_.join();
    fail_pending(absl::StatusCode::kUnavailable, reason);
  }

 private:
  struct Pending {
    uint64_t batch_id;
    Clock::time_point sent;
  };

  // Micro-batch frames: the shard's rows of n_embd.
  FrameLimits batch_limits() const { return FrameLimits{options_.max_rows, options_.n_embd}; }

  // Joins forward (rank 0), then results (rank 1), as the far side does.
  bool join() {
    absl::StatusOr<std::unique_ptr<FrameChannel>> forward =
        transport_->join(ids_.forward, 0, options_.join_timeout, &cancel_, batch_limits());
    if (!forward.ok()) {
      mark_broken(forward.status(), "joining the forward communicator: ");
      return false;
    }
    absl::StatusOr<std::unique_ptr<FrameChannel>> results = transport_->join(
        ids_.results, 1, options_.join_timeout, &cancel_, FrameLimits{});  // no payload
    {
      std::lock_guard<std::mutex> lock(mu_);
      forward_ = std::move(*forward);
      if (results.ok()) {
        results_ = std::move(*results);
        joined_ = true;
        cv_.notify_all();
        return true;
      }
    }
    mark_broken(results.status(), "joining the results communicator: ");
    return false;
  }

  void write_loop() {
    write_frames();
    std::lock_guard<std::mutex> lock(mu_);
    writer_done_ = true;
    cv_.notify_all();
  }

  void write_frames() {
    if (!join()) return;
    for (;;) {
      Frame frame;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closed_ || broken_ || !outbox_.empty(); });
        if (broken_) return;
        if (outbox_.empty()) break;  // closing, all sent
        frame = std::move(outbox_.front());
        outbox_.pop_front();
      }
      if (absl::Status s = forward_->send(frame); !s.ok()) {
        mark_broken(s, "");
        return;
      }
    }
    // Tells the far side to stop (best effort: it may be gone).
    (void)forward_->send(close_frame());
  }

  void read_loop() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return joined_ || broken_ || cancel_.load(); });
      if (!joined_) return;
    }
    const FrameChannel::DeadlineFn deadline =
        [this]() -> std::optional<Clock::time_point> {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return std::nullopt;
      return pending_.front().sent + options_.answer_timeout;
    };
    for (;;) {
      absl::StatusOr<Frame> frame = results_->recv(deadline);
      if (!frame.ok()) {
        mark_broken(frame.status(), "");
        return;
      }
      if (frame->header.kind == FrameKind::kClose) {
        const std::string why = close_reason(*frame);
        mark_broken(absl::UnavailableError(
                        why.empty() ? "the far side closed the link"
                                    : absl::StrCat("the far side ended the link: ", why)),
                    "");
        return;
      }
      if (frame->header.kind != FrameKind::kResult) {
        mark_broken(absl::UnavailableError("a micro-batch frame on the results communicator"),
                    "");
        return;
      }
      absl::StatusOr<v1::MicroBatchResult> result =
          unframe_result(frame->header, frame->meta);
      if (!result.ok()) {
        mark_broken(result.status(), "");
        return;
      }
      std::string out_of_order;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty() ||
            pending_.front().batch_id != result->batch_id()) {
          out_of_order = absl::StrCat(
              "result for batch ", result->batch_id(), ", expected ",
              pending_.empty() ? std::string("none")
                               : absl::StrCat(pending_.front().batch_id));
        } else {
          pending_.pop_front();
        }
      }
      if (!out_of_order.empty()) {
        mark_broken(absl::UnavailableError(out_of_order), "");
        return;
      }
      on_result_(*std::move(result));
    }
  }

  // The link failed: `why` is what its results say, unless close() came
  // first (its own abort then is no failure; close's reason stands). Both
  // channels are aborted, without mu_ held (see close()).
  void mark_broken(const absl::Status& why, const std::string& context) {
    FrameChannel* forward = nullptr;
    FrameChannel* results = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
      if (broken_ || closed_) return;
      broken_ = true;
      failed_ = true;
      broken_code_ = why.code() == absl::StatusCode::kDeadlineExceeded
                         ? absl::StatusCode::kDeadlineExceeded
                         : absl::StatusCode::kUnavailable;
      broken_reason_ = absl::StrCat(context, why.message());
      if (broken_reason_.empty()) broken_reason_ = "the link failed";
      cancel_.store(true);
      forward = forward_.get();
      results = results_.get();
    }
    // The channels live as long as the link (set once, never reset).
    if (forward != nullptr) forward->abort();
    if (results != nullptr) results->abort();
  }

  // Every micro-batch sent and not answered gets an error result, in order.
  void fail_pending(absl::StatusCode code, const std::string& reason) {
    std::deque<Pending> left;
    std::string why = reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(pending_);
      outbox_.clear();
      if (failed_) {
        why = broken_reason_;
        code = broken_code_;
      }
      broken_ = true;
    }
    for (const Pending& p : left) {
      on_result_(error_result(p.batch_id, static_cast<int>(code),
                              absl::StrCat(peer_, ": ", why)));
    }
  }

  const std::string peer_;
  const FrameLinkOptions options_;
  const std::shared_ptr<FrameTransport> transport_;
  const FrameLinkIds ids_;
  ResultCallback on_result_;
  std::atomic<bool> cancel_{false};  // ends a join waiting for the far side

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Set by the writer once joined (guarded by mu_); then read by the
  // writer (forward_) and the reader (results_) without it.
  std::unique_ptr<FrameChannel> forward_;
  std::unique_ptr<FrameChannel> results_;
  bool joined_ = false;
  bool writer_done_ = false;  // write_loop returned
  std::deque<Frame> outbox_;     // framed, not yet sent
  std::deque<Pending> pending_;  // sent (or queued), not answered
  bool closed_ = false;
  bool broken_ = false;
  bool failed_ = false;  // broken by a failure, not by close()
  absl::StatusCode broken_code_ = absl::StatusCode::kUnavailable;
  std::string broken_reason_;

  std::thread writer_;
  std::thread reader_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationLink>> make_frame_link(
    std::shared_ptr<FrameTransport> transport, const FrameLinkIds& ids,
    ActivationLink::ResultCallback on_result, const FrameLinkOptions& options) {
  if (transport == nullptr) {
    return absl::InvalidArgumentError("frame link: no transport");
  }
  if (options.n_embd == 0) {
    return absl::InvalidArgumentError("frame link: n_embd is 0");
  }
  return std::unique_ptr<ActivationLink>(new FrameLink(
      std::move(transport), ids, std::move(on_result), options));
}

absl::StatusOr<v1::MicroBatch> receive_micro_batch(FrameChannel& forward) {
  absl::StatusOr<Frame> frame = forward.recv();
  if (!frame.ok()) return frame.status();
  if (frame->header.kind == FrameKind::kClose) {
    return absl::UnavailableError(kLinkClosed);
  }
  return unframe_micro_batch(frame->header, frame->meta, frame->payload);
}

absl::Status send_result(FrameChannel& results,
                         const v1::MicroBatchResult& result) {
  absl::StatusOr<Frame> frame = frame_result(result);
  if (!frame.ok()) return frame.status();
  return results.send(*frame);
}

}  // namespace strata::worker
