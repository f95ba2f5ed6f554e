#include "coordinator/step_scheduler.h"

#include <algorithm>
#include <limits>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/metrics.h"
#include "spdlog/spdlog.h"

namespace strata::coordinator {
namespace {

using Clock = StepScheduler::Clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
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
  if (o.max_batch_rows <= 0)
    o.max_batch_rows = o.prefill_chunk + o.max_sequences;
  o.prefill_chunk = std::min(o.prefill_chunk, o.max_batch_rows);
  return o;
}

// SchedulerOptions::prefill_chunk_beside_decode's rule: 0 or more than
// the chunk is the chunk.
int beside_decode_rows(int rows, int prefill_chunk) {
  return rows <= 0 || rows > prefill_chunk ? prefill_chunk : rows;
}

}  // namespace

struct StepScheduler::Sequence {
  enum class State {
    kPrefill,     // prompt rows still to send
    kAwaitToken,  // a sampling slice is in flight
    kAwaitEmbedding,  // an embedding's last chunk is in flight
    kReady,       // holds a sampled token to send as the next decode step
    kDone,        // ended (done, failed or cancelled); freed once idle
  };
  uint64_t id = 0;
  uint64_t number = 0;  // in the logs: 1, 2, ... (ids are not for logs)
  std::shared_ptr<SequenceHandle> handle;
  SequenceRequest request;
  std::unique_ptr<Detokenizer> detok;
  std::unique_ptr<GenerationOutput> output;  // borrows request, detok
  State state = State::kPrefill;
  int prompt_sent = 0;  // rows of prefill_tokens() sent
  int pos = 0;          // positions sent to the stages
  int in_flight = 0;    // micro-batches in flight holding a slice of it
  int decode_steps = 0;
  int generated = 0;  // tokens sampled for it
  int cached = 0;               // prompt rows restored from the prefix cache
  int next_save = 0;            // the next prompt block to save
  std::vector<uint64_t> keys;   // of the prompt's full blocks
  Clock::time_point submitted;
  Clock::time_point first_sent;
  Clock::time_point first_token;
  Clock::time_point last_token;
  bool sent = false;     // a slice went out (on any pipeline)
  bool started = false;  // a slice went out on the current pipeline
  bool sampled = false;
  // Migration: the prompt and the tokens generated before the pipeline
  // broke, prefilled again on the new one (empty: not migrated).
  std::vector<int32_t> resume;
  int migrations = 0;
  // Scored prompts: prompt_lp[p] scores prompt[p] (p >= 1), kept once.
  std::vector<v1::TokenChoice> prompt_lp;
  std::vector<bool> prompt_lp_set;
  int prompt_lp_count = 0;
  bool prompt_lp_sent = false;  // an event carried them
  // Embeddings: the chunks' vectors by start position ({rows, values}),
  // each position once.
  std::map<int, std::pair<int, std::vector<float>>> embed_parts;

  int prompt_size() const { return static_cast<int>(request.prompt.size()); }
  const std::vector<int32_t>& prefill_tokens() const {
    return resume.empty() ? request.prompt : resume;
  }
  int prefill_size() const { return static_cast<int>(prefill_tokens().size()); }
  // Its next row is a decode step, now or once its token is back.
  bool decoding() const {
    return state == State::kReady ||
           (state == State::kAwaitToken && prompt_sent == prefill_size());
  }
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
  s.mutable_logit_bias_ids()->Reserve(static_cast<int>(p.logit_bias.entries().size()));
  s.mutable_logit_bias_values()->Reserve(static_cast<int>(p.logit_bias.entries().size()));
  for (const auto& [id, bias] : p.logit_bias) {
    s.add_logit_bias_ids(id);
    s.add_logit_bias_values(bias);
  }
  return s;
}

