#include "coordinator/scheduler.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/metrics.h"
#include "coordinator/structured_output.h"
#include "worker/sampler.h"

namespace strata::coordinator {

Scheduler::Scheduler(const SchedulerOptions& options,
                     DetokenizerFactory detokenizers, FreeFn free_sequences)
    : free_sequences_(std::move(free_sequences)),
      core_(options, std::move(detokenizers)) {
  std::random_device random;
  seq_id_key_ = (uint64_t{random()} << 32) ^ random();
  stats_.unavailable = unavailable_;
  StepScheduler::Hooks hooks;
  hooks.trace = [this](const v1::BlockTrace& t) {
    if (trace_) trace_(t);
  };
  hooks.served = [this](uint64_t served) {
    // Published before the client hears of the end.
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.served = served;
    }
    stats_cv_.notify_all();
  };
  hooks.broken = [this](const absl::Status& status) { publish_broken(status); };
  core_.set_hooks(std::move(hooks));
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Scheduler::set_trace_sink(TraceFn sink) { trace_ = std::move(sink); }
void Scheduler::set_on_broken(BrokenFn on_broken) {
  on_broken_ = std::move(on_broken);
}

worker::ActivationLink::ResultCallback Scheduler::result_callback(
    uint64_t epoch) {
  return [this, epoch](v1::MicroBatchResult result) {
    if (epoch != 0) result.set_shard_id(epoch);
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(std::move(result));
    }
    cv_.notify_all();
  };
}

void Scheduler::set_prefix_cache_blocks(int blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  new_prefix_blocks_ = blocks;
}

void Scheduler::set_prefill_chunk_beside_decode(int rows) {
  std::lock_guard<std::mutex> lock(mu_);
  new_beside_decode_rows_ = rows;
}

void Scheduler::attach(std::unique_ptr<worker::ActivationLink> link,
                       uint64_t shard_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    new_link_ = std::move(link);
    new_shard_id_ = shard_id;
    have_new_link_ = true;
    stats_.attached = true;  // submissions from now on wait for the link
    stats_.recovering = false;
    recovering_.reset();
    stats_.unavailable.clear();
  }
  cv_.notify_all();
  stats_cv_.notify_all();
}

absl::StatusOr<std::shared_ptr<SequenceHandle>> Scheduler::submit(
    SequenceRequest request) {
  const SchedulerOptions& options = core_.options();
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt: empty");
  }
  if (static_cast<int64_t>(request.prompt.size()) > options.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt: ", request.prompt.size(), " tokens exceed the context of ",
        options.n_ctx));
  }
  if (request.embed != Pooling::kNone &&
      (request.prompt_logprobs >= 0 || !request.grammar.empty())) {
    return absl::InvalidArgumentError(
        "embedding: not with prompt_logprobs or a grammar (nothing is generated)");
  }
  if (request.params.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: ", request.params.max_tokens, " is less than 1"));
  }
  if (absl::Status st = worker::validate(request.params.sampling); !st.ok()) {
    return st;
  }
  if (absl::Status st = check_grammar(request.grammar); !st.ok()) return st;
  Submitted s;
  s.at = StepScheduler::Clock::now();
  s.request = std::move(request);
  s.handle = std::make_shared<SequenceHandle>();
  std::shared_ptr<SequenceHandle> handle = s.handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.attached && !stats_.recovering) {
      return absl::UnavailableError(stats_.unavailable);
    }
    if (stats_.queued + static_cast<int>(submitted_.size()) >=
        options.max_queued) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many requests: ", options.max_sequences, " running and ",
          options.max_queued, " waiting"));
    }
    do {
      uint64_t z = (next_seq_id_++) ^ seq_id_key_;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      handle->seq_id_ = z ^ (z >> 31);
    } while (handle->seq_id_ == 0);
    submitted_.push_back(std::move(s));
  }
  cv_.notify_all();
  return handle;
}

void Scheduler::cancel(uint64_t seq_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.push_back(seq_id);
  }
  cv_.notify_all();
}

