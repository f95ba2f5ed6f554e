// The Stage over a Backend (cpu, or a fake in tests). run() checks the
// whole micro-batch first (check()), then creates the new sequences (the
// only step that may fail for want of memory, undone on failure), then runs
// every slice through the backend in one forward() (each weight matrix once
// over all the micro-batch's rows), and commits the per-sequence state (new
// sequences, samplers) only after it ran, so an error leaves the stage as
// it was.
#include "worker/stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar.h"
#include "model/grammar/vocabulary_table.h"
#include "worker/fake_backend.h"
#include "worker/finite_scan.h"
#include "worker/head_picks.h"
#include "worker/make_backend.h"
#include "worker/prefix_store.h"
#include "worker/sampler.h"
#include "worker/shard_plan.h"
#include "worker/stage_sampling.h"

namespace strata::worker {

namespace {

constexpr size_t kMaxGrammarBytes = 64 * 1024;  // SequenceSlice.grammar

std::string slice_field(int i, absl::string_view member) {
  return absl::StrCat("slices[", i, "]", member.empty() ? "" : ".", member);
}

class BackendStage final : public Stage {
 public:
  BackendStage(ShardPlan plan, std::unique_ptr<Backend> backend,
           const StageOptions& options)
      : info_(std::move(plan.info)),
        backend_(std::move(backend)),
        name_(options.worker_name),
        trace_(plan.trace),
        first_(info_.embedding()),
        last_(info_.head()),
        n_embd_(info_.n_embd()),
        n_vocab_(backend_->n_vocab()) {
    info_.set_n_vocab(n_vocab_);
    if (info_.prefix_cache_blocks() > 0 && backend_->kv_row_bytes() > 0) {
      store_ = std::make_unique<PrefixStore>(info_.prefix_cache_blocks(),
                                             info_.prefix_block_tokens(),
                                             backend_->kv_row_bytes());
    } else {
      info_.set_prefix_cache_blocks(0);
      info_.set_prefix_block_tokens(0);
    }
    if (!first_) {
      hidden_in_.resize(static_cast<size_t>(info_.max_batch_rows()) * n_embd_);
    }
    if (last_) {
      order_.resize(static_cast<size_t>(n_vocab_));
      auto vocab = grammar_vocabulary(plan.model.get(), n_vocab_);
      if (vocab.ok()) {
        vocab_ = *std::move(vocab);
      } else {
        vocab_error_ = std::string(vocab.status().message());
      }
    }
  }

  const v1::ShardInfo& shard() const override { return info_; }
  int live_sequences() const override {
    return static_cast<int>(sequences_.size());
  }

  absl::Status run(const v1::MicroBatch& batch, v1::MicroBatch* next,
                   v1::MicroBatchResult* result) override;
  int free_sequences(const uint64_t* seq_ids, int n) override;

 private:
  struct Sequence {
    int backend_seq = 0;
    std::unique_ptr<Sampler> sampler;  // last stage: made at start_pos 0
    std::vector<int32_t> tokens;       // with a prefix store: every position's
    // Last stage, with a grammar: the generated tokens so far through it.
    std::unique_ptr<grammar::GrammarMatcher> matcher;
    // Not OK: the sequence failed here (its grammar); each sampled slice
    // answers with this error.
    absl::Status failed;
    // Last stage: positions from here on were generated on an earlier
    // pipeline (SequenceSlice.generated_from; 0: none, or the replay ended
    // with the first token sampled here), and the positions the sampler
    // has seen.
    int generated_from = 0;
    int length = 0;
  };
  // What run() does to one slice, decided by check().
  struct SliceRun {
    int backend_seq = -1;
    bool is_new = false;      // created by this batch
    bool restart = false;     // existed, start_pos 0: emptied first
    int old_length = 0;       // positions before the batch (for undo)
    int64_t first_row = 0;    // of the batch's rows
    bool starts = false;      // start_pos 0, or restores cached blocks
    SamplingParams sampling;  // valid when starts
    std::vector<int32_t> restored;  // the restored blocks' tokens
    // starts on the last stage: the parsed grammar, or its error.
    std::shared_ptr<const grammar::Grammar> grammar;
    absl::Status grammar_error;
  };

