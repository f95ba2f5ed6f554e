#include "coordinator/scheduler.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/sampler.h"

namespace strata::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

bool breaks_pipeline(int code) {
  return code == static_cast<int>(absl::StatusCode::kUnavailable) ||
         code == static_cast<int>(absl::StatusCode::kDeadlineExceeded) ||
         code == static_cast<int>(absl::StatusCode::kCancelled);
}

SchedulerOptions normalized(SchedulerOptions o) {
  o.max_sequences = std::max(1, o.max_sequences);
  o.prefill_chunk = std::max(1, o.prefill_chunk);
  o.max_in_flight = std::max(1, o.max_in_flight);
  if (o.max_batch_rows <= 0) o.max_batch_rows = o.prefill_chunk + o.max_sequences;
  o.prefill_chunk = std::min(o.prefill_chunk, o.max_batch_rows);
  return o;
}

}  // namespace

struct Scheduler::Sequence {
  enum class State {
    kPrefill,     // prompt rows still to send
    kAwaitToken,  // a sampling slice is in flight
    kReady,       // holds a sampled token to send as the next decode step
    kDone,        // ended (done, failed or cancelled); freed once idle
  };
  uint64_t id = 0;
  std::shared_ptr<SequenceHandle> handle;
  SequenceRequest request;
  std::unique_ptr<Detokenizer> detok;
  std::unique_ptr<GenerationOutput> output;  // borrows request, detok
  State state = State::kPrefill;
  int prompt_sent = 0;  // prompt rows sent
  int pos = 0;          // positions sent to the stages
  int in_flight = 0;    // micro-batches in flight holding a slice of it
  int decode_steps = 0;
  Clock::time_point submitted;
  Clock::time_point first_sent;
  Clock::time_point first_token;
  bool sent = false;
  bool sampled = false;
};

struct Scheduler::InFlight {
  std::vector<uint64_t> seqs;  // slice order
  std::vector<bool> sample;    // whether each slice samples
};

std::optional<SequenceEvent> SequenceHandle::next(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                    [&] { return !events_.empty(); })) {
    return std::nullopt;
  }
  SequenceEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void SequenceHandle::push(SequenceEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

v1::SamplingParams to_proto(const worker::SamplingParams& p) {
  v1::SamplingParams s;
  s.set_temperature(p.temperature);
  s.set_top_k(p.top_k);
  s.set_top_p(p.top_p);
  s.set_min_p(p.min_p);
  s.set_repeat_penalty(p.repeat_penalty);
  s.set_presence_penalty(p.presence_penalty);
  s.set_frequency_penalty(p.frequency_penalty);
  s.set_repeat_last_n(p.penalty_last_n);
  s.set_seed(p.seed);
  return s;
}

Scheduler::Scheduler(const SchedulerOptions& options,
                     DetokenizerFactory detokenizers, FreeFn free_sequences)
    : options_(normalized(options)),
      detokenizers_(std::move(detokenizers)),
      free_sequences_(std::move(free_sequences)) {
  stats_.unavailable = unavailable_;
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

worker::ActivationLink::ResultCallback Scheduler::result_callback() {
  return [this](v1::MicroBatchResult result) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(std::move(result));
    }
    cv_.notify_all();
  };
}

void Scheduler::attach(std::unique_ptr<worker::ActivationLink> link,
                       uint64_t shard_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    new_link_ = std::move(link);
    new_shard_id_ = shard_id;
    have_new_link_ = true;
    stats_.attached = true;  // submissions from now on wait for the link
    stats_.unavailable.clear();
  }
  cv_.notify_all();
}