StepScheduler::StepScheduler(const SchedulerOptions& options,
                             DetokenizerFactory detokenizers)
    : options_(normalized(options)),
      detokenizers_(std::move(detokenizers)),
      prefix_(options_.prefix_cache_blocks, options_.prefix_block_tokens),
      beside_decode_rows_(
          beside_decode_rows(options_.prefill_chunk_beside_decode, options_.prefill_chunk)) {}

StepScheduler::~StepScheduler() = default;

void StepScheduler::set_hooks(Hooks hooks) { hooks_ = std::move(hooks); }

void StepScheduler::reset_prefix_cache(int capacity) {
  if (capacity < 0) {
    prefix_.clear();
    return;
  }
  prefix_ = PrefixIndex(std::min(capacity, options_.prefix_cache_blocks),
                        options_.prefix_block_tokens);
}

void StepScheduler::set_prefill_chunk_beside_decode(int rows) {
  beside_decode_rows_ = beside_decode_rows(rows, options_.prefill_chunk);
}

void StepScheduler::add(std::shared_ptr<SequenceHandle> handle,
                        SequenceRequest request, Clock::time_point submitted) {
  auto seq = std::make_unique<Sequence>();
  seq->id = handle->seq_id();
  seq->number = ++added_;
  seq->handle = std::move(handle);
  seq->request = std::move(request);
  seq->submitted = submitted;
  waiting_.push_back(std::move(seq));
}

void StepScheduler::cancel(uint64_t seq_id) {
  const absl::Status status = absl::CancelledError("cancelled by the client");
  if (auto a = active_.find(seq_id); a != active_.end()) {
    fail_sequence(*a->second, status);
    return;
  }
  for (auto w = waiting_.begin(); w != waiting_.end(); ++w) {
    if ((*w)->id == seq_id) {
      fail_sequence(**w, status);
      waiting_.erase(w);
      return;
    }
  }
}

void StepScheduler::fail_all(const absl::Status& status) {
  for (auto& [id, seq] : active_) fail_sequence(*seq, status);
  for (auto& seq : waiting_) fail_sequence(*seq, status);
  active_.clear();
  waiting_.clear();
  in_flight_.clear();
}

int StepScheduler::suspend(const absl::Status& status, int max_migrations) {
  in_flight_.clear();
  int kept = 0;
  for (auto it = active_.begin(); it != active_.end();) {
    Sequence& seq = *it->second;
    seq.in_flight = 0;
    if (seq.state == Sequence::State::kDone) {
      it = active_.erase(it);  // ended; its slots went with the pipeline
      continue;
    }
    const std::vector<int32_t>& ids = seq.output->ids();
    if (seq.migrations >= max_migrations ||
        static_cast<int>(ids.size()) != seq.generated) {
      fail_sequence(seq, status);
      it = active_.erase(it);
      continue;
    }
    ++seq.migrations;
    ++migrated_;
    seq.resume.clear();
    if (seq.generated > 0) {
      seq.resume = seq.request.prompt;
      seq.resume.insert(seq.resume.end(), ids.begin(), ids.end());
    }
    seq.state = Sequence::State::kPrefill;
    seq.embed_parts.clear();
    seq.started = false;
    seq.prompt_sent = 0;
    seq.pos = 0;
    ++kept;
    ++it;
  }
  if (kept > 0) {
    spdlog::warn("{} request{} wait{} for a new pipeline: {}", kept,
                 kept == 1 ? "" : "s", kept == 1 ? "s" : "", std::string(status.message()));
  }
  return kept;
}

void StepScheduler::fail_sequence(Sequence& seq, const absl::Status& status) {
  if (seq.state == Sequence::State::kDone) return;
  seq.state = Sequence::State::kDone;
  const bool cancelled = status.code() == absl::StatusCode::kCancelled;
  if (options_.metrics != nullptr) options_.metrics->request_failed(cancelled);
  if (seq.sampled) {
    spdlog::info(
        "request {}: {} {}: prompt {} tokens, generated {}, ttft {:.1f} ms",
        seq.number, cancelled ? "aborted" : "failed",
        absl::StatusCodeToString(status.code()), seq.prompt_size(),
        seq.generated, ms_between(seq.submitted, seq.first_token));
  } else {
    spdlog::info("request {}: {} {}: prompt {} tokens, generated 0, ttft -",
                 seq.number, cancelled ? "aborted" : "failed",
                 absl::StatusCodeToString(status.code()), seq.prompt_size());
  }
  SequenceEvent e;
  e.kind = SequenceEvent::Kind::kError;
  e.error = status;
  seq.handle->push(std::move(e));
}