  absl::Status check(const v1::MicroBatch& batch);
  absl::Status check_prefix(const v1::SequenceSlice& s, int i);
  absl::Status restore(const v1::SequenceSlice& s, SliceRun& run);
  void save(const v1::MicroBatch& batch);
  void clear_saves(const v1::MicroBatch& batch);
  absl::Status create_sequences(const v1::MicroBatch& batch);
  void undo(const v1::MicroBatch& batch, size_t ran);
  int new_backend_seq();
  void add_sampled(const v1::SequenceSlice& slice,
                   std::span<const float> logits, Sequence& seq,
                   v1::MicroBatchResult* result);
  ForwardSlice head_request(const v1::SequenceSlice& s, const SliceRun& run) const;
  v1::SampledToken* add_token(const v1::SequenceSlice& slice, int32_t id, const Sequence& seq,
                              v1::MicroBatchResult* result);

  v1::ShardInfo info_;
  std::unique_ptr<Backend> backend_;
  std::string name_;
  bool trace_;
  bool first_;
  bool last_;
  int n_embd_;
  int n_vocab_;
  std::map<uint64_t, Sequence> sequences_;
  int next_backend_seq_ = 0;
  std::unique_ptr<PrefixStore> store_;  // null: no prefix cache

  // Reused across batches (grown, never shrunk).
  std::vector<SliceRun> runs_;                 // [slices]
  std::vector<std::pair<uint64_t, int>> ids_;  // [slices] (seq_id, index)
  std::vector<float> hidden_in_;  // [max_batch_rows][n_embd] decoded input
  std::vector<uint64_t> hashes_;  // [blocks][rows] of the micro-batch
  std::vector<ForwardSlice> slices_;  // [slices] of the micro-batch
  std::vector<int32_t> tokens_;       // [rows] first stage: slice after slice
  std::vector<int32_t> order_;    // [n_vocab] ids for top_logprobs
  // Last stage: the vocabulary for grammars, shared by every sequence's
  // matcher (null, with the reason, when the model has no tokenizer).
  std::shared_ptr<const grammar::TokenTable> vocab_;
  std::string vocab_error_;
  grammar::TokenMask mask_;  // [ceil(n_vocab / 64)] reused
};

absl::Status BackendStage::check(const v1::MicroBatch& batch) {
  if (batch.shard_id() != info_.shard_id()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_id: ", batch.shard_id(),
                     ", but the loaded shard "
                     "is ",
                     info_.shard_id()));
  }
  const int n = batch.slices_size();
  if (n < 1) return absl::InvalidArgumentError("slices: none");
  if (n > info_.max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slices: ", n, " exceed max_sequences ", info_.max_sequences()));
  }
  ids_.clear();
  for (int i = 0; i < n; ++i) ids_.emplace_back(batch.slices(i).seq_id(), i);
  std::sort(ids_.begin(), ids_.end());
  for (size_t i = 1; i < ids_.size(); ++i) {
    if (ids_[i].first == ids_[i - 1].first) {
      return absl::InvalidArgumentError(absl::StrCat(
          slice_field(ids_[i].second, "seq_id"), ": ", ids_[i].first,
          " repeats slices[", ids_[i - 1].second, "]"));
    }
  }