absl::StatusOr<std::shared_ptr<SequenceHandle>> Scheduler::submit(
    SequenceRequest request) {
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("prompt: empty");
  }
  if (static_cast<int64_t>(request.prompt.size()) > options_.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt: ", request.prompt.size(), " tokens exceed the context of ",
        options_.n_ctx));
  }
  if (request.params.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: ", request.params.max_tokens, " is less than 1"));
  }
  if (absl::Status st = worker::validate(request.params.sampling); !st.ok()) {
    return st;
  }
  auto seq = std::make_unique<Sequence>();
  seq->submitted = Clock::now();
  seq->request = std::move(request);
  seq->handle = std::make_shared<SequenceHandle>();
  std::shared_ptr<SequenceHandle> handle = seq->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.attached) {
      return absl::UnavailableError(stats_.unavailable);
    }
    if (stats_.queued + static_cast<int>(submitted_.size()) >=
        options_.max_queued) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many requests: ", options_.max_sequences, " running and ",
          options_.max_queued, " waiting"));
    }
    seq->id = next_seq_id_++;
    handle->seq_id_ = seq->id;
    submitted_.push_back(std::move(seq));
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
    stats_.unavailable = std::string(status.message());
  }
  cv_.notify_all();
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Scheduler::fail_sequence(Sequence& seq, const absl::Status& status) {
  if (seq.state == Sequence::State::kDone) return;
  seq.state = Sequence::State::kDone;
  SequenceEvent e;
  e.kind = SequenceEvent::Kind::kError;
  e.error = status;
  seq.handle->push(std::move(e));
}

void Scheduler::finish(Sequence& seq) {
  seq.state = Sequence::State::kDone;
  const Clock::time_point now = Clock::now();
  SequenceEvent e;
  e.kind = SequenceEvent::Kind::kDone;
  e.finish = seq.output->finish_reason();
  e.all_ids = seq.output->ids();
  e.all_text = seq.output->text();
  SequenceTimings& t = e.timings;
  t.queue_ms = ms_between(seq.submitted, seq.first_sent);
  t.ttft_ms = ms_between(seq.submitted, seq.first_token);
  t.prefill_ms = ms_between(seq.first_sent, seq.first_token);
  t.decode_ms = ms_between(seq.first_token, now);
  t.decode_steps = seq.decode_steps;
  ++served_;
  {
    // Published before the client hears of the end.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.served = served_;
  }
  seq.handle->push(std::move(e));
}

void Scheduler::break_pipeline(const absl::Status& status) {
  {
    // Published first: whoever sees a request fail sees the state too.
    std::lock_guard<std::mutex> lock(mu_);
    if (!have_new_link_) {
      stats_.attached = false;
      stats_.unavailable = std::string(status.message());
    }
  }
  for (auto& [id, seq] : active_) fail_sequence(*seq, status);
  for (auto& seq : waiting_) fail_sequence(*seq, status);
  active_.clear();
  waiting_.clear();
  in_flight_.clear();
  if (link_) {
    link_->close(worker::kLinkClosed);
    link_.reset();
  }
  unavailable_ = std::string(status.message());
  if (on_broken_) on_broken_(status);
}

void Scheduler::process_result(v1::MicroBatchResult result) {
  auto it = in_flight_.find(result.batch_id());
  if (it == in_flight_.end()) return;  // from a link that was dropped
  InFlight record = std::move(it->second);
  in_flight_.erase(it);
  std::vector<Sequence*> seqs;
  for (uint64_t id : record.seqs) {
    auto s = active_.find(id);
    Sequence* seq = s == active_.end() ? nullptr : s->second.get();
    if (seq != nullptr) --seq->in_flight;
    seqs.push_back(seq);
  }
  if (trace_) {
    for (const v1::BlockTrace& t : result.traces()) trace_(t);
  }
  if (result.error_code() != 0) {
    const absl::Status status(
        static_cast<absl::StatusCode>(result.error_code()),
        result.error_message().empty()
            ? absl::StrCat("micro-batch ", result.batch_id(), " failed")
            : result.error_message());
    if (breaks_pipeline(result.error_code())) {
      break_pipeline(status);
      return;
    }
    for (Sequence* seq : seqs) {
      if (seq != nullptr) fail_sequence(*seq, status);
    }
    return;
  }
  int k = 0;
  const int n_tokens = result.tokens_size();
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!record.sample[i]) continue;
    Sequence* seq = seqs[i];
    if (k >= n_tokens || result.tokens(k).seq_id() != record.seqs[i]) {
      const absl::Status status = absl::InternalError(absl::StrCat(
          "the last stage returned ", n_tokens, " tokens that do not match "
          "the sampled slices of micro-batch ", result.batch_id()));
      for (Sequence* s : seqs) {
        if (s != nullptr) fail_sequence(*s, status);
      }
      return;
    }
    const v1::SampledToken& token = result.tokens(k++);
    if (seq == nullptr || seq->state != Sequence::State::kAwaitToken) continue;
    if (!seq->sampled) {
      seq->sampled = true;
      seq->first_token = Clock::now();
    }
    const size_t kept_before = seq->output->ids().size();
    SequenceEvent delta;
    delta.text = seq->output->push(token.id());
    if (seq->output->ids().size() > kept_before) {
      delta.ids.push_back(token.id());
      if (seq->request.logprobs || seq->request.top_logprobs > 0) {
        delta.tokens.push_back(token);
      }
    }
    if (!seq->output->done() && seq->pos + 1 > options_.n_ctx) {
      delta.text += seq->output->end_at_context();
    }
    if (!delta.ids.empty() || !delta.text.empty()) {
      seq->handle->push(std::move(delta));
    }
    if (seq->output->done()) {
      finish(*seq);
    } else {
      seq->state = Sequence::State::kReady;
    }
  }
}