void StepScheduler::finish(Sequence& seq) {
  SequenceEvent e;
  if (!attach_prompt_logprobs(seq, e)) return;
  const Clock::time_point now = Clock::now();
  e.kind = SequenceEvent::Kind::kDone;
  e.finish = seq.output->finish_reason();
  e.stop_word = seq.output->stop_word();
  e.all_ids = seq.output->ids();
  e.all_text = seq.output->text();
  SequenceTimings& t = e.timings;
  t.queue_ms = ms_between(seq.submitted, seq.first_sent);
  t.ttft_ms = ms_between(seq.submitted, seq.first_token);
  t.prefill_ms = ms_between(seq.first_sent, seq.first_token);
  t.decode_ms = ms_between(seq.first_token, now);
  t.decode_steps = seq.decode_steps;
  spdlog::info(
      "request {}: finished {}: prompt {} tokens ({} cached), generated {}, "
      "ttft {:.1f} ms, {:.1f} ms in all",
      seq.number, finish_reason_name(e.finish), seq.prompt_size(), seq.cached, seq.generated,
      t.ttft_ms, ms_between(seq.submitted, now));
  deliver_done(seq, std::move(e), now);
}

// The end every kDone shares (a generation's and an embedding's): the
// sequence is done, the request's metrics, the served count and its hook,
// then the event.
void StepScheduler::deliver_done(Sequence& seq, SequenceEvent e, Clock::time_point now) {
  seq.state = Sequence::State::kDone;
  e.cached_tokens = seq.cached;
  if (ServingMetrics* m = options_.metrics) {
    m->e2e_request_latency.observe(seconds_between(seq.submitted, now));
    m->request_prompt_tokens.observe(seq.prompt_size());
    m->request_generation_tokens.observe(seq.generated);
    m->request_finished(finish_reason_name(e.finish));
  }
  ++served_;
  if (hooks_.served) hooks_.served(served_);
  seq.handle->push(std::move(e));
}

void StepScheduler::admit() {
  while (!waiting_.empty() &&
         static_cast<int>(active_.size()) < options_.max_sequences) {
    std::unique_ptr<Sequence> seq = std::move(waiting_.front());
    waiting_.pop_front();
    seq->detok = detokenizers_();
    if (seq->request.render_special) seq->detok->set_render_special(true);
    seq->output =
        std::make_unique<GenerationOutput>(seq->request.params, *seq->detok);
    const uint64_t id = seq->id;
    active_.emplace(id, std::move(seq));
  }
}

// A decode step that fills a block (its row is the block's last) saves it
// too: the next turn of a chat starts with this turn's answer.
void StepScheduler::save_decoded_block(Sequence& seq, v1::SequenceSlice& slice,
                                       InFlight& record) {
  const int bt = prefix_.block_tokens();
  if (prefix_.capacity() == 0 || seq.pos % bt != 0) return;
  const int b = seq.pos / bt - 1;
  if (b != static_cast<int>(seq.keys.size())) return;  // keys must chain
  std::vector<int32_t> block;
  block.reserve(static_cast<size_t>(bt));
  const std::vector<int32_t>& ids = seq.output->ids();
  for (int p = b * bt; p < (b + 1) * bt; ++p) {
    const int g = p - seq.prompt_size();
    if (g >= static_cast<int>(ids.size())) return;
    block.push_back(g < 0 ? seq.request.prompt[p] : ids[g]);
  }
  const uint64_t parent = b == 0 ? PrefixIndex::root_key(seq.request.cache_salt) : seq.keys[b - 1];
  const uint64_t key = prefix_.chain_key(parent, block);
  seq.keys.push_back(key);
  seq.next_save = b + 1;
  if (std::optional<uint32_t> slot = prefix_.insert_block(block, parent, key)) {
    slice.add_save_blocks(*slot);
    slice.add_save_keys(key);
    slice.add_save_block_index(b);
    record.saved.push_back(PrefixBlock{*slot, key});
  }
}