  runs_.assign(static_cast<size_t>(n), SliceRun{});
  const int max_rows = info_.max_batch_rows();
  int64_t total = 0;
  int64_t scored_rows = 0;  // rows of slices with prompt_logprobs
  int new_sequences = 0;
  for (int i = 0; i < n; ++i) {
    const v1::SequenceSlice& s = batch.slices(i);
    SliceRun& run = runs_[i];
    const int rows = s.tokens_size();
    if (rows < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(slice_field(i, "tokens"), ": empty"));
    }
    if (rows > max_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(slice_field(i, "tokens"), ": ", rows,
                       " rows exceed max_batch_rows ", max_rows));
    }
    for (int j = 0; j < rows; ++j) {
      const int32_t t = s.tokens(j);
      if (t < 0 || t >= n_vocab_) {
        return absl::InvalidArgumentError(
            absl::StrCat(slice_field(i, "tokens"), "[", j, "]: id ", t,
                         " is outside the vocabulary [0, ", n_vocab_, ")"));
      }
    }
    run.first_row = total;
    total += rows;
    if (s.has_prompt_logprobs()) scored_rows += rows;
    if (s.start_pos() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          slice_field(i, "start_pos"), ": ", s.start_pos(), " is negative"));
    }
    if (absl::Status st = check_prefix(s, i); !st.ok()) return st;
    run.starts = s.start_pos() == 0 || s.restore_blocks_size() > 0;
    auto it = sequences_.find(s.seq_id());
    if (!run.starts) {
      if (it == sequences_.end()) {
        return absl::NotFoundError(
            absl::StrCat(slice_field(i, "seq_id"), ": sequence ", s.seq_id(),
                         " is unknown here (start_pos ", s.start_pos(),
                         "; a sequence starts at start_pos 0)"));
      }
      absl::StatusOr<int> length =
          backend_->sequence_length(it->second.backend_seq);
      if (!length.ok()) return length.status();
      // The message does not say where the sequence ends: seq_id is the
      // caller's claim, and the sequence may be another client's.
      if (s.start_pos() != *length) {
        return absl::InvalidArgumentError(absl::StrCat(
            slice_field(i, "start_pos"), ": ", s.start_pos(),
            " is not where sequence ", s.seq_id(), " ends here"));
      }
      run.backend_seq = it->second.backend_seq;
      run.old_length = *length;
    } else if (it == sequences_.end()) {
      run.is_new = true;
      ++new_sequences;
    } else {
      run.restart = true;
      run.backend_seq = it->second.backend_seq;
      absl::StatusOr<int> length =
          backend_->sequence_length(it->second.backend_seq);
      if (!length.ok()) return length.status();
      run.old_length = *length;
    }
    if (int64_t{s.start_pos()} + rows > info_.n_ctx()) {
      return absl::OutOfRangeError(
          absl::StrCat(slice_field(i, ""), ": start_pos ", s.start_pos(), " + ",
                       rows, " rows exceed n_ctx ", info_.n_ctx()));
    }
    if (s.generated_from() != 0 &&
        (!run.starts || s.generated_from() < 1 ||
         s.generated_from() > info_.n_ctx())) {
      return absl::InvalidArgumentError(absl::StrCat(
          slice_field(i, "generated_from"), ": ", s.generated_from(),
          run.starts ? absl::StrCat(" is out of range [1, n_ctx ", info_.n_ctx(), "]")
                     : " on a slice that does not start its sequence"));
    }
    if (run.starts) {
      if (absl::Status st =
              to_sampling_params(s.sampling(), n_vocab_,
                                 slice_field(i, "sampling"), &run.sampling);
          !st.ok()) {
        return st;
      }
      // A bad grammar fails only its sequence (at its sampled slice).
      if (last_ && !s.grammar().empty()) {
        const std::string field = slice_field(i, "grammar");
        if (s.grammar().size() > kMaxGrammarBytes) {
          run.grammar_error = absl::InvalidArgumentError(
              absl::StrCat(field, ": ", s.grammar().size(), " bytes exceed ", kMaxGrammarBytes));
        } else if (vocab_ == nullptr) {
          run.grammar_error = absl::FailedPreconditionError(absl::StrCat(
              field, ": this stage cannot apply grammars: ", vocab_error_));
        } else {
          auto g = grammar::parse_gbnf(s.grammar());
          if (g.ok()) {
            run.grammar = *std::move(g);
          } else {
            run.grammar_error = absl::InvalidArgumentError(
                absl::StrCat(field, ": ", g.status().message()));
          }
        }
      }
    }
    if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat(slice_field(i, "top_logprobs"), ": ", s.top_logprobs(),
                       " is out of range [0, ", kMaxTopLogprobs, "]"));
    }
    if (s.has_prompt_logprobs() &&
        (s.prompt_logprobs() < 0 || s.prompt_logprobs() > kMaxTopLogprobs)) {
      return absl::InvalidArgumentError(
          absl::StrCat(slice_field(i, "prompt_logprobs"), ": ", s.prompt_logprobs(),
                       " is out of range [0, ", kMaxTopLogprobs, "]"));
    }
    if (s.embed() != v1::EMBED_NONE) {
      if (!v1::EmbedRows_IsValid(s.embed())) {
        return absl::InvalidArgumentError(
            absl::StrCat(slice_field(i, "embed"), ": ", static_cast<int>(s.embed()),
                         " is not EMBED_NONE, EMBED_LAST or EMBED_SUM"));
      }
      if (s.sample() || s.has_prompt_logprobs()) {
        return absl::InvalidArgumentError(absl::StrCat(
            slice_field(i, "embed"), ": not with sample or prompt_logprobs (an embedding slice "
                                     "gets no logits)"));
      }
    }
    if (last_ && s.has_next_token() && (s.next_token() < 0 || s.next_token() >= n_vocab_)) {
      return absl::InvalidArgumentError(
          absl::StrCat(slice_field(i, "next_token"), ": ", s.next_token(),
                       " is out of range [0, ", n_vocab_, ")"));
    }
  }
  if (total > max_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slices: ", total, " rows in all exceed max_batch_rows ", max_rows));
  }
  if (scored_rows > kMaxScoredRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slices: ", scored_rows, " rows of scored slices (prompt_logprobs) exceed ",
        kMaxScoredRows));
  }
  const size_t bytes = batch.hidden().size();
  if (first_) {
    if (bytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("hidden: ", bytes,
                       " bytes on the first stage, which embeds the "
                       "tokens (expected none)"));
    }
  } else {
    const size_t expected = static_cast<size_t>(total) * n_embd_ * 4;
    if (bytes != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("hidden: ", bytes, " bytes, expected ", expected, " (",
                       total, " rows x n_embd ", n_embd_, " x 4 bytes)"));
    }
    // f32 little-endian (the only byte order supported), decoded into an
    // aligned buffer; every value must be finite.
    std::memcpy(hidden_in_.data(), batch.hidden().data(), bytes);
    const int64_t count = int64_t{total} * n_embd_;
    if (const int64_t k = first_not_finite(hidden_in_.data(), count); k < count) {
      return absl::InvalidArgumentError(
          absl::StrCat("hidden: row ", k / n_embd_, " column ", k % n_embd_,
                       " is not finite (", hidden_in_[k], ")"));
    }
  }
  if (live_sequences() + new_sequences > info_.max_sequences()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "slices: ", new_sequences, " new sequences with ", live_sequences(),
        " live exceed max_sequences ", info_.max_sequences()));
  }
  return absl::OkStatus();
}

