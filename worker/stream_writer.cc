#include "worker/stream_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::worker {

StreamWriter::StreamWriter(WriteFn write, CancelFn cancel, std::string label)
    : write_(std::move(write)),
      cancel_(std::move(cancel)),
      label_(std::move(label)) {}

bool StreamWriter::write(const v1::MicroBatchResult& result) {
  std::lock_guard<std::mutex> one_write(write_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || failed_) return false;
    writing_ = true;
    write_began_ = Clock::now();
  }
  const bool ok = write_(result);
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (!ok) failed_ = true;
  cv_.notify_all();
  return ok && cut_.empty();
}

void StreamWriter::cut(std::string why) {
  if (!cut_.empty()) return;
  cut_ = std::move(why);
  failed_ = true;
  cancel_();
  cv_.notify_all();
}

bool StreamWriter::cancel_if_stalled(Clock::time_point now,
                                     std::chrono::milliseconds stall) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cut_.empty()) return false;
  if (!writing_ || now - write_began_ < stall) return false;
  cut(absl::StrCat(label_, ": the peer read no result for ", stall.count(),
                   " ms (a write waited that long); stream cut"));
  return true;
}

void StreamWriter::overflow(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  cut(absl::StrCat(label_, ": ", what, "; stream cut"));
}

bool StreamWriter::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

absl::Status StreamWriter::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cut_.empty() ? absl::OkStatus() : absl::ResourceExhaustedError(cut_);
}

void StreamWriter::wait_a_while(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait);
}

void StreamWriter::close() {
  std::lock_guard<std::mutex> one_write(write_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

}  // namespace strata::worker