std::optional<v1::MicroBatch> StepScheduler::schedule() {
  admit();
  if (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) {
    return std::nullopt;
  }
  int decoding = 0;
  for (auto& [id, seq] : active_) decoding += seq->decoding() ? 1 : 0;
  const int decode_cap = std::max(
      1, (decoding + options_.max_in_flight - 1) / options_.max_in_flight);
  v1::MicroBatch batch;
  InFlight record;
  int rows = 0;
  int scored_rows = 0;  // rows of scored prompt chunks (kScoredChunkRows)
  // Prompt rows this micro-batch may still take while a sequence decodes,
  // so its next token does not wait for a whole chunk (the next prompt
  // takes what an older one leaves); otherwise, or with a budget of the
  // whole chunk, only max_batch_rows bounds them (a chunk that does not
  // fit waits whole, so prompts are cut where they always are).
  int prompt_rows_left = decoding > 0 && beside_decode_rows_ < options_.prefill_chunk
                             ? beside_decode_rows_
                             : std::numeric_limits<int>::max();
  int decodes = 0;
  const Clock::time_point now = Clock::now();
  auto add_slice = [&](Sequence& seq, bool sample) -> v1::SequenceSlice* {
    v1::SequenceSlice* slice = batch.add_slices();
    slice->set_seq_id(seq.id);
    slice->set_sample(sample);
    if (sample) {
      slice->set_logprobs(seq.request.logprobs);
      slice->set_top_logprobs(seq.request.top_logprobs);
    }
    record.seqs.push_back(seq.id);
    record.sample.push_back(sample);
    ++seq.in_flight;
    seq.started = true;
    if (!seq.sent) {
      seq.sent = true;
      seq.first_sent = now;
    }
    return slice;
  };
  // Decode steps first: one row each.
  for (auto& [id, seq] : active_) {
    if (decodes >= decode_cap ||
        batch.slices_size() >= options_.max_sequences) {
      break;
    }
    if (seq->state != Sequence::State::kReady) continue;
    v1::SequenceSlice* slice = add_slice(*seq, true);
    slice->set_start_pos(seq->pos);
    slice->add_tokens(seq->output->ids().back());
    ++seq->pos;
    ++seq->decode_steps;
    save_decoded_block(*seq, *slice, record);
    seq->state = Sequence::State::kAwaitToken;
    ++rows;
    ++decodes;
  }
  // Then prompt chunks, oldest request first (by the order add() took
  // them: active_ is keyed by seq ids, which are random).
  std::vector<Sequence*> prompts;
  for (auto& [id, seq] : active_) {
    if (seq->state == Sequence::State::kPrefill) prompts.push_back(seq.get());
  }
  std::sort(prompts.begin(), prompts.end(),
            [](const Sequence* a, const Sequence* b) { return a->number < b->number; });
  for (Sequence* seq : prompts) {
    if (batch.slices_size() >= options_.max_sequences) break;
    const bool first = !seq->started;
    const bool resumed = !seq->resume.empty();
    std::vector<PrefixBlock> hits;
    const bool scored = seq->request.prompt_logprobs >= 0;
    const Pooling embed = seq->request.embed;
    if (first && !resumed && prefix_.capacity() > 0) {
      const std::span<const int32_t> prompt(seq->request.prompt);
      const uint64_t root = PrefixIndex::root_key(seq->request.cache_salt);
      if (seq->keys.empty()) seq->keys = prefix_.block_keys(prompt, root);
      // A scored prompt restores nothing (restored rows have no logits);
      // it still saves its blocks.
      // Nor does a mean-pooled one (restored rows are not pooled).
      const int most = scored || embed == Pooling::kMean
                           ? 0
                           : (seq->prompt_size() - 1) / prefix_.block_tokens();
      hits = prefix_.match(prompt, seq->keys, most, root);
      // A block this micro-batch saves is not there yet when its restores
      // run (every stage restores before the forward pass, saves after).
      for (size_t h = 0; h < hits.size(); ++h) {
        if (std::any_of(record.saved.begin(), record.saved.end(),
                        [&](const PrefixBlock& b) { return b.slot == hits[h].slot; })) {
          hits.resize(h);
          break;
        }
      }
    }
    const int start = first ? static_cast<int>(hits.size()) * prefix_.block_tokens()
                            : seq->prompt_sent;
    // A scored prompt's rows all come back as logits ([rows][n_vocab] on
    // the last stage): at most kScoredChunkRows of them a micro-batch.
    const int chunk_rows = std::min(
        prompt_rows_left, scored ? std::min(options_.prefill_chunk, kScoredChunkRows - scored_rows)
                                 : options_.prefill_chunk);
    if (chunk_rows <= 0) continue;
    const int chunk = std::min(chunk_rows, seq->prefill_size() - start);
    if (rows + chunk > options_.max_batch_rows) continue;
    if (scored) scored_rows += chunk;
    prompt_rows_left -= chunk;
    const bool last = start + chunk == seq->prefill_size();
    v1::SequenceSlice* slice = add_slice(*seq, last && embed == Pooling::kNone);
    slice->set_start_pos(start);
    if (embed == Pooling::kMean) {
      slice->set_embed(v1::EMBED_SUM);
    } else if (embed == Pooling::kLast && last) {
      slice->set_embed(v1::EMBED_LAST);
    }
    if (first) {
      *slice->mutable_sampling() = to_proto(seq->request.params.sampling);
      slice->set_grammar(seq->request.grammar);
      for (const PrefixBlock& h : hits) {
        slice->add_restore_blocks(h.slot);
        slice->add_restore_keys(h.key);
      }
      record.restores = record.restores || !hits.empty();
      if (resumed) {
        // Replayed into the last stage's sampler and grammar.
        slice->set_generated_from(seq->prompt_size());
      } else {
        seq->cached = start;
        seq->next_save = static_cast<int>(hits.size());
      }
    }
    const std::vector<int32_t>& tokens = seq->prefill_tokens();
    for (int i = 0; i < chunk; ++i) slice->add_tokens(tokens[start + i]);
    if (scored && seq->prompt_lp_count < seq->prompt_size() - 1 &&
        start + 1 < seq->prompt_size()) {
      slice->set_prompt_logprobs(seq->request.prompt_logprobs);
      if (start + chunk < seq->prefill_size()) slice->set_next_token(tokens[start + chunk]);
    }
    seq->prompt_sent = start + chunk;
    seq->pos = seq->prompt_sent;
    // Save the full blocks this chunk completes that the index lacks.
    const int full = seq->prompt_sent / prefix_.block_tokens();
    for (; !resumed && prefix_.capacity() > 0 && seq->next_save < full; ++seq->next_save) {
      const int b = seq->next_save;
      if (std::optional<uint32_t> slot =
              prefix_.insert(seq->request.prompt, seq->keys, b,
                             PrefixIndex::root_key(seq->request.cache_salt))) {
        slice->add_save_blocks(*slot);
        slice->add_save_keys(seq->keys[b]);
        slice->add_save_block_index(b);
        record.saved.push_back(PrefixBlock{*slot, seq->keys[b]});
      }
    }
    if (last) {
      seq->state = embed == Pooling::kNone ? Sequence::State::kAwaitToken
                                           : Sequence::State::kAwaitEmbedding;
    }
    rows += chunk;
  }
  if (batch.slices_size() == 0) return std::nullopt;
  if (options_.metrics != nullptr) options_.metrics->iteration_tokens.observe(rows);
  batch.set_batch_id(next_batch_id_++);
  batch.set_trace(options_.trace);
  record.sent = now;
  in_flight_.emplace(batch.batch_id(), std::move(record));
  return batch;
}

