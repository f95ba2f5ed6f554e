#include "worker/grpc_link.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "strata/v1/worker.grpc.pb.h"
#include "worker/result_join.h"

namespace strata::worker {

namespace {

using Clock = std::chrono::steady_clock;

const char* code_name(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "?";
}

std::string ms_text(std::chrono::milliseconds ms) {
  return absl::StrCat(static_cast<double>(ms.count()) / 1000.0, " s");
}

class GrpcLink final : public ActivationLink {
 public:
  GrpcLink(std::shared_ptr<grpc::Channel> channel,
           std::shared_ptr<grpc::Channel> results_channel,
           const std::string& address, ResultCallback on_result,
           const GrpcLinkOptions& options)
      : peer_(options.peer_name.empty() ? absl::StrCat("worker ", address)
                                        : options.peer_name),
        options_(options),
        on_result_(std::move(on_result)) {
    stub_ = v1::Worker::NewStub(channel);
    if (results_channel != nullptr) {
      results_peer_ = options.results_peer_name.empty()
                          ? absl::StrCat("worker ", options.results_from)
                          : options.results_peer_name;
      join_ = std::make_unique<ResultJoin>(on_result_);
      results_stub_ = v1::Worker::NewStub(results_channel);
      results_reader_ = std::thread([this] { results_loop(); });
    }
    writer_ = std::thread([this] { write_loop(); });
    reader_ = std::thread([this] { read_loop(); });
    watchdog_ = std::thread([this] { watch_loop(); });
  }

  ~GrpcLink() override { close(kLinkClosed); }

  const std::string& peer() const override { return peer_; }

  // Writes on the caller's thread when the stream is made and nothing is
  // queued before it (no hand-over to the writer: a wake-up of another
  // thread per micro-batch, tens of microseconds on these VMs); else queues
  // for the writer, which keeps the order.
  absl::Status send(v1::MicroBatch batch) override {
    std::unique_lock<std::mutex> write_lock(write_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) {
      return absl::UnavailableError(
          absl::StrCat(peer_, ": link broken (", reason_, ")"));
    }
    pending_.push_back(Pending{batch.batch_id(), Clock::now()});
    if (join_) join_->sent(batch.batch_id());
    cv_.notify_all();  // the watchdog has a micro-batch to watch
    if (stream_ == nullptr || !outbox_.empty() || writer_done_) {
      outbox_.push_back(std::move(batch));
      return absl::OkStatus();
    }
    lock.unlock();
    if (!stream_->Write(batch)) {
      // The stream is ending: the reader learns why from Finish() and
      // answers every pending micro-batch, this one included.
      lock.lock();
      breaking(absl::StatusCode::kUnavailable, "stream ended");
    }
    return absl::OkStatus();
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !broken_;
  }

  void close(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      breaking(absl::StatusCode::kUnavailable, reason);
    }
    writer_.join();
    reader_.join();
    watchdog_.join();
    if (results_reader_.joinable()) results_reader_.join();
  }

 private:
  struct Pending {
    uint64_t batch_id;
    Clock::time_point sent;
  };

  // Marks the link broken for `reason` (the first reason wins) and cancels
  // the stream so that the reader ends. Requires mu_.
  void breaking(absl::StatusCode code, std::string reason) {
    if (!broken_) {
      broken_ = true;
      code_ = code;
      reason_ = std::move(reason);
    }
    context_.TryCancel();
    if (join_) results_context_.TryCancel();
    cv_.notify_all();
  }

  // One answer of the chain to the callback (through the join when the
  // last stage answers directly).
  void deliver(v1::MicroBatchResult result) {
    if (join_) {
      (void)join_->from_chain(std::move(result));
    } else {
      on_result_(std::move(result));
    }
  }

  // Reads the last stage's Results stream: the first message says it is
  // registered; each later one is a micro-batch's result.
  void results_loop() {
    v1::ResultsRequest request;
    request.set_shard_id(options_.shard_id);
    auto reader = results_stub_->Results(&results_context_, request);
    v1::MicroBatchResult result;
    if (!reader->Read(&result)) {  // refused: the chain brings the results
      (void)reader->Finish();
      return;
    }
    while (reader->Read(&result)) {
      if (!join_->from_last_stage(std::move(result))) {
        std::lock_guard<std::mutex> lock(mu_);
        breaking(absl::StatusCode::kInternal,
                 absl::StrCat(results_peer_, " sent a result for micro-batch ",
                              result.batch_id(), ", which is not awaited"));
        break;
      }
      result.Clear();
    }
    const grpc::Status status = reader->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) {
      breaking(absl::StatusCode::kUnavailable,
               absl::StrCat(results_peer_, ": results stream ended (gRPC status ",
                            code_name(status.error_code()),
                            status.error_message().empty() ? "" : ": ",
                            status.error_message(), ")"));
    }
  }

  // Makes the stream (this may wait for the connection), then writes the
  // micro-batches in order until the link breaks.
  // What send() queued (before the stream was made, or behind a queued
  // one) is written here, under write_mu_ like send()'s own writes.
  void write_loop() {
    auto stream = stub_->Activations(&context_);
    std::unique_lock<std::mutex> lock(mu_);
    stream_ = std::move(stream);
    cv_.notify_all();
    for (;;) {
      cv_.wait(lock, [&] { return broken_ || !outbox_.empty(); });
      if (broken_) break;
      lock.unlock();
      std::unique_lock<std::mutex> write_lock(write_mu_);
      lock.lock();
      bool ok = true;
      while (ok && !broken_ && !outbox_.empty()) {
        v1::MicroBatch batch = std::move(outbox_.front());
        outbox_.pop_front();
        lock.unlock();
        ok = stream_->Write(batch);
        lock.lock();
      }
      if (!ok || broken_) break;  // the reader learns why from Finish()
    }
    writer_done_ = true;
    cv_.notify_all();
  }