bool Scheduler::compose(v1::MicroBatch* batch, InFlight* record) {
  int decoding = 0;
  for (auto& [id, seq] : active_) {
    if (seq->state == Sequence::State::kReady ||
        (seq->state == Sequence::State::kAwaitToken &&
         seq->prompt_sent == static_cast<int>(seq->request.prompt.size()))) {
      ++decoding;
    }
  }
  const int decode_cap =
      std::max(1, (decoding + options_.max_in_flight - 1) /
                      std::max(1, options_.max_in_flight));
  int rows = 0;
  int decodes = 0;
  const Clock::time_point now = Clock::now();
  auto add_slice = [&](Sequence& seq, bool sample) -> v1::SequenceSlice* {
    v1::SequenceSlice* slice = batch->add_slices();
    slice->set_seq_id(seq.id);
    slice->set_sample(sample);
    if (sample) {
      slice->set_logprobs(seq.request.logprobs);
      slice->set_top_logprobs(seq.request.top_logprobs);
    }
    record->seqs.push_back(seq.id);
    record->sample.push_back(sample);
    ++seq.in_flight;
    if (!seq.sent) {
      seq.sent = true;
      seq.first_sent = now;
    }
    return slice;
  };
  // Decode steps first: one row each.
  for (auto& [id, seq] : active_) {
    if (decodes >= decode_cap || batch->slices_size() >= options_.max_sequences) {
      break;
    }
    if (seq->state != Sequence::State::kReady) continue;
    v1::SequenceSlice* slice = add_slice(*seq, true);
    slice->set_start_pos(seq->pos);
    slice->add_tokens(seq->output->ids().back());
    ++seq->pos;
    ++seq->decode_steps;
    seq->state = Sequence::State::kAwaitToken;
    ++rows;
    ++decodes;
  }
  // Then prompt chunks, oldest request first.
  for (auto& [id, seq] : active_) {
    if (batch->slices_size() >= options_.max_sequences) break;
    if (seq->state != Sequence::State::kPrefill) continue;
    const int n_prompt = static_cast<int>(seq->request.prompt.size());
    const int chunk = std::min(options_.prefill_chunk, n_prompt - seq->prompt_sent);
    if (rows + chunk > options_.max_batch_rows) continue;
    const bool last = seq->prompt_sent + chunk == n_prompt;
    v1::SequenceSlice* slice = add_slice(*seq, last);
    slice->set_start_pos(seq->prompt_sent);
    if (seq->prompt_sent == 0) {
      *slice->mutable_sampling() = to_proto(seq->request.params.sampling);
    }
    for (int i = 0; i < chunk; ++i) {
      slice->add_tokens(seq->request.prompt[seq->prompt_sent + i]);
    }
    seq->prompt_sent += chunk;
    seq->pos = seq->prompt_sent;
    if (last) seq->state = Sequence::State::kAwaitToken;
    rows += chunk;
  }
  if (batch->slices_size() == 0) return false;
  batch->set_shard_id(shard_id_);
  batch->set_batch_id(next_batch_id_++);
  batch->set_trace(options_.trace);
  return true;
}