absl::Status StepScheduler::update_from_output(v1::MicroBatchResult result) {
  auto it = in_flight_.find(result.batch_id());
  if (it == in_flight_.end()) return absl::OkStatus();  // forgotten
  InFlight record = std::move(it->second);
  in_flight_.erase(it);
  if (options_.metrics != nullptr) {
    options_.metrics->step_seconds.observe(
        seconds_between(record.sent, Clock::now()));
  }
  std::vector<Sequence*> seqs;
  for (uint64_t id : record.seqs) {
    auto s = active_.find(id);
    Sequence* seq = s == active_.end() ? nullptr : s->second.get();
    if (seq != nullptr) --seq->in_flight;
    seqs.push_back(seq);
  }
  if (hooks_.trace) {
    for (const v1::BlockTrace& t : result.traces()) hooks_.trace(t);
  }
  if (result.error_code() != 0) {
    const absl::Status status(
        static_cast<absl::StatusCode>(result.error_code()),
        result.error_message().empty()
            ? absl::StrCat("micro-batch ", result.batch_id(), " failed")
            : result.error_message());
    // What it saved may be missing on some stage; what it restored may be
    // missing on every one (a stage restarted): forget it.
    if (record.restores) {
      prefix_.clear();
    } else {
      for (const PrefixBlock& b : record.saved) prefix_.erase(b.slot, b.key);
    }
    if (breaks_pipeline(result.error_code())) {
      if (hooks_.broken) hooks_.broken(status);
      if (options_.max_migrations > 0) {
        suspend(status, options_.max_migrations);
      } else {
        fail_all(status);
      }
      return status;
    }
    for (Sequence* seq : seqs) {
      if (seq != nullptr) fail_sequence(*seq, status);
    }
    return absl::OkStatus();
  }
  for (const v1::PromptLogprobs& scored : result.prompt_logprobs()) {
    auto s = active_.find(scored.seq_id());
    if (s == active_.end() ||
        std::find(record.seqs.begin(), record.seqs.end(), scored.seq_id()) == record.seqs.end()) {
      continue;  // not a slice of this micro-batch
    }
    take_prompt_logprobs(*s->second, scored);
  }
  for (const v1::SliceEmbedding& part : result.embeddings()) {
    auto s = active_.find(part.seq_id());
    if (s == active_.end() ||
        std::find(record.seqs.begin(), record.seqs.end(), part.seq_id()) == record.seqs.end()) {
      continue;  // not a slice of this micro-batch
    }
    take_embedding(*s->second, part);
  }
  // An embedding whose last chunk came back (with every chunk before it:
  // results come in order) ends here.
  for (Sequence* seq : seqs) {
    if (seq != nullptr && seq->state == Sequence::State::kAwaitEmbedding &&
        seq->in_flight == 0) {
      finish_embedding(*seq);
    }
  }
  int k = 0;
  const int n_tokens = result.tokens_size();
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!record.sample[i]) continue;
    if (k >= n_tokens || result.tokens(k).seq_id() != record.seqs[i]) {
      const absl::Status status =
          absl::InternalError(absl::StrCat("the last stage returned ", n_tokens,
                                           " tokens that do not match "
                                           "the sampled slices of micro-batch ",
                                           result.batch_id()));
      for (Sequence* s : seqs) {
        if (s != nullptr) fail_sequence(*s, status);
      }
      return absl::OkStatus();
    }
    const v1::SampledToken& token = result.tokens(k++);
    Sequence* seq = seqs[i];
    if (seq == nullptr || seq->state != Sequence::State::kAwaitToken) continue;
    // Each position once: a token for another position (a stale or
    // repeated answer) is never delivered; the sequence ends rather than
    // wait for a token that will not come.
    if (token.pos() != 0 && token.pos() != seq->pos) {
      fail_sequence(*seq, absl::InternalError(absl::StrCat(
                              "the last stage answered position ", token.pos(),
                              ", expected ", seq->pos)));
      continue;
    }
    if (token.error_code() != 0) {
      fail_sequence(*seq, absl::Status(static_cast<absl::StatusCode>(token.error_code()),
                                       token.error_message()));
      continue;
    }
    take_token(*seq, token);
  }
  return absl::OkStatus();
}