void Scheduler::fail_all(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_request_ = status;
    stats_.attached = false;
    stats_.recovering = false;
    stats_.unavailable = std::string(status.message());
  }
  cv_.notify_all();
  stats_cv_.notify_all();
}

void Scheduler::suspend(const absl::Status& status) {
  if (core_.options().max_migrations <= 0) {
    fail_all(status);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    suspend_request_ = status;
    if (!have_new_link_) start_recovery(status);
  }
  cv_.notify_all();
  stats_cv_.notify_all();
}

void Scheduler::start_recovery(const absl::Status& status) {
  stats_.attached = false;
  stats_.unavailable = std::string(status.message());
  if (!stats_.recovering) {
    stats_.recovering = true;
    recovering_ = status;
    recovery_deadline_ =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(core_.options().migration_timeout_ms);
  }
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Scheduler::Stats Scheduler::wait_stats(
    const std::function<bool(const Stats&)>& until,
    absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  stats_cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                     [&] { return until(stats_); });
  return stats_;
}

void Scheduler::fail_submitted(Submitted& s, const absl::Status& status) {
  SequenceEvent e;
  e.kind = SequenceEvent::Kind::kError;
  e.error = status;
  s.handle->push(std::move(e));
}

void Scheduler::publish_broken(const absl::Status& status) {
  // Published before the requests fail: whoever sees a request fail sees
  // the state too.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!have_new_link_) {
      if (core_.options().max_migrations > 0) {
        start_recovery(status);
      } else {
        stats_.attached = false;
        stats_.unavailable = std::string(status.message());
      }
    }
  }
  stats_cv_.notify_all();
}

void Scheduler::publish_counts(bool answered) {
  // The gauges first: whoever waits for these stats (wait_stats) sees them.
  if (ServingMetrics* m = core_.options().metrics;
      m != nullptr && core_.options().n_ctx > 0) {
    const SchedulerOptions& o = core_.options();
    m->requests_running.set(core_.active());
    m->requests_waiting.set(core_.waiting());
    m->kv_cache_usage.set(static_cast<double>(core_.kv_positions()) /
                          (static_cast<double>(o.max_sequences) * o.n_ctx));
    const PrefixIndex& prefix = core_.prefix_index();
    m->prefix_cache_usage.set(
        prefix.capacity() > 0
            ? static_cast<double>(prefix.used()) / prefix.capacity()
            : 0.0);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active = core_.active();
    stats_.queued = core_.waiting();
    stats_.served = core_.served();
    stats_.migrated = core_.migrated();
    stats_.in_flight = core_.in_flight();
    if (answered || stats_.in_flight == 0) {
      stats_.progress = std::chrono::steady_clock::now();
    }
  }
  stats_cv_.notify_all();
}

void Scheduler::drop_link(const absl::Status& status) {
  if (link_) {
    link_->close(worker::kLinkClosed);
    link_.reset();
  }
  unavailable_ = std::string(status.message());
  if (on_broken_) on_broken_(status);
}

void Scheduler::break_pipeline(const absl::Status& status) {
  publish_broken(status);
  if (core_.options().max_migrations > 0) {
    core_.suspend(status, core_.options().max_migrations);
  } else {
    core_.fail_all(status);
  }
  drop_link(status);
}

// Sends what the core schedules until it has nothing more or the pipeline
// is full.
void Scheduler::send_scheduled() {
  while (link_) {
    std::optional<v1::MicroBatch> batch = core_.schedule();
    if (!batch) return;
    batch->set_shard_id(shard_id_);
    if (absl::Status st = link_->send(*std::move(batch)); !st.ok()) {
      break_pipeline(absl::UnavailableError(
          absl::StrCat("sending to ", link_->peer(), ": ", st.message())));
      return;
    }
  }
}