int BackendStage::new_backend_seq() {
  // Backend sequence ids are ints; proto ids are uint64. Hand out unused
  // ints in turn (at most max_sequences are live).
  for (;;) {
    const int id = next_backend_seq_;
    next_backend_seq_ = next_backend_seq_ == std::numeric_limits<int>::max()
                            ? 0
                            : next_backend_seq_ + 1;
    if (!backend_->sequence_length(id).ok()) return id;
  }
}

absl::Status BackendStage::create_sequences(const v1::MicroBatch& batch) {
  for (size_t i = 0; i < runs_.size(); ++i) {
    SliceRun& run = runs_[i];
    if (!run.is_new) continue;
    run.backend_seq = new_backend_seq();
    if (absl::Status st =
            backend_->add_sequence(run.backend_seq, info_.n_ctx());
        !st.ok()) {
      for (size_t j = 0; j < i; ++j) {
        if (runs_[j].is_new)
          (void)backend_->remove_sequence(runs_[j].backend_seq);
      }
      return absl::Status(
          st.code(),
          absl::StrCat(slice_field(static_cast<int>(i), ""), ": sequence ",
                       batch.slices(static_cast<int>(i)).seq_id(), ": ",
                       st.message()));
    }
  }
  return absl::OkStatus();
}

// Undoes the first `ran` slices' forward passes and every new sequence. A
// restarted sequence cannot get its old positions back: it is freed.
void BackendStage::undo(const v1::MicroBatch& batch, size_t ran) {
  for (size_t i = 0; i < runs_.size(); ++i) {
    const SliceRun& run = runs_[i];
    if (run.is_new) {
      (void)backend_->remove_sequence(run.backend_seq);
    } else if (run.restart) {
      if (i < ran) {
        (void)backend_->remove_sequence(run.backend_seq);
        sequences_.erase(batch.slices(static_cast<int>(i)).seq_id());
      }
    } else if (i < ran) {
      (void)backend_->truncate_sequence(run.backend_seq, run.old_length);
    }
  }
}