// A scored prompt's log-probabilities go with the first event after its
// first token (all its chunks came back by then): false when some position
// is missing (the sequence then fails).
bool StepScheduler::attach_prompt_logprobs(Sequence& seq, SequenceEvent& event) {
  if (seq.request.prompt_logprobs < 0 || seq.prompt_lp_sent) return true;
  if (seq.prompt_lp_count != seq.prompt_size() - 1) {
    fail_sequence(seq, absl::InternalError(absl::StrCat(
                           "the last stage scored ", seq.prompt_lp_count, " of the prompt's ",
                           seq.prompt_size() - 1, " positions")));
    return false;
  }
  seq.prompt_lp_sent = true;
  if (seq.prompt_lp.size() > 1) {
    event.prompt_logprobs.assign(std::make_move_iterator(seq.prompt_lp.begin() + 1),
                                 std::make_move_iterator(seq.prompt_lp.end()));
  }
  event.scored = true;
  seq.prompt_lp = {};
  seq.prompt_lp_set = {};
  return true;
}

// Positions of the prompt after its first, each once (a re-sent or
// migrated chunk scores them again); anything else is ignored.
void StepScheduler::take_prompt_logprobs(Sequence& seq, const v1::PromptLogprobs& scored) {
  const int n = seq.prompt_size();
  if (seq.request.prompt_logprobs < 0 || seq.prompt_lp_sent ||
      seq.state == Sequence::State::kDone) {
    return;
  }
  if (seq.prompt_lp.empty()) {
    seq.prompt_lp.resize(static_cast<size_t>(n));
    seq.prompt_lp_set.assign(static_cast<size_t>(n), false);
  }
  for (int i = 0; i < scored.tokens_size(); ++i) {
    const int64_t p = int64_t{scored.pos()} + i;
    if (p < 1 || p >= n || seq.prompt_lp_set[static_cast<size_t>(p)]) continue;
    const v1::TokenChoice& t = scored.tokens(i);
    if (t.id() != seq.request.prompt[static_cast<size_t>(p)]) continue;  // not its token
    seq.prompt_lp[static_cast<size_t>(p)] = t;
    seq.prompt_lp_set[static_cast<size_t>(p)] = true;
    ++seq.prompt_lp_count;
  }
}