void Scheduler::loop() {
  bool again = false;
  while (true) {
    std::deque<Submitted> submitted;
    std::vector<uint64_t> cancelled;
    std::deque<v1::MicroBatchResult> results;
    std::optional<absl::Status> fail;
    std::optional<absl::Status> suspend;
    std::unique_ptr<worker::ActivationLink> new_link;
    bool have_new_link = false;
    uint64_t new_shard_id = 0;
    int new_prefix_blocks = -1;
    std::optional<int> new_beside_decode_rows;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stop_ || !submitted_.empty() || !cancelled_.empty() ||
               !results_.empty() || fail_request_.has_value() ||
               suspend_request_.has_value() || have_new_link_;
      };
      if (!again && stats_.recovering) {
        cv_.wait_until(lock, recovery_deadline_, ready);
        if (!ready() && stats_.recovering &&
            std::chrono::steady_clock::now() >= recovery_deadline_) {
          // No new pipeline in time: the requests end as without migration.
          const absl::Status why = recovering_.value_or(
              absl::UnavailableError("the pipeline is down"));
          fail_request_ = absl::Status(
              why.code(), absl::StrCat(why.message(), " (no new pipeline within ",
                                       core_.options().migration_timeout_ms, " ms)"));
          stats_.recovering = false;
        }
      } else if (!again) {
        cv_.wait(lock, ready);
      }
      stop = stop_;
      submitted.swap(submitted_);
      cancelled.swap(cancelled_);
      results.swap(results_);
      fail.swap(fail_request_);
      suspend.swap(suspend_request_);
      if (have_new_link_ && !fail) {
        new_link = std::move(new_link_);
        new_shard_id = new_shard_id_;
        new_prefix_blocks = new_prefix_blocks_;
        new_beside_decode_rows = new_beside_decode_rows_;
        have_new_link = true;
        have_new_link_ = false;
      }
    }
    again = false;
    if (stop) {
      const absl::Status status =
          absl::CancelledError("the server is shutting down");
      for (Submitted& s : submitted) fail_submitted(s, status);
      BrokenFn on_broken = std::move(on_broken_);
      on_broken_ = nullptr;
      publish_broken(status);
      core_.fail_all(status);
      drop_link(status);
      on_broken_ = std::move(on_broken);
      if (new_link) new_link->close(worker::kLinkClosed);
      return;
    }
    if (fail) {
      // Every request ends: no waiting for a new pipeline (fail_all() or
      // the migration timeout).
      {
        std::lock_guard<std::mutex> lock(mu_);
        recovering_.reset();
        stats_.recovering = false;
        if (!have_new_link_) {
          stats_.attached = false;
          stats_.unavailable = std::string(fail->message());
        }
      }
      stats_cv_.notify_all();
      core_.fail_all(*fail);
      drop_link(*fail);
    } else if (suspend) {
      break_pipeline(*suspend);
    }
    if (have_new_link) {
      if (link_) link_->close(worker::kLinkClosed);
      link_ = std::move(new_link);
      shard_id_ = new_shard_id;
      unavailable_.clear();
      core_.reset_prefix_cache(new_prefix_blocks);  // the stages' stores are new
      if (new_beside_decode_rows) {
        core_.set_prefill_chunk_beside_decode(*new_beside_decode_rows);
      }
    }
    for (v1::MicroBatchResult& r : results) {
      // A result of an earlier link (a fenced-off pipeline) is not ours.
      if (r.shard_id() != 0 && r.shard_id() != shard_id_) continue;
      if (absl::Status st = core_.update_from_output(std::move(r)); !st.ok()) {
        drop_link(st);  // the core published it and failed every request
      }
    }
    bool recovering;
    {
      std::lock_guard<std::mutex> lock(mu_);
      recovering = stats_.recovering;
    }
    for (Submitted& s : submitted) {
      if (!link_ && !recovering) {
        fail_submitted(s, absl::UnavailableError(unavailable_));
      } else {
        core_.add(std::move(s.handle), std::move(s.request), s.at);
      }
    }
    // After the adds: a request cancelled right after it was submitted (an
    // HTTP client that closed at once) comes in the same round as its
    // submission, and a cancel before its add would find nothing.
    for (uint64_t id : cancelled) core_.cancel(id);
    send_scheduled();
    std::vector<uint64_t> to_free = core_.take_finished();
    if (!to_free.empty()) {
      if (free_sequences_) free_sequences_(to_free);
      again = core_.waiting() > 0;  // slots opened: admit at once
    }
    publish_counts(!results.empty());
  }
}

}  // namespace strata::coordinator
