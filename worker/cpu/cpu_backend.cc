#include "worker/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/env_switch.h"
#include "worker/embedding_pool.h"
#include "worker/finite_scan.h"
#include "worker/head_picks.h"
#include "worker/trace.h"

namespace strata::worker {

namespace ops = reference::ops;

namespace {
// The widest input of any matmul: n_embd, the attention output, an FFN's
// (dense, expert or shared) hidden width.
int64_t max_matmul_in(const arch::Hyperparameters& hp) {
  return std::max({int64_t{hp.n_embd}, int64_t{hp.n_head} * hp.head_dim_v, int64_t{hp.n_ff},
                   int64_t{hp.moe.n_ff_expert}, int64_t{hp.moe.n_ff_shared}});
}

// STRATA_PIN=1 pins the pool's workers to CPUs (thread_pool.h).
ThreadPool::Pinning pinning_from_env() {
  return kernels::env_switch("STRATA_PIN") == true ? ThreadPool::Pinning::kWorkers
                                                    : ThreadPool::Pinning::kNone;
}
}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> make_cpu_backend(
    std::shared_ptr<const gguf::GgufModel> model,
    const arch::Hyperparameters& hp, BlockRange range,
    const CpuBackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("no model");
  if (options.max_batch < 1 || options.max_batch > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch ", options.max_batch, " is out of range [1, 65536]"));
  }
  if (options.n_threads < 1 || options.n_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_threads ", options.n_threads, " is out of range [1, 1024]"));
  }
  if (options.kv_type != GgmlType::kF16 && options.kv_type != GgmlType::kF32) {
    return absl::InvalidArgumentError("KV cache type must be F16 or F32");
  }
  absl::StatusOr<std::unique_ptr<ShardWeights>> weights =
      load_shard_weights(*model, hp, range);
  if (!weights.ok()) return weights.status();
  // Generated kernels unless STRATA_JIT=0; the tier from STRATA_ISA or CPUID;
  // tuned (tune cache under ~/.cache/strata) unless STRATA_NO_TUNE=1.
  absl::StatusOr<std::optional<kernels::IsaTier>> selected =
      kernels::engine_isa(options.isa);
  if (!selected.ok()) return selected.status();
  const std::optional<kernels::IsaTier> tier = *selected;
  auto backend = std::unique_ptr<CpuBackend>(new CpuBackend(
      std::move(model), hp, range, options, std::move(*weights)));
  if (tier) {
    absl::Status st = backend->attach_kernels(*tier);
    if (!st.ok()) return st;
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::Status CpuBackend::attach_kernels(kernels::IsaTier tier) {
  simd_attention_ = kernels::simd::attention_supported(attention_shape());
  simd_isa_ = tier;
  simd_ffn_activation_ = kernels::simd::ffn_activation_supported();
  simd_norm_rope_ = kernels::simd::norm_rope_supported();
  if (options_.no_tune || kernels::jit::tuning_disabled_by_env()) {
    return attach_jit_kernels(*w_, tier, kernel_cache_, nullptr, jit_scratch_,
                              pool_, options_.progress);
  }
  kernels::jit::Tuner tuner(tier, options_.n_threads, {});
  absl::Status st = attach_jit_kernels(*w_, tier, kernel_cache_, &tuner,
                                       jit_scratch_, pool_, options_.progress);
  if (!st.ok()) return st;
  if (tuner.measured() > 0) {
    std::fprintf(stderr, "[strata] %s\n", tuner.summary().c_str());
    absl::Status saved = tuner.save();
    if (!saved.ok()) {
      std::fprintf(stderr, "[strata] %s\n", std::string(saved.message()).c_str());
    }
  }
  return absl::OkStatus();
}

void CpuBackend::matmul(const Linear& l, const float* x, int n, float* y) {
  if (l.jit != nullptr) {
    l.jit->run(x, n, y, jit_scratch_, pool_);
  } else {
    ops::matmul(l.w, x, n, y, matmul_scratch_, pool_);
  }
}

CpuBackend::CpuBackend(std::shared_ptr<const gguf::GgufModel> model,
                       const arch::Hyperparameters& hp, BlockRange range,
                       const CpuBackendOptions& options,
                       std::unique_ptr<ShardWeights> weights)
    : model_(std::move(model)),
      hp_(hp),
      range_(range),
      options_(options),
      w_(std::move(weights)),
      pool_(options.n_threads, pinning_from_env()),
      matmul_scratch_(options.max_batch, max_matmul_in(hp), options.n_threads),
      jit_scratch_(options.max_batch, max_matmul_in(hp)) {
  const size_t b = static_cast<size_t>(options.max_batch);
  const size_t e = hp.n_embd;
  const size_t q_width = static_cast<size_t>(hp.n_head) * hp.head_dim_k;
  const size_t k_width = static_cast<size_t>(hp.n_head_kv) * hp.head_dim_k;
  const size_t v_width = static_cast<size_t>(hp.n_head_kv) * hp.head_dim_v;
  positions_.resize(b);
  x_.resize(b * e);
  xn_.resize(b * e);
  q_.resize(b * q_width);
  k_.resize(b * k_width);
  v_.resize(b * v_width);
  // q|k|v and gate|up come from one matrix each when the family fuses
  // them or attach_jit_kernels fused them at load.
  qkv_.resize(b * (q_width + k_width + v_width));
  attn_.resize(b * static_cast<size_t>(hp.n_head) * hp.head_dim_v);
  proj_.resize(b * e);
  const size_t ff = static_cast<size_t>(
      std::max({hp.n_ff, hp.moe.n_ff_expert, hp.moe.n_ff_shared}));
  gate_.resize(b * ff * 2);
  up_.resize(b * ff);
  if (hp.moe.n_expert > 0) {
    const size_t n_expert = static_cast<size_t>(hp.moe.n_expert);
    const size_t k = static_cast<size_t>(hp.moe.n_expert_used);
    router_logits_.resize(b * n_expert);
    route_experts_.resize(b * k);
    route_weights_.resize(b * k);
    route_scratch_.resize(2 * n_expert);
    expert_begin_.resize(n_expert + 1);
    expert_fill_.resize(n_expert);
    expert_slots_.resize(b * k);
    moe_x_.resize(b * e);
    moe_y_.resize(b * e);
    expert_out_.resize(static_cast<size_t>(moe_block_rows(options.max_batch, hp.moe.n_expert_used, options.moe_max_slots)) * k * e);
  }
  for (RopeTable& t : rope_tables_) t.cs.resize(b * static_cast<size_t>(hp.n_rot));
  step_slices_.reserve(b);
  head_rows_.reserve(b);
  decode_slices_.reserve(b);
}

kernels::AttentionParams CpuBackend::attention_shape() const {
  kernels::AttentionParams a;
  a.n_head = hp_.n_head;
  a.n_head_kv = hp_.n_head_kv;
  a.head_dim_k = hp_.head_dim_k;
  a.head_dim_v = hp_.head_dim_v;
  return a;
}

absl::Status CpuBackend::add_sequence(int seq, int n_ctx) {
  if (sequences_.count(seq) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " exists"));
  }
  KvCacheShape shape;
  shape.n_layer = range_.last - range_.first;
  shape.n_ctx = n_ctx;
  shape.n_head_kv = hp_.n_head_kv;
  shape.head_dim_k = hp_.head_dim_k;
  shape.head_dim_v = hp_.head_dim_v;
  shape.type = options_.kv_type;
  absl::StatusOr<std::unique_ptr<KvCache>> cache = KvCache::create(shape);
  if (!cache.ok()) return cache.status();
  if (simd_attention_) {
    if (simd_attention_buffers_ == nullptr || simd_attention_buffers_->max_kv() < n_ctx) {
      simd_attention_buffers_ = std::make_unique<kernels::simd::AttentionBuffers>(
          n_ctx, attention_shape(), options_.n_threads, simd_isa_);
      serial_attention_.clear();
      if (options_.n_threads > 1) {
        for (int t = 0; t < options_.n_threads; ++t) {
          serial_attention_.push_back(
              std::make_unique<SerialAttention>(n_ctx, attention_shape(), simd_isa_));
        }
      }
    }
  } else if (attention_scratch_ == nullptr || attention_scratch_->max_kv() < n_ctx) {
    attention_scratch_ = std::make_unique<ops::AttentionScratch>(
        n_ctx, attention_shape(), options_.n_threads);
  }
  sequences_[seq] = std::move(*cache);
  return absl::OkStatus();
}

absl::Status CpuBackend::remove_sequence(int seq) {
  if (sequences_.erase(seq) == 0) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CpuBackend::sequence_length(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return it->second->length();
}

absl::StatusOr<int> CpuBackend::sequence_context(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return it->second->n_ctx();
}

absl::Status CpuBackend::truncate_sequence(int seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  if (n < 0 || n > it->second->length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq, ": cannot truncate to ", n,
                     " of ", it->second->length(), " positions"));
  }
  it->second->truncate(n);
  return absl::OkStatus();
}