// A chunk's vector, kept once by its start position (a migrated chunk
// sends it again); anything that does not fit the sequence is ignored, and
// finish_embedding() then finds a position missing.
void StepScheduler::take_embedding(Sequence& seq, const v1::SliceEmbedding& part) {
  if (seq.request.embed == Pooling::kNone || seq.state == Sequence::State::kDone) return;
  if (part.pos() < 0 || part.rows() < 1 || part.rows() > seq.prompt_size() - part.pos() ||
      part.values_size() == 0) {
    return;
  }
  if (seq.request.embed == Pooling::kLast && part.pos() + part.rows() != seq.prompt_size()) return;
  seq.embed_parts.try_emplace(part.pos(), part.rows(),
                              std::vector<float>(part.values().begin(), part.values().end()));
}

// The pooled vector: the last chunk's (last pooling), or the chunks' sums
// added in position order, each position of the prompt once, over the
// prompt's length (mean pooling).
void StepScheduler::finish_embedding(Sequence& seq) {
  const int n = seq.prompt_size();
  std::vector<double> sum;
  int covered = 0;
  size_t width = 0;
  for (const auto& [pos, part] : seq.embed_parts) {
    const auto& [rows, values] = part;
    const bool follows = seq.request.embed == Pooling::kLast || pos == covered;
    if (!follows || (width != 0 && values.size() != width)) break;
    if (sum.empty()) sum.assign(values.size(), 0.0);
    width = values.size();
    for (size_t c = 0; c < width; ++c) sum[c] += values[c];
    covered = pos + rows;
  }
  if (covered != n || width == 0) {
    fail_sequence(seq, absl::InternalError(absl::StrCat(
                           "the last stage pooled positions up to ", covered,
                           " of the prompt's ", n, " for its embedding")));
    return;
  }
  const Clock::time_point now = Clock::now();
  SequenceEvent e;
  e.kind = SequenceEvent::Kind::kDone;
  e.finish = FinishReason::kStop;
  const double divide = seq.request.embed == Pooling::kMean ? n : 1;
  e.embedding.resize(width);
  for (size_t c = 0; c < width; ++c) e.embedding[c] = static_cast<float>(sum[c] / divide);
  seq.embed_parts.clear();
  SequenceTimings& t = e.timings;
  t.queue_ms = ms_between(seq.submitted, seq.first_sent);
  t.ttft_ms = ms_between(seq.submitted, now);
  t.prefill_ms = ms_between(seq.first_sent, now);
  if (ServingMetrics* m = options_.metrics) {  // take_token counts these at a first token
    m->prompt_tokens.inc(n);
    m->prefix_cache_queries.inc(n);
    m->prefix_cache_hits.inc(seq.cached);
  }
  spdlog::info("request {}: embedded: prompt {} tokens ({} cached), {} pooling, {:.1f} ms in all",
               seq.number, n, seq.cached,
               seq.request.embed == Pooling::kMean ? "mean" : "last",
               ms_between(seq.submitted, now));
  deliver_done(seq, std::move(e), now);
}