absl::Status BackendStage::run(const v1::MicroBatch& batch, v1::MicroBatch* next,
                           v1::MicroBatchResult* result) {
  result->Clear();
  result->set_batch_id(batch.batch_id());
  result->set_shard_id(info_.shard_id());
  if (absl::Status st = check(batch); !st.ok()) {
    clear_saves(batch);
    return st;
  }
  if (absl::Status st = create_sequences(batch); !st.ok()) {
    clear_saves(batch);
    return st;
  }

  const bool trace = trace_ && batch.trace();
  const int n = batch.slices_size();
  int64_t total_rows = 0;
  for (int i = 0; i < n; ++i) total_rows += batch.slices(i).tokens_size();
  if (!last_) {
    next->Clear();
    next->set_shard_id(batch.shard_id());
    next->set_batch_id(batch.batch_id());
    next->set_trace(batch.trace());
    *next->mutable_slices() = batch.slices();
    next->mutable_hidden()->resize(static_cast<size_t>(total_rows) * n_embd_ *
                                   sizeof(float));
  }

  // One forward() for every slice: each weight matrix runs once over all
  // the micro-batch's rows (worker/backend.h).
  slices_.clear();
  tokens_.clear();
  for (int i = 0; i < n; ++i) {
    const v1::SequenceSlice& s = batch.slices(i);
    SliceRun& run = runs_[i];
    if (run.restart) {
      (void)backend_->truncate_sequence(run.backend_seq, 0);
    }
    if (s.restore_blocks_size() > 0) {
      if (absl::Status st = restore(s, runs_[i]); !st.ok()) {
        undo(batch, static_cast<size_t>(n));
        clear_saves(batch);
        result->Clear();
        result->set_batch_id(batch.batch_id());
        return absl::InternalError(absl::StrCat(slice_field(i, "restore_blocks"), ": ",
                                                st.message()));
      }
    }
    if (last_ && s.has_prompt_logprobs()) {
      // Scored: every row's logits (the last one's also samples).
      slices_.push_back(ForwardSlice{run.backend_seq, s.tokens_size(), Logits::kAll});
    } else if (last_ && s.embed() != v1::EMBED_NONE) {
      slices_.push_back(ForwardSlice{run.backend_seq, s.tokens_size(),
                                     s.embed() == v1::EMBED_LAST ? Logits::kEmbedLast
                                                                 : Logits::kEmbedSum});
    } else {
      slices_.push_back(last_ && s.sample()
                            ? head_request(s, run)
                            : ForwardSlice{run.backend_seq, s.tokens_size(), Logits::kNone});
    }
    if (first_) tokens_.insert(tokens_.end(), s.tokens().begin(), s.tokens().end());
  }
  ForwardRequest req;
  req.slices = slices_;
  if (first_) {
    req.tokens = tokens_;
  } else {
    req.hidden = std::span<const float>(hidden_in_.data(),
                                        static_cast<size_t>(total_rows) * n_embd_);
  }
  hashes_.clear();
  if (trace) req.block_hashes = &hashes_;
  ForwardResult out;
  if (absl::Status st = backend_->forward(req, &out); !st.ok()) {
    undo(batch, static_cast<size_t>(n));
    clear_saves(batch);
    result->Clear();
    result->set_batch_id(batch.batch_id());
    return absl::InternalError(absl::StrCat("slices: ", st.message()));
  }
  if (!last_) {
    std::memcpy(next->mutable_hidden()->data(), out.hidden.data(),
                out.hidden.size() * sizeof(float));
  }
  // Last stage: [n_logits][n_vocab] for the sampling slices that asked for
  // logits, in order, a pick for each that asked for one, top_k candidates
  // for each that asked for them (valid until the backend's next forward()).
  const std::span<const float> logits = out.logits;
  int n_logits = 0, n_picks = 0;
  size_t n_top = 0, n_embedded = 0;
  for (const ForwardSlice& f : slices_) {
    n_logits += static_cast<int>(logits_rows(f));
    n_picks += f.logits == Logits::kArgmax ? 1 : 0;
    n_top += f.logits == Logits::kTopK ? static_cast<size_t>(f.top_k) : 0;
    n_embedded += is_embedding(f.logits) ? 1 : 0;
  }
  if (last_ && (logits.size() != static_cast<size_t>(n_logits) * n_vocab_ ||
                out.argmax.size() != static_cast<size_t>(n_picks) ||
                out.top_ids.size() != n_top || out.top_logits.size() != n_top ||
                out.embeddings.size() != n_embedded * static_cast<size_t>(n_embd_))) {
    undo(batch, static_cast<size_t>(n));
    result->Clear();
    result->set_batch_id(batch.batch_id());
    clear_saves(batch);
    return absl::InternalError(absl::StrCat(
        "the backend gave ", logits.size(), " logits, ", out.argmax.size(), " picks, ",
        out.top_ids.size(), " candidates and ", out.embeddings.size(), " embedding values for ",
        n_logits, " rows, ", n_picks, " picks, ", n_top, " candidates and ", n_embedded,
        " embeddings asked for"));
  }
  // hashes_: [blocks][total_rows], blocks of the shard in order.
  for (int i = 0; i < n && !hashes_.empty(); ++i) {
    const v1::SequenceSlice& s = batch.slices(i);
    const int rows = s.tokens_size();
    const int64_t blocks = static_cast<int64_t>(hashes_.size()) / total_rows;
    for (int64_t b = 0; b < blocks; ++b) {
      for (int t = 0; t < rows; ++t) {
        v1::BlockTrace* tr = result->add_traces();
        tr->set_worker(name_);
        tr->set_seq_id(s.seq_id());
        tr->set_pos(s.start_pos() + t);
        tr->set_block(info_.first_block() + static_cast<int>(b));
        tr->set_hash(hashes_[b * total_rows + runs_[i].first_row + t]);
      }
    }
  }

  // Every slice ran: commit the sequences and, on the last stage, score
  // and sample.
  int64_t logits_row = 0;  // the next slice's first row of `logits`
  int picked = 0;
  size_t top_at = 0;
  size_t embedded = 0;
  for (int i = 0; i < n; ++i) {
    const v1::SequenceSlice& s = batch.slices(i);
    SliceRun& run = runs_[i];
    Sequence& seq = sequences_[s.seq_id()];
    seq.backend_seq = run.backend_seq;
    if (store_) {
      if (run.starts) seq.tokens = run.restored;
      seq.tokens.insert(seq.tokens.end(), s.tokens().begin(), s.tokens().end());
    }
    if (!last_) continue;
    if (run.starts) {
      seq.sampler = std::make_unique<Sampler>(run.sampling, n_vocab_);
      for (int32_t t : run.restored) seq.sampler->accept(t);
      seq.failed = run.grammar_error;
      seq.matcher = run.grammar == nullptr
                        ? nullptr
                        : std::make_unique<grammar::GrammarMatcher>(run.grammar, vocab_);
      seq.generated_from = s.generated_from();
      seq.length = static_cast<int>(run.restored.size());
    }
    for (int32_t t : s.tokens()) {
      // A migrated sequence's generated tokens: the draws and the grammar
      // steps an undisturbed run made for them.
      if (seq.generated_from > 0 && seq.length >= seq.generated_from) {
        seq.sampler->replay_draw();
        if (seq.matcher != nullptr && seq.failed.ok()) {
          if (absl::Status st = seq.matcher->accept(t); !st.ok()) seq.failed = st;
        }
      }
      seq.sampler->accept(t);
      ++seq.length;
    }
    const ForwardSlice& f = slices_[static_cast<size_t>(i)];
    if (f.logits == Logits::kAll) {
      add_prompt_logprobs(s, logits.subspan(static_cast<size_t>(logits_row) * n_vocab_,
                                            static_cast<size_t>(f.rows) * n_vocab_),
                          order_, result);
    }
    logits_row += logits_rows(f);
    if (is_embedding(f.logits)) {
      v1::SliceEmbedding* em = result->add_embeddings();
      em->set_seq_id(s.seq_id());
      em->set_pos(s.start_pos());
      em->set_rows(s.tokens_size());
      const float* v = out.embeddings.data() + embedded++ * static_cast<size_t>(n_embd_);
      em->mutable_values()->Add(v, v + n_embd_);
    }
    if (s.sample()) {
      // The replay ends with the prefill: from here on the sampler draws
      // (and the grammar steps) for each token as it is sampled.
      seq.generated_from = 0;
      if (f.logits == Logits::kArgmax) {
        add_token(s, out.argmax[static_cast<size_t>(picked++)], seq, result);
      } else if (f.logits == Logits::kTopK) {
        const size_t k = static_cast<size_t>(f.top_k);
        add_token(s,
                  seq.failed.ok() ? seq.sampler->sample_top(out.top_ids.subspan(top_at, k),
                                                            out.top_logits.subspan(top_at, k))
                                  : -1,
                  seq, result);
        top_at += k;
      } else {
        // The slice's last row of logits.
        add_sampled(s,
                    logits.subspan(static_cast<size_t>(logits_row - 1) * n_vocab_,
                                   static_cast<size_t>(n_vocab_)),
                    seq, result);
      }
    }
  }
  save(batch);
  return absl::OkStatus();
}