void Scheduler::retire_finished(std::vector<uint64_t>* to_free) {
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second->state == Sequence::State::kDone &&
        it->second->in_flight == 0) {
      to_free->push_back(it->first);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

void Scheduler::loop() {
  bool again = false;
  while (true) {
    std::deque<std::unique_ptr<Sequence>> submitted;
    std::vector<uint64_t> cancelled;
    std::deque<v1::MicroBatchResult> results;
    std::optional<absl::Status> fail;
    std::unique_ptr<worker::ActivationLink> new_link;
    bool have_new_link = false;
    uint64_t new_shard_id = 0;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!again) {
        cv_.wait(lock, [&] {
          return stop_ || !submitted_.empty() || !cancelled_.empty() ||
                 !results_.empty() || fail_request_.has_value() ||
                 have_new_link_;
        });
      }
      stop = stop_;
      submitted.swap(submitted_);
      cancelled.swap(cancelled_);
      results.swap(results_);
      fail.swap(fail_request_);
      if (have_new_link_ && !fail) {
        new_link = std::move(new_link_);
        new_shard_id = new_shard_id_;
        have_new_link = true;
        have_new_link_ = false;
      }
    }
    again = false;
    if (stop) {
      const absl::Status status =
          absl::CancelledError("the server is shutting down");
      for (auto& seq : submitted) fail_sequence(*seq, status);
      BrokenFn on_broken = std::move(on_broken_);
      on_broken_ = nullptr;
      break_pipeline(status);
      on_broken_ = std::move(on_broken);
      if (new_link) new_link->close(worker::kLinkClosed);
      return;
    }
    if (fail) break_pipeline(*fail);
    if (have_new_link) {
      if (link_) link_->close(worker::kLinkClosed);
      link_ = std::move(new_link);
      shard_id_ = new_shard_id;
      unavailable_.clear();
    }
    for (v1::MicroBatchResult& r : results) process_result(std::move(r));
    for (uint64_t id : cancelled) {
      const absl::Status status = absl::CancelledError("cancelled by the client");
      auto a = active_.find(id);
      if (a != active_.end()) {
        fail_sequence(*a->second, status);
        continue;
      }
      for (auto w = waiting_.begin(); w != waiting_.end(); ++w) {
        if ((*w)->id == id) {
          fail_sequence(**w, status);
          waiting_.erase(w);
          break;
        }
      }
    }
    for (auto& seq : submitted) {
      if (!link_) {
        fail_sequence(*seq, absl::UnavailableError(unavailable_));
      } else {
        waiting_.push_back(std::move(seq));
      }
    }
    // Admit waiting requests into free slots.
    while (link_ && !waiting_.empty() &&
           static_cast<int>(active_.size()) < options_.max_sequences) {
      std::unique_ptr<Sequence> seq = std::move(waiting_.front());
      waiting_.pop_front();
      seq->detok = detokenizers_();
      seq->output =
          std::make_unique<GenerationOutput>(seq->request.params, *seq->detok);
      const uint64_t id = seq->id;
      active_.emplace(id, std::move(seq));
    }
    // Fill the pipeline.
    while (link_ && static_cast<int>(in_flight_.size()) < options_.max_in_flight) {
      v1::MicroBatch batch;
      InFlight record;
      if (!compose(&batch, &record)) break;
      const uint64_t batch_id = batch.batch_id();
      in_flight_.emplace(batch_id, std::move(record));
      if (absl::Status st = link_->send(std::move(batch)); !st.ok()) {
        break_pipeline(absl::UnavailableError(absl::StrCat(
            "sending to ", link_ ? link_->peer() : "the first stage", ": ",
            st.message())));
        break;
      }
    }
    std::vector<uint64_t> to_free;
    retire_finished(&to_free);
    if (!to_free.empty()) {
      if (free_sequences_) free_sequences_(to_free);
      again = !waiting_.empty();  // slots opened: admit at once
    }
    int queued = static_cast<int>(waiting_.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.active = static_cast<int>(active_.size());
      stats_.queued = queued;
      stats_.served = served_;
    }
  }
}

}  // namespace strata::coordinator
