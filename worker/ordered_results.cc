#include "worker/ordered_results.h"

#include <utility>

namespace strata::worker {

uint64_t OrderedResults::reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.emplace_back();
  return next_++;
}

void OrderedResults::complete(uint64_t ticket, v1::MicroBatchResult result) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ticket < head_ || ticket >= next_) return;  // not reserved: ignore
  slots_[ticket - head_] = std::move(result);
  // One thread delivers at a time, so results leave in ticket order; a
  // thread that completes a slot while another delivers leaves it to that
  // one, which re-checks the head after each sink call.
  if (delivering_) return;
  delivering_ = true;
  while (!slots_.empty() && slots_.front().has_value()) {
    v1::MicroBatchResult next = std::move(*slots_.front());
    slots_.pop_front();
    ++head_;
    lock.unlock();
    sink_(std::move(next));
    lock.lock();
  }
  delivering_ = false;
}

size_t OrderedResults::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A result being handed to the sink counts until the sink returns.
  return slots_.size() + (delivering_ ? 1 : 0);
}

v1::MicroBatchResult error_result(uint64_t batch_id, int code,
                                  std::string message) {
  v1::MicroBatchResult r;
  r.set_batch_id(batch_id);
  r.set_error_code(code);
  r.set_error_message(std::move(message));
  return r;
}

}  // namespace strata::worker