// The prefix fields of slice i (worker.proto): sizes agree, ids are slots,
// a restore names blocks saved under its keys and starts the sequence at
// their end, saves lie within the sequence's length after the slice.
absl::Status BackendStage::check_prefix(const v1::SequenceSlice& s, int i) {
  if (s.restore_blocks_size() == 0 && s.restore_keys_size() == 0 &&
      s.save_blocks_size() == 0 && s.save_keys_size() == 0 &&
      s.save_block_index_size() == 0) {
    return absl::OkStatus();
  }
  if (s.restore_keys_size() != s.restore_blocks_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(slice_field(i, "restore_keys"), ": ", s.restore_keys_size(),
                     " keys for ", s.restore_blocks_size(), " restore_blocks"));
  }
  if (s.save_keys_size() != s.save_blocks_size() ||
      s.save_block_index_size() != s.save_blocks_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        slice_field(i, "save_keys"), ": ", s.save_keys_size(), " keys and ",
        s.save_block_index_size(), " save_block_index for ", s.save_blocks_size(),
        " save_blocks"));
  }
  const std::string restore_field = slice_field(i, "restore_blocks");
  const std::string save_field = slice_field(i, "save_blocks");
  if (!store_) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.restore_blocks_size() > 0 ? restore_field : save_field,
                     ": this shard has no prefix cache (prefix_cache_blocks 0)"));
  }
  const int64_t b = store_->block_tokens();
  for (int j = 0; j < s.restore_blocks_size(); ++j) {
    if (absl::Status st = store_->check_restore(s.restore_blocks(j), s.restore_keys(j),
                                                absl::StrCat(restore_field, "[", j, "]"));
        !st.ok()) {
      return st;
    }
  }
  if (s.restore_blocks_size() > 0 && s.start_pos() != s.restore_blocks_size() * b) {
    return absl::InvalidArgumentError(absl::StrCat(
        slice_field(i, "start_pos"), ": ", s.start_pos(), ", but ", s.restore_blocks_size(),
        " restored blocks of ", b, " tokens end at ", s.restore_blocks_size() * b));
  }
  const int64_t end = int64_t{s.start_pos()} + s.tokens_size();
  for (int j = 0; j < s.save_blocks_size(); ++j) {
    const std::string field = absl::StrCat(save_field, "[", j, "]");
    if (absl::Status st = store_->check_id(s.save_blocks(j), field); !st.ok()) return st;
    const int64_t index = s.save_block_index(j);
    if (index < 0 || (index + 1) * b > end) {
      return absl::InvalidArgumentError(absl::StrCat(
          slice_field(i, "save_block_index"), "[", j, "]: block ", index,
          " is not within the sequence's ", end, " positions after the slice"));
    }
  }
  return absl::OkStatus();
}