  // Reads results in order and hands them to the callback; when the stream
  // ends, answers every pending micro-batch with the reason.
  void read_loop() {
    grpc::ClientReaderWriter<v1::MicroBatch, v1::MicroBatchResult>* stream;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stream_ != nullptr; });
      stream = stream_.get();
    }
    v1::MicroBatchResult result;
    while (stream->Read(&result)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty() ||
            pending_.front().batch_id != result.batch_id()) {
          breaking(absl::StatusCode::kInternal,
                   absl::StrCat("answer for micro-batch ", result.batch_id(),
                                pending_.empty()
                                    ? " that was not sent"
                                    : absl::StrCat(", expected ",
                                                   pending_.front().batch_id)));
          break;
        }
        pending_.pop_front();
        last_answer_ = Clock::now();
        cv_.notify_all();
      }
      deliver(std::move(result));
      result.Clear();
    }
    std::deque<Pending> failed;
    absl::StatusCode code;
    std::string reason;
    bool ended_by_peer = false;  // not broken here first
    {
      std::unique_lock<std::mutex> lock(mu_);
      ended_by_peer = !broken_;
      breaking(absl::StatusCode::kUnavailable, "stream ended");
      cv_.wait(lock, [&] { return writer_done_; });
    }
    // No send() is writing (one that started before the break has ended).
    std::unique_lock<std::mutex> no_writes(write_mu_);
    const grpc::Status status = stream->Finish();
    no_writes.unlock();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_by_peer) {
        const bool redundant =
            status.error_message().empty() ||
            status.error_message() == code_name(status.error_code());
        reason_ =
            absl::StrCat("connection lost (gRPC status ",
                         code_name(status.error_code()), redundant ? "" : ": ",
                         redundant ? "" : status.error_message(), ")");
      }
      code = code_;
      reason = reason_;
      failed.swap(pending_);
      outbox_.clear();
    }
    for (const Pending& p : failed) {
      v1::MicroBatchResult r;
      r.set_batch_id(p.batch_id);
      r.set_error_code(static_cast<int>(code));
      r.set_error_message(absl::StrCat(peer_, ": ", reason));
      deliver(std::move(r));
    }
    // Acknowledged micro-batches whose results the last stage never sent.
    if (join_) join_->fail_all(static_cast<int>(code), absl::StrCat(peer_, ": ", reason));
  }

  // Breaks the link when the oldest pending micro-batch has waited
  // answer_timeout since it was sent or since the last answer, whichever
  // is later.
  void watch_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!broken_) {
      if (pending_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const Pending front = pending_.front();
      const Clock::time_point due =
          std::max(front.sent, last_answer_) + options_.answer_timeout;
      if (Clock::now() >= due) {
        breaking(absl::StatusCode::kDeadlineExceeded,
                 absl::StrCat("no answer to micro-batch ", front.batch_id,
                              " within ", ms_text(options_.answer_timeout)));
        break;
      }
      cv_.wait_until(lock, due);
    }
  }

  const std::string peer_;
  const GrpcLinkOptions options_;
  const ResultCallback on_result_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  // The last stage's Results stream (options_.results_from), when asked.
  std::string results_peer_;
  std::unique_ptr<ResultJoin> join_;
  std::unique_ptr<v1::Worker::Stub> results_stub_;
  grpc::ClientContext results_context_;

  std::mutex write_mu_;  // one Write at a time, in order (taken before mu_)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::MicroBatch, v1::MicroBatchResult>>
      stream_;                         // set by the writer once made
  std::deque<v1::MicroBatch> outbox_;  // sent, not yet written
  std::deque<Pending> pending_;        // sent, not yet answered
  Clock::time_point last_answer_{};
  bool broken_ = false;
  bool closed_ = false;
  bool writer_done_ = false;
  absl::StatusCode code_ = absl::StatusCode::kOk;
  std::string reason_;

  std::thread writer_;
  std::thread reader_;
  std::thread watchdog_;
  std::thread results_reader_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationLink>> make_grpc_link(
    const std::string& address, ActivationLink::ResultCallback on_result,
    const GrpcLinkOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("address: empty");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // A fresh subchannel: a link remade after the peer restarted must not
  // inherit the reconnect backoff of the dead one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const int keepalive_ms = static_cast<int>(options.keepalive_time.count());
  const int keepalive_timeout_ms =
      static_cast<int>(options.keepalive_timeout.count());
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      grpc_tls::make_channel(options.tls, address, options.tls_name, args,
                             keepalive_ms, keepalive_timeout_ms);
  if (!channel.ok()) return channel.status();
  std::shared_ptr<grpc::Channel> results_channel;
  if (!options.results_from.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> results =
        grpc_tls::make_channel(options.tls, options.results_from,
                               options.results_tls_name, args, keepalive_ms,
                               keepalive_timeout_ms);
    if (!results.ok()) return results.status();
    results_channel = *std::move(results);
  }
  return std::unique_ptr<ActivationLink>(
      new GrpcLink(*std::move(channel), std::move(results_channel), address,
                   std::move(on_result), options));
}

}  // namespace strata::worker
