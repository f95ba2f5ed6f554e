#include "worker/fake_backend.h"

#include "worker/head_picks.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/embedding_pool.h"
#include "worker/trace.h"

namespace strata::worker {
namespace {

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijective mix.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A float in [0, 1) from 24 bits of h.
float unit(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

}  // namespace

FakeBackend::FakeBackend(const FakeBackendOptions& options) : options_(options) {
  hp_.architecture = "fake";
  hp_.n_layer = options.n_layer;
  hp_.n_embd = options.n_embd;
  hp_.n_vocab = options.n_vocab;
  hp_.n_ctx_train = 1 << 20;
}

absl::Status FakeBackend::add_sequence(int seq, int n_ctx) {
  if (n_ctx <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx ", n_ctx, " is not positive"));
  }
  if (!sequences_.emplace(seq, Sequence{n_ctx, {}}).second) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " exists"));
  }
  return absl::OkStatus();
}

absl::Status FakeBackend::remove_sequence(int seq) {
  if (sequences_.erase(seq) == 0) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FakeBackend::sequence_length(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return static_cast<int>(it->second.states.size());
}

absl::StatusOr<int> FakeBackend::sequence_context(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.n_ctx;
}

absl::Status FakeBackend::truncate_sequence(int seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  if (n < 0 || n > static_cast<int>(it->second.states.size())) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": cannot truncate to ",
                                                   n, " of ", it->second.states.size(),
                                                   " positions"));
  }
  it->second.states.resize(static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::Status FakeBackend::read_kv(int seq, int pos, int n, uint8_t* out) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  const std::vector<uint64_t>& states = it->second.states;
  if (pos < 0 || n < 0 || pos + n > static_cast<int>(states.size())) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": rows [", pos, ", ", pos + n,
                                              ") are outside its ", states.size(),
                                              " positions"));
  }
  std::memcpy(out, states.data() + pos, static_cast<size_t>(n) * 8);
  return absl::OkStatus();
}

absl::Status FakeBackend::append_kv(int seq, int n, const uint8_t* in) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (n < 0 || static_cast<int>(s.states.size()) + n > s.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": ", s.states.size(), " + ", n,
                                              " positions exceed the context of ", s.n_ctx));
  }
  const size_t old = s.states.size();
  s.states.resize(old + static_cast<size_t>(n));
  std::memcpy(s.states.data() + old, in, static_cast<size_t>(n) * 8);
  return absl::OkStatus();
}

absl::Status FakeBackend::forward(const ForwardRequest& req, ForwardResult* result) {
  const bool first = options_.range.first == 0;
  const bool last = options_.range.last == options_.n_layer;
  const int64_t e = options_.n_embd;
  ForwardSlice single;
  const absl::StatusOr<CheckedStep> step = check_forward(
      req, StepShape{first, e, options_.max_batch, options_.n_vocab},
      [this](int seq) -> absl::StatusOr<std::pair<int, int>> {
        auto it = sequences_.find(seq);
        if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
        return std::pair<int, int>{static_cast<int>(it->second.states.size()), it->second.n_ctx};
      },
      &single);
  if (!step.ok()) return step.status();
  const int64_t n = step->rows;
  const std::span<const ForwardSlice> slices = step->slices;

  hidden_.resize(static_cast<size_t>(n * e));
  logits_.clear();
  embeddings_.clear();
  const uint64_t salt = mix((uint64_t(options_.range.first) << 32) | options_.range.last);
  int64_t row = 0;
  for (const ForwardSlice& s : slices) {
    Sequence& seq = sequences_[s.seq];
    for (int t = 0; t < s.rows; ++t, ++row) {
      const uint64_t input =
          first ? static_cast<uint64_t>(req.tokens[row])
                : fnv1a64(req.hidden.data() + row * e, static_cast<size_t>(e) * sizeof(float));
      const uint64_t prev = seq.states.empty() ? salt : seq.states.back();
      const uint64_t state = mix(prev ^ mix(input + 0x51ed27ull * seq.states.size()));
      seq.states.push_back(state);
      for (int64_t c = 0; c < e; ++c) {
        hidden_[row * e + c] = 2.0f * unit(mix(state + static_cast<uint64_t>(c))) - 1.0f;
      }
      const bool logits = last && (s.logits == Logits::kAll ||
                                   (one_head_row(s.logits) && t == s.rows - 1));
      if (logits) {
        for (int v = 0; v < options_.n_vocab; ++v) {
          logits_.push_back(unit(mix(state ^ (0xa5a5ull + static_cast<uint64_t>(v)))));
        }
      }
    }
    // Embeddings: the slice's hidden rows pooled as a real backend pools
    // its normed rows.
    if (last && is_embedding(s.logits)) {
      int first_row = 0;
      const int count = embedding_rows(s.logits, s.rows, &first_row);
      embeddings_.resize(embeddings_.size() + static_cast<size_t>(e));
      pool_normed_rows(hidden_.data() + (row - s.rows + first_row) * e, count, e, s.logits,
                       embeddings_.data() + embeddings_.size() - e);
    }
  }
  if (req.block_hashes != nullptr) {  // [n_blocks][n], as the cpu backend
    for (int b = options_.range.first; b < options_.range.last; ++b) {
      append_row_hashes(hidden_.data(), static_cast<int>(n), e, req.block_hashes);
    }
  }
  if (options_.record_calls) calls_.emplace_back(slices.begin(), slices.end());
  result->n_rows = static_cast<int>(n);
  result->hidden = last ? std::span<const float>() : std::span<const float>(hidden_);
  picks_.clear();
  int64_t kept = 0;
  if (last) {
    kept = take_picked_rows(slices, logits_.data(), options_.n_vocab, &picks_);
  }
  result->logits = last ? std::span<const float>(logits_.data(), static_cast<size_t>(kept) *
                                                                     options_.n_vocab)
                        : std::span<const float>();
  result->argmax = picks_.argmax;
  result->top_ids = picks_.top_ids;
  result->top_logits = picks_.top_logits;
  result->embeddings = embeddings_;
  return absl::OkStatus();
}

}  // namespace strata::worker
