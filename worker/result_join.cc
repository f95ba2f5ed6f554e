#include "worker/result_join.h"

#include <utility>

namespace strata::worker {

void ResultJoin::sent(uint64_t batch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[batch_id] = Entry{};
}

bool ResultJoin::from_chain(v1::MicroBatchResult answer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(answer.batch_id());
  if (it == entries_.end()) return false;
  if (it->second.delivered) {  // the last stage's result went first
    entries_.erase(it);
    return true;
  }
  if (answer.delivered() && answer.error_code() == 0) {
    it->second.acknowledged = true;  // its result is on the way
    return true;
  }
  entries_.erase(it);
  deliver_(std::move(answer));
  return true;
}

bool ResultJoin::from_last_stage(v1::MicroBatchResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(result.batch_id());
  if (it == entries_.end() || it->second.delivered) return false;
  if (it->second.acknowledged) {
    entries_.erase(it);
  } else {
    it->second.delivered = true;  // the chain's acknowledgement will follow
  }
  deliver_(std::move(result));
  return true;
}

void ResultJoin::fail_all(int code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [batch_id, entry] : entries_) {
    if (entry.delivered) continue;
    v1::MicroBatchResult r;
    r.set_batch_id(batch_id);
    r.set_error_code(code);
    r.set_error_message(message);
    deliver_(std::move(r));
  }
  entries_.clear();
}

size_t ResultJoin::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [batch_id, entry] : entries_) n += entry.delivered ? 0 : 1;
  return n;
}

}  // namespace strata::worker