// Copies the slice's cached blocks into its (new or emptied) sequence.
absl::Status BackendStage::restore(const v1::SequenceSlice& s, SliceRun& run) {
  run.restored.clear();
  for (int j = 0; j < s.restore_blocks_size(); ++j) {
    const uint32_t id = s.restore_blocks(j);
    if (absl::Status st =
            backend_->append_kv(run.backend_seq, store_->block_tokens(), store_->kv(id));
        !st.ok()) {
      return st;
    }
    const std::span<const int32_t> t = store_->tokens(id);
    run.restored.insert(run.restored.end(), t.begin(), t.end());
  }
  return absl::OkStatus();
}

// After every slice ran and committed: the saves, slice after slice.
void BackendStage::save(const v1::MicroBatch& batch) {
  if (!store_) return;
  const int b = store_->block_tokens();
  for (const v1::SequenceSlice& s : batch.slices()) {
    if (s.save_blocks_size() == 0) continue;
    const Sequence& seq = sequences_[s.seq_id()];
    for (int j = 0; j < s.save_blocks_size(); ++j) {
      const uint32_t id = s.save_blocks(j);
      const int pos = s.save_block_index(j) * b;
      if (!backend_->read_kv(seq.backend_seq, pos, b, store_->begin_save(id)).ok() ||
          seq.tokens.size() < static_cast<size_t>(pos + b)) {
        store_->clear(id);
        continue;
      }
      store_->commit_save(id, s.save_keys(j),
                          std::span<const int32_t>(seq.tokens.data() + pos, static_cast<size_t>(b)));
    }
  }
}

// A micro-batch that failed saves nothing: the slots it named are emptied
// (the coordinator's index already points at them).
void BackendStage::clear_saves(const v1::MicroBatch& batch) {
  if (!store_) return;
  for (const v1::SequenceSlice& s : batch.slices()) {
    for (uint32_t id : s.save_blocks()) {
      if (id < static_cast<uint32_t>(store_->capacity())) store_->clear(id);
    }
  }
}

