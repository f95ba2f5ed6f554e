#include "worker/stage_relay.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::worker {

StageRelay::StageRelay(Stage& stage, std::string label, LinkFactory make_next)
    : stage_(stage), name_(std::move(label)), make_next_(std::move(make_next)) {
  live_ = stage_.live_sequences();
}

StageRelay::~StageRelay() { close(); }

bool StageRelay::ensure_link(std::string* error) {
  if (link_ != nullptr && link_->healthy()) return true;
  if (link_ != nullptr) {
    // Its pending micro-batches are answered (UNAVAILABLE) before the new
    // link can answer anything, so results stay in order.
    link_->close(kLinkClosed);
    link_.reset();
  }
  absl::StatusOr<std::unique_ptr<ActivationLink>> link = make_next_(
      [this](v1::MicroBatchResult r) { on_next_result(std::move(r)); });
  if (!link.ok()) {
    *error = std::string(link.status().message());
    return false;
  }
  link_ = std::move(*link);
  return true;
}

void StageRelay::process(const std::shared_ptr<OrderedResults>& upstream,
                         const v1::MicroBatch& batch) {
  std::unique_lock<std::mutex> lock(run_mu_);
  const uint64_t ticket = upstream->reserve();
  if (closed_) {
    lock.unlock();
    upstream->complete(
        ticket, error_result(batch.batch_id(),
                             static_cast<int>(absl::StatusCode::kUnavailable),
                             absl::StrCat(name_, ": the shard was unloaded")));
    return;
  }
  v1::MicroBatch next;
  v1::MicroBatchResult result;
  const auto started = std::chrono::steady_clock::now();
  absl::Status st = stage_.run(batch, &next, &result);
  steps_.add(std::chrono::steady_clock::now() - started);
  live_ = stage_.live_sequences();
  if (!st.ok()) {
    lock.unlock();
    upstream->complete(
        ticket, error_result(batch.batch_id(), static_cast<int>(st.code()),
                             absl::StrCat(name_, ": ", st.message())));
    return;
  }
  if (!make_next_) {  // the last stage: the result is complete
    // Straight to the coordinator when it holds a Results stream (under
    // run_mu_, so in the order the micro-batches ran); upstream gets the
    // acknowledgement.
    if (!batch.trace() && deliver_direct(result)) {
      lock.unlock();
      v1::MicroBatchResult ack;
      ack.set_batch_id(batch.batch_id());
      ack.set_delivered(true);
      upstream->complete(ticket, std::move(ack));
      return;
    }
    lock.unlock();
    upstream->complete(ticket, std::move(result));
    return;
  }
  std::string error;
  if (ensure_link(&error)) {
    {
      std::lock_guard<std::mutex> w(waiting_mu_);
      Waiting& entry = waiting_.emplace_back();
      entry.upstream = upstream;
      entry.ticket = ticket;
      entry.batch_id = batch.batch_id();
      entry.traces.Swap(result.mutable_traces());
    }
    absl::Status sent = link_->send(std::move(next));
    if (sent.ok()) return;
    // A link that refuses answers nothing: take the entry back (it is the
    // newest, since sends are serialised by run_mu_).
    {
      std::lock_guard<std::mutex> w(waiting_mu_);
      waiting_.pop_back();
    }
    error = std::string(sent.message());
  }
  lock.unlock();
  upstream->complete(
      ticket, error_result(batch.batch_id(),
                           static_cast<int>(absl::StatusCode::kUnavailable),
                           absl::StrCat(name_, ": next stage: ", error)));
}

void StageRelay::on_next_result(v1::MicroBatchResult result) {
  Waiting entry;
  {
    std::lock_guard<std::mutex> w(waiting_mu_);
    if (waiting_.empty()) return;  // nothing sent: a confused next stage
    entry = std::move(waiting_.front());
    waiting_.pop_front();
  }
  if (result.batch_id() != entry.batch_id && result.error_code() == 0) {
    result = error_result(
        entry.batch_id, static_cast<int>(absl::StatusCode::kInternal),
        absl::StrCat(name_, ": the next stage answered batch ",
                     result.batch_id(), " for batch ", entry.batch_id));
  }
  result.set_batch_id(entry.batch_id);
  // This stage's traces first, then those of the stages after it.
  if (entry.traces.size() > 0) {
    entry.traces.MergeFrom(result.traces());
    result.mutable_traces()->Swap(&entry.traces);
  }
  entry.upstream->complete(entry.ticket, std::move(result));
}

bool StageRelay::deliver_direct(const v1::MicroBatchResult& result) {
  std::lock_guard<std::mutex> lock(direct_mu_);
  return direct_ && direct_(result);
}

uint64_t StageRelay::set_direct_sink(DirectSink sink) {
  if (make_next_) return 0;
  std::lock_guard<std::mutex> lock(direct_mu_);
  direct_ = std::move(sink);
  return ++direct_token_;
}

void StageRelay::clear_direct_sink(uint64_t token) {
  std::lock_guard<std::mutex> lock(direct_mu_);
  if (token != 0 && token == direct_token_) direct_ = nullptr;
}

bool StageRelay::has_direct_sink(uint64_t token) {
  std::lock_guard<std::mutex> lock(direct_mu_);
  return token != 0 && token == direct_token_ && direct_ != nullptr;
}

void StageRelay::connect() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (!make_next_ || closed_) return;
  std::string error;
  (void)ensure_link(&error);  // a failure shows at the first micro-batch
}

absl::Status StageRelay::relink(LinkFactory make_next) {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (!make_next_) return absl::FailedPreconditionError("the last stage has no next stage");
  if (closed_) return absl::FailedPreconditionError("the shard was unloaded");
  // As in ensure_link: the old link's pending micro-batches are answered
  // before the new link can answer anything, so results stay in order.
  if (link_ != nullptr) {
    link_->close(kLinkClosed);
    link_.reset();
  }
  make_next_ = std::move(make_next);
  std::string error;
  (void)ensure_link(&error);  // a failure shows at the first micro-batch
  return absl::OkStatus();
}

int StageRelay::free_sequences(const uint64_t* seq_ids, int n) {
  std::lock_guard<std::mutex> lock(run_mu_);
  const int freed = stage_.free_sequences(seq_ids, n);
  live_ = stage_.live_sequences();
  return freed;
}

void StageRelay::close(const std::string& reason) {
  std::unique_ptr<ActivationLink> link;
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    closed_ = true;
    link = std::move(link_);
  }
  if (link != nullptr) link->close(reason);
}

}  // namespace strata::worker
