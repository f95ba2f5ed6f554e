#include "worker/in_process_link.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::worker {

namespace {

class InProcessLink final : public ActivationLink {
 public:
  InProcessLink(Stage& stage, LinkFactory next, ResultCallback on_result,
                const InProcessLinkOptions& options)
      : peer_(absl::StrCat(options.name, " (in-process)")),
        name_(options.name),
        results_(std::make_shared<OrderedResults>(std::move(on_result))),
        relay_(stage, options.name, std::move(next)),
        thread_([this] { run(); }) {}

  ~InProcessLink() override { close(kLinkClosed); }

  const std::string& peer() const override { return peer_; }

  absl::Status send(v1::MicroBatch batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) {
      return absl::UnavailableError(absl::StrCat(peer_, ": link closed"));
    }
    queue_.push_back(std::move(batch));
    cv_.notify_one();
    return absl::OkStatus();
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !closing_;
  }

  void close(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closing_ = true;
      closed_ = true;
      cv_.notify_one();
    }
    thread_.join();
    // Micro-batches already passed on are answered by the next stage's link
    // as it closes; those still queued here after them.
    relay_.close(reason);
    std::deque<v1::MicroBatch> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(queue_);
    }
    for (const v1::MicroBatch& b : left) {
      const uint64_t ticket = results_->reserve();
      results_->complete(
          ticket, error_result(b.batch_id(),
                               static_cast<int>(absl::StatusCode::kUnavailable),
                               absl::StrCat(peer_, ": ", reason)));
    }
  }

 private:
  void run() {
    for (;;) {
      v1::MicroBatch batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (closing_) return;
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      relay_.process(results_, batch);
    }
  }

  const std::string peer_;
  const std::string name_;
  std::shared_ptr<OrderedResults> results_;
  StageRelay relay_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::MicroBatch> queue_;  // sent, not yet run
  bool closing_ = false;
  bool closed_ = false;
  std::thread thread_;  // last member: starts after the others exist
};

}  // namespace

std::unique_ptr<ActivationLink> make_in_process_link(
    Stage& stage, LinkFactory next, ActivationLink::ResultCallback on_result,
    const InProcessLinkOptions& options) {
  return std::make_unique<InProcessLink>(stage, std::move(next),
                                         std::move(on_result), options);
}

namespace {

LinkFactory chain_from(std::vector<Stage*> stages, size_t i) {
  if (i >= stages.size()) return LinkFactory();
  return [stages, i](ActivationLink::ResultCallback on_result)
             -> absl::StatusOr<std::unique_ptr<ActivationLink>> {
    InProcessLinkOptions options;
    options.name = absl::StrCat("stage ", i);
    return make_in_process_link(*stages[i], chain_from(stages, i + 1),
                                std::move(on_result), options);
  };
}

}  // namespace

std::unique_ptr<ActivationLink> make_in_process_chain(
    std::span<Stage* const> stages, ActivationLink::ResultCallback on_result) {
  std::vector<Stage*> all(stages.begin(), stages.end());
  InProcessLinkOptions options;
  options.name = "stage 0";
  return make_in_process_link(*all.at(0), chain_from(all, 1),
                              std::move(on_result), options);
}

}  // namespace strata::worker