// What the backend gives slice s's sampler (head_pick), with the sampling
// parameters of its run or its sequence.
ForwardSlice BackendStage::head_request(const v1::SequenceSlice& s, const SliceRun& run) const {
  ForwardSlice f{run.backend_seq, s.tokens_size(), Logits::kLast};
  const bool logprobs = s.logprobs() || s.top_logprobs() > 0;
  if (run.starts) {
    f.logits = head_pick(run.sampling, logprobs || run.grammar != nullptr, n_vocab_, &f.top_k);
    return f;
  }
  auto it = sequences_.find(s.seq_id());
  if (it == sequences_.end() || it->second.sampler == nullptr) return f;
  f.logits = head_pick(it->second.sampler->params(), logprobs || it->second.matcher != nullptr,
                       n_vocab_, &f.top_k);
  return f;
}

v1::SampledToken* BackendStage::add_token(const v1::SequenceSlice& slice, int32_t id,
                                          const Sequence& seq, v1::MicroBatchResult* result) {
  return add_sampled_token(slice, id, seq.failed, name_, result);
}

// Samples the slice's next token (through its grammar, if any; a grammar's
// error fails the sequence) and, when asked, its log-probabilities.
void BackendStage::add_sampled(const v1::SequenceSlice& slice,
                           std::span<const float> logits, Sequence& seq,
                           v1::MicroBatchResult* result) {
  int32_t id = -1;
  if (seq.failed.ok()) {
    if (seq.matcher != nullptr) {
      absl::StatusOr<int32_t> picked =
          sample_with_grammar(logits, *seq.sampler, *seq.matcher, &mask_);
      if (picked.ok()) {
        id = *picked;
      } else {
        seq.failed = picked.status();
      }
    } else {
      id = seq.sampler->sample(logits);
    }
  }
  v1::SampledToken* tok = add_token(slice, id, seq, result);
  if (!seq.failed.ok()) return;
  if (!slice.logprobs() && slice.top_logprobs() == 0) return;
  add_logprobs(logits, slice.top_logprobs(), order_, tok);
}

int BackendStage::free_sequences(const uint64_t* seq_ids, int n) {
  int freed = 0;
  for (int i = 0; i < n; ++i) {
    auto it = sequences_.find(seq_ids[i]);
    if (it == sequences_.end()) continue;
    (void)backend_->remove_sequence(it->second.backend_seq);
    sequences_.erase(it);
    ++freed;
  }
  return freed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Stage>> load_planned_stage(
    ShardPlan plan, int n_threads, const StageOptions& options,
    std::string_view backend_name) {
  if (backend_name == "fake") {
    FakeBackendOptions fake;
    fake.n_layer = plan.hp.n_layer;
    fake.n_embd = plan.hp.n_embd;
    fake.n_vocab = plan.info.n_vocab() > 0 ? plan.info.n_vocab() : 32000;
    fake.range = BlockRange{plan.info.first_block(), plan.info.last_block()};
    fake.max_batch = plan.info.max_batch_rows();
    return make_stage(std::move(plan), std::make_unique<FakeBackend>(fake), options);
  }
  absl::StatusOr<BackendChoice> choice = parse_backend_choice(backend_name);
  if (!choice.ok()) return choice.status();
  CpuBackendOptions backend_options;
  backend_options.n_threads = n_threads;
  backend_options.kv_type = plan.kv_type;
  backend_options.max_batch = plan.info.max_batch_rows();
  backend_options.progress = options.progress;
  auto backend = make_backend(
      *choice, plan.model, plan.hp,
      BlockRange{plan.info.first_block(), plan.info.last_block()},
      backend_options);
  if (!backend.ok()) return backend.status();
  return make_stage(std::move(plan), std::move(*backend), options);
}

std::unique_ptr<Stage> make_stage(ShardPlan plan, std::unique_ptr<Backend> backend,
                                  const StageOptions& options) {
  return std::unique_ptr<Stage>(
      new BackendStage(std::move(plan), std::move(backend), options));
}

absl::StatusOr<std::unique_ptr<Stage>> load_stage(
    const v1::LoadShardRequest& request, int n_threads,
    const StageOptions& options) {
  absl::StatusOr<ShardPlan> plan = plan_shard(request);
  if (!plan.ok()) return plan.status();
  return load_planned_stage(std::move(*plan), n_threads, options);
}

}  // namespace strata::worker