int64_t CpuBackend::kv_row_bytes() const {
  const int64_t elem = options_.kv_type == GgmlType::kF16 ? 2 : 4;
  return static_cast<int64_t>(range_.last - range_.first) * hp_.n_head_kv *
         (hp_.head_dim_k + hp_.head_dim_v) * elem;
}

absl::Status CpuBackend::read_kv(int seq, int pos, int n, uint8_t* out) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  if (pos < 0 || n < 0 || pos + n > it->second->length()) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence ", seq, ": rows [", pos, ", ", pos + n,
                     ") are outside its ", it->second->length(), " positions"));
  }
  it->second->read_rows(pos, n, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::append_kv(int seq, int n, const uint8_t* in) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  KvCache& cache = *it->second;
  if (n < 0 || cache.length() + n > cache.n_ctx()) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence ", seq, ": ", cache.length(), " + ", n,
                     " positions exceed the context of ", cache.n_ctx()));
  }
  cache.write_rows(cache.length(), n, in);
  cache.advance(n);
  return absl::OkStatus();
}

absl::StatusOr<std::pair<int, int>> CpuBackend::extent(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return std::pair<int, int>{it->second->length(), it->second->n_ctx()};
}

absl::Status CpuBackend::forward(const ForwardRequest& req,
                                 ForwardResult* result) {
  ForwardSlice single;
  const absl::StatusOr<CheckedStep> step = check_forward(
      req, StepShape{is_first(), hp_.n_embd, options_.max_batch, w_->n_vocab},
      [this](int seq) { return extent(seq); }, &single);
  if (!step.ok()) return step.status();
  const int64_t e = hp_.n_embd;
  const int64_t n64 = step->rows;
  const int n = static_cast<int>(n64);
  step_slices_.clear();
  int row = 0;
  for (const ForwardSlice& s : step->slices) {
    KvCache& cache = *sequences_.find(s.seq)->second;
    step_slices_.push_back(StepSlice{s.seq, &cache, row, s.rows, cache.length(), s.logits});
    row += s.rows;
  }

  for (const StepSlice& s : step_slices_) {
    for (int t = 0; t < s.rows; ++t) positions_[s.row0 + t] = s.pos0 + t;
  }
  ++step_;  // new positions: the RoPE tables of the last step are stale
  // x: [n][n_embd], the embeddings or the previous stage's output.
  if (is_first()) {
    ops::embedding_lookup(w_->token_embd, req.tokens.data(), n, x_.data(),
                          pool_);
    if (hp_.recipe.embedding_scale != 1.0f) {
      ops::scale(x_.data(), n * e, hp_.recipe.embedding_scale);
    }
  } else {
    std::copy(req.hidden.begin(), req.hidden.end(), x_.begin());
  }
  const bool gemma = hp_.family == arch::Family::kGemma2 ||
                     hp_.family == arch::Family::kGemma3;
  for (int il = range_.first; il < range_.last; ++il) {
    if (gemma) {
      gemma_block(il, n);
    } else {
      llama_block(il, n);
    }
    if (req.block_hashes) append_row_hashes(x_.data(), n, e, req.block_hashes);
  }
  // A NaN or Inf weight (or an activation that overflowed) spreads through
  // every later block: refuse to pass it on, naming this stage's blocks, so
  // that every split of a model fails alike and a sampler never draws from
  // NaN logits. n x n_embd floats: nothing beside a step. (The caches'
  // lengths are not advanced: nothing is changed.)
  if (const int64_t i = first_not_finite(x_.data(), n64 * e); i < n64 * e) {
    return absl::InternalError(absl::StrCat(
        "blocks [", range_.first, ", ", range_.last, "): hidden row ", i / e, " column ",
        i % e, " is not finite (", x_[i],
        "): the model's weights hold a NaN or Inf, or its activations overflow"));
  }

  result->n_rows = n;
  result->hidden = {};
  result->logits = {};
  result->embeddings = {};
  if (!is_last()) {
    for (const StepSlice& s : step_slices_) s.cache->advance(s.rows);
    result->hidden = std::span<const float>(x_.data(), n * e);
    return absl::OkStatus();
  }
  // The rows that get logits, slice after slice.
  head_rows_.clear();
  for (const StepSlice& s : step_slices_) {
    if (s.logits == Logits::kAll) {
      for (int t = 0; t < s.rows; ++t) head_rows_.push_back(s.row0 + t);
    } else if (one_head_row(s.logits)) {
      head_rows_.push_back(s.row0 + s.rows - 1);
    }
  }
  const int rows = static_cast<int>(head_rows_.size());
  picks_.clear();
  if (rows > 0) {
    head(head_rows_);
    // The output norm and head come after the blocks' check: an Inf or NaN
    // there would reach the sampler, which would draw token 0 from NaN
    // logits. One pass over rows x n_vocab floats just written.
    const int64_t n_logits = int64_t{rows} * w_->n_vocab;
    if (const int64_t i = first_not_finite(logits_.data(), n_logits); i < n_logits) {
      return absl::InternalError(absl::StrCat(
          "output head: logit row ", i / w_->n_vocab, " token ", i % w_->n_vocab,
          " is not finite (", logits_[i],
          "): output_norm or the output weights hold a NaN or Inf, or the logits overflow"));
    }
    // The greedy and top-k slices' picks, their rows out of the logits.
    const int64_t kept = take_picked_rows(step->slices, logits_.data(), w_->n_vocab, &picks_);
    result->logits = std::span<const float>(
        logits_.data(), static_cast<size_t>(kept) * w_->n_vocab);
    result->argmax = picks_.argmax;
    result->top_ids = picks_.top_ids;
    result->top_logits = picks_.top_logits;
  }
  // The embedding slices': their rows through the output norm (as head()
  // norms a row), pooled (worker/embedding_pool.h). After head(): xn_ is
  // free again.
  embeddings_.clear();
  for (const StepSlice& s : step_slices_) {
    if (!is_embedding(s.logits)) continue;
    int first = 0;
    const int count = embedding_rows(s.logits, s.rows, &first);
    rms_norm(x_.data() + int64_t{s.row0 + first} * e, w_->output_norm, count, e, xn_.data());
    embeddings_.resize(embeddings_.size() + static_cast<size_t>(e));
    pool_normed_rows(xn_.data(), count, e, s.logits, embeddings_.data() + embeddings_.size() - e);
  }
  const int64_t n_embedded = static_cast<int64_t>(embeddings_.size());
  if (const int64_t i = first_not_finite(embeddings_.data(), n_embedded); i < n_embedded) {
    return absl::InternalError(absl::StrCat(
        "output norm: embedding ", i / e, " column ", i % e, " is not finite (", embeddings_[i],
        "): output_norm holds a NaN or Inf, or the pooled rows overflow"));
  }
  result->embeddings = embeddings_;
  for (const StepSlice& s : step_slices_) s.cache->advance(s.rows);
  return absl::OkStatus();
}

}  // namespace strata::worker