void StepScheduler::take_token(Sequence& seq, const v1::SampledToken& token) {
  const Clock::time_point now = Clock::now();
  ServingMetrics* m = options_.metrics;
  if (!seq.sampled) {
    seq.sampled = true;
    seq.first_token = now;
    if (m != nullptr) {
      m->time_to_first_token.observe(seconds_between(seq.submitted, now));
      m->prompt_tokens.inc(seq.prompt_size());
      m->prefix_cache_queries.inc(seq.prompt_size());
      m->prefix_cache_hits.inc(seq.cached);
    }
  } else if (m != nullptr) {
    m->inter_token_latency.observe(seconds_between(seq.last_token, now));
  }
  seq.last_token = now;
  ++seq.generated;
  if (m != nullptr) m->generation_tokens.inc();
  const size_t kept_before = seq.output->ids().size();
  SequenceEvent delta;
  delta.text = seq.output->push(token.id());
  if (seq.output->ids().size() > kept_before) {
    delta.ids.push_back(token.id());
    if (seq.request.logprobs || seq.request.top_logprobs > 0) {
      delta.tokens.push_back(token);
    }
  }
  if (!seq.output->done() && seq.pos + 1 > options_.n_ctx) {
    delta.text += seq.output->end_at_context();
  }
  if (!delta.ids.empty() || !delta.text.empty()) {
    if (!attach_prompt_logprobs(seq, delta)) return;
    seq.handle->push(std::move(delta));
  }
  if (seq.output->done()) {
    finish(seq);
  } else {
    seq.state = Sequence::State::kReady;
  }
}

int64_t StepScheduler::kv_positions() const {
  int64_t n = 0;
  for (const auto& [id, seq] : active_) n += seq->pos;
  return n;
}

std::vector<uint64_t> StepScheduler::take_finished() {
  std::vector<uint64_t> ids;
  for (auto it = active_.begin(); it != active_.end();) {
    if (it->second->state == Sequence::State::kDone &&
        it->second->in_flight == 0) {
      ids.push_back(it->first);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  return ids;
}

}  // namespace strata::coordinator
