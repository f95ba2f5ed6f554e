#include "worker/cuda/device_backend.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "model/ggml_type.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/step_kernels.h"
#include "worker/finite_scan.h"
#include "worker/shard_tensors.h"
#include "worker/trace.h"

namespace strata::worker {
namespace {

namespace ck = cuda_kernels;

#define STRATA_RETURN_IF_ERROR(expr)              \
  do {                                            \
    if (absl::Status _st = (expr); !_st.ok()) {   \
      return _st;                                 \
    }                                             \
  } while (0)

#define STRATA_ASSIGN_OR_RETURN(lhs, expr)            \
  do {                                                \
    auto _value_or = (expr);                          \
    if (!_value_or.ok()) return _value_or.status();   \
    lhs = *std::move(_value_or);                      \
  } while (0)

// A weight matrix on the device: its GGUF rows, and the kernels that read
// them (matrix x 1, 2, 4, 8, 16 columns; the embedding's get_rows).
struct DeviceMatrix {
  DeviceBuffer bytes;
  GgmlType type = GgmlType::kF32;
  int n_in = 0;   // elements per row
  int n_out = 0;  // rows
  long long row_bytes = 0;
  std::array<KernelHandle, ck::kStepMatvecColumns.size()> matvec;
  KernelHandle get_rows;
};

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm;  // [n_embd] f32
  DeviceBuffer bq, bk, bv;           // biases (qwen2), empty when absent
  DeviceBuffer q_norm, k_norm;       // [dk] (qwen3), empty when absent
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
};

// One sequence: its length and its caches, one buffer: per layer of the
// shard K [n_ctx][k_width] then V [n_ctx][v_width], f16.
struct Sequence {
  int n_ctx = 0;
  int length = 0;
  DeviceBuffer kv;
};

// The types the matrix kernels read.
std::string matvec_types() {
  std::vector<std::string> names;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
                     GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kMXFP4,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    names.emplace_back(ggml_type_info(t).name);
  }
  return absl::StrJoin(names, ", ");
}

// What of `hp` the device step does not run yet; "" when it runs it all.
std::string unsupported(const arch::Hyperparameters& hp) {
  const arch::BlockRecipe& r = hp.recipe;
  if (hp.family != arch::Family::kLlama && hp.family != arch::Family::kQwen2 &&
      hp.family != arch::Family::kQwen3) {
    return absl::StrCat("the cuda backend runs the llama, qwen2 and qwen3 blocks; this model is ",
                        hp.architecture);
  }
  if (hp.moe.n_expert > 0) return "mixture-of-experts feed-forward";
  if (r.fused_qkv) return "a fused q/k/v matrix";
  if (r.fused_gate_up) return "a fused gate/up matrix";
  if (r.qk_norm_full) return "QK-norm over whole rows";
  if (r.post_attn_norm || r.post_ffn_norm) return "post-sublayer norms";
  if (r.attn_out_bias) return "an attention output bias";
  if (r.attn_sinks) return "attention sinks";
  if (r.activation != arch::FfnActivation::kSilu) return "a feed-forward activation other than SwiGLU";
  if (r.scale_query) return "scaling the query before attention";
  if (r.embedding_scale != 1.0f) return "scaled embeddings";
  if (hp.final_softcap > 0.0f) return "a soft cap on the logits";
  if (hp.head_dim_k % 2 != 0 || hp.n_rot > hp.head_dim_k) return "this RoPE shape";
  return "";
}

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
                BlockRange range, const DeviceBackendOptions& options,
                std::unique_ptr<DeviceApi> api)
      : model_(std::move(model)), hp_(hp), range_(range), options_(options),
        api_(std::move(api)), rope_pool_(1) {}

  absl::Status load();

  std::string_view name() const override { return "cuda"; }
  const arch::Hyperparameters& hyperparameters() const override { return hp_; }
  BlockRange range() const override { return range_; }
  int n_vocab() const override { return n_vocab_; }
  int max_batch() const override { return options_.max_batch; }

  absl::Status add_sequence(int seq, int n_ctx) override;
  absl::Status remove_sequence(int seq) override;
  absl::StatusOr<int> sequence_length(int seq) const override;
  absl::StatusOr<int> sequence_context(int seq) const override;
  absl::Status truncate_sequence(int seq, int n) override;
  int64_t kv_row_bytes() const override;
  absl::Status read_kv(int seq, int pos, int n, uint8_t* out) const override;
  absl::Status append_kv(int seq, int n, const uint8_t* in) override;
  absl::Status forward(const ForwardRequest& request, ForwardResult* result) override;

 private:
  bool is_first() const { return range_.first == 0; }
  bool is_last() const { return range_.last == hp_.n_layer; }
  int n_layers() const { return range_.last - range_.first; }
  int64_t k_width() const { return int64_t{hp_.n_head_kv} * hp_.head_dim_k; }
  int64_t v_width() const { return int64_t{hp_.n_head_kv} * hp_.head_dim_v; }
  // Layer `layer` (of the shard) of a sequence's K and V caches.
  uint16_t* k_cache(const Sequence& s, int layer) const {
    return s.kv.as<uint16_t>() + int64_t{layer} * s.n_ctx * (k_width() + v_width());
  }
  uint16_t* v_cache(const Sequence& s, int layer) const {
    return k_cache(s, layer) + int64_t{s.n_ctx} * k_width();
  }

  absl::StatusOr<DeviceBuffer> upload(const void* host, size_t bytes);
  absl::StatusOr<DeviceBuffer> upload_vector(const std::string& name, int64_t n,
                                             bool optional = false);
  absl::StatusOr<DeviceMatrix> upload_matrix(const std::string& name, int64_t n_in,
                                             int64_t n_out);
  absl::StatusOr<KernelHandle> kernel(const KernelSource& source, std::string_view entry);
  absl::StatusOr<DeviceBuffer> space(size_t bytes);

  // Launches `k` with `args` (each of the entry's parameter's exact type).
  template <typename... A>
  absl::Status run(KernelHandle k, unsigned grid, unsigned block, A... args) {
    void* p[] = {static_cast<void*>(&args)...};
    return api_->launch(k, grid, block, p);
  }
  // Blocks for a grid-stride kernel over `total` items, `block` threads a block.
  unsigned grid_for(int64_t total, unsigned block) const {
    const int64_t most = int64_t{8} * std::max(api_->multiprocessors(), 1);
    return static_cast<unsigned>(
        std::clamp<int64_t>((total + block - 1) / block, 1, most));
  }

  // y [n][m.n_out] = x [n][m.n_in] · mᵀ, in chunks of the built column counts.
  absl::Status matvec(const DeviceMatrix& m, const float* x, int n, float* y);
  // y [rows][dim] = RMSNorm(x) * weight.
  absl::Status rms_norm(const float* x, const DeviceBuffer& weight, int rows, int dim, float* y);
  absl::Status add(const float* a, const float* b, float* y, int64_t n);
  absl::Status block(int il, int n);
  absl::Status attention(int il, int n);
  absl::Status head(int n);

  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  BlockRange range_;
  DeviceBackendOptions options_;
  std::unique_ptr<DeviceApi> api_;
  ThreadPool rope_pool_;  // rope_angles on the host

  int n_vocab_ = 0;
  DeviceMatrix token_embd_;  // first stage, or the last's tied head
  DeviceBuffer output_norm_;
  DeviceMatrix output_;
  bool tied_output_ = false;
  std::vector<float> rope_freqs_;  // [n_rot / 2] (llama3), empty when absent
  std::vector<DeviceLayer> layers_;

  KernelHandle k_rms_, k_rope_, k_swiglu_, k_add_, k_add_bias_, k_store_kv_, k_attention_;

  std::map<int, Sequence> sequences_;
  int max_ctx_ = 0;  // the longest context added: sizes scores_

  // Step buffers on the device, B = max_batch rows.
  DeviceBuffer ids_;     // [B] int32
  DeviceBuffer x_;       // [B][n_embd] residual stream
  DeviceBuffer xn_;      // [B][n_embd] normed input of a sublayer
  DeviceBuffer q_;       // [B][n_head][dk]
  DeviceBuffer k_;       // [B][n_head_kv][dk]
  DeviceBuffer v_;       // [B][n_head_kv][dv]
  DeviceBuffer attn_;    // [B][n_head][dv]
  DeviceBuffer proj_;    // [B][n_embd]
  DeviceBuffer gate_;    // [B][n_ff]
  DeviceBuffer up_;      // [B][n_ff]
  DeviceBuffer cs_;      // [B][n_rot / 2][2] RoPE angles of the step
  DeviceBuffer scores_;  // [n_head][max_ctx] attention scratch
  DeviceBuffer logits_;  // [rows][n_vocab], grown on demand

  // The current step (forward()).
  struct StepSlice {
    Sequence* seq = nullptr;
    int row0 = 0;
    int rows = 0;
    int pos0 = 0;
    Logits logits = Logits::kNone;
  };
  std::vector<StepSlice> slices_;
  std::vector<int32_t> positions_;  // [B]
  std::vector<float> cs_host_;      // [B][n_rot / 2][2]
  // The RoPE table on the device: the (base, scale) it was made with.
  float cs_base_ = 0.0f, cs_scale_ = 0.0f;
  bool cs_valid_ = false;
  std::vector<int> head_rows_;
  std::vector<float> hidden_host_;  // [B][n_embd]
  std::vector<float> logits_host_;
  std::vector<uint64_t>* block_hashes_ = nullptr;
};

absl::StatusOr<DeviceBuffer> DeviceBackend::space(size_t bytes) {
  return DeviceBuffer::make(api_.get(), std::max<size_t>(bytes, 4));
}

absl::StatusOr<DeviceBuffer> DeviceBackend::upload(const void* host, size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = space(bytes);
  if (!b.ok()) return b.status();
  STRATA_RETURN_IF_ERROR(api_->upload(b->get(), host, bytes));
  return b;
}

absl::StatusOr<DeviceBuffer> DeviceBackend::upload_vector(const std::string& name, int64_t n,
                                                          bool optional) {
  absl::StatusOr<std::vector<float>> v = shard_vector(*model_, name, n, optional);
  if (!v.ok()) return v.status();
  if (v->empty()) return DeviceBuffer{};
  return upload(v->data(), v->size() * sizeof(float));
}

absl::StatusOr<KernelHandle> DeviceBackend::kernel(const KernelSource& source,
                                                   std::string_view entry) {
  return api_->load(KernelRef{&source, std::string(entry)});
}

absl::StatusOr<DeviceMatrix> DeviceBackend::upload_matrix(const std::string& name,
                                                          int64_t n_in, int64_t n_out) {
  absl::StatusOr<kernels::WeightMatrix> w = shard_matrix(*model_, name, n_in, n_out);
  if (!w.ok()) return w.status();
  const std::string_view entry = ck::matvec_entry(w->type);
  if (entry.empty()) {
    return absl::UnimplementedError(absl::StrCat(name, ": ", std::string(ggml_type_info(w->type).name),
                                                 " has no cuda kernel yet (", matvec_types(),
                                                 ")"));
  }
  DeviceMatrix m;
  m.type = w->type;
  m.n_in = static_cast<int>(w->n_in);
  m.n_out = static_cast<int>(w->n_out);
  m.row_bytes = w->row_bytes;
  STRATA_ASSIGN_OR_RETURN(m.bytes, upload(w->data, static_cast<size_t>(w->n_out * w->row_bytes)));
  const ck::StepSources& src = ck::step_sources();
  for (size_t i = 0; i < m.matvec.size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(m.matvec[i], kernel(src.matvec[i], entry));
  }
  STRATA_ASSIGN_OR_RETURN(m.get_rows, kernel(src.matvec[0], ck::get_rows_entry(w->type)));
  return m;
}

absl::Status DeviceBackend::load() {
  if (const std::string what = unsupported(hp_); !what.empty()) {
    return absl::UnimplementedError(what.find("cuda backend") != std::string::npos
                                        ? what
                                        : absl::StrCat("the cuda backend does not run ", what,
                                                       " yet (", hp_.architecture, ")"));
  }
  const int64_t e = hp_.n_embd;
  const int64_t dk = hp_.head_dim_k, dv = hp_.head_dim_v;
  const int64_t q_rows = int64_t{hp_.n_head} * dk;
  const int64_t kv_k = k_width(), kv_v = v_width();
  const arch::BlockRecipe& r = hp_.recipe;

  // The vocabulary: the embedding's rows (as the cpu backend's loader), or
  // the metadata for a middle stage whose part holding it is absent.
  const gguf::TensorInfo* emb = model_->find_tensor("token_embd.weight");
  if (emb == nullptr && !is_first() && !is_last() && hp_.n_vocab > 0) {
    n_vocab_ = hp_.n_vocab;
  } else if (emb == nullptr) {
    return model_->missing_tensor("token_embd.weight");
  } else if (emb->shape.size() != 2 || emb->shape[0] != e || emb->shape[1] < 1 ||
             emb->shape[1] > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("token_embd.weight: shape ",
                                                   shape_text(emb->shape), ", expected [", e,
                                                   ", n_vocab]"));
  } else {
    n_vocab_ = static_cast<int>(emb->shape[1]);
  }
  if (hp_.n_vocab > 0 && hp_.n_vocab != n_vocab_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_embd.weight: ", n_vocab_, " rows, but the vocabulary has ", hp_.n_vocab,
        " tokens (", hp_.architecture, ".vocab_size or tokenizer.ggml.tokens)"));
  }
  const bool has_output = model_->find_tensor("output.weight") != nullptr;
  tied_output_ = is_last() && !has_output;
  if (is_first() || tied_output_) {
    STRATA_ASSIGN_OR_RETURN(token_embd_, upload_matrix("token_embd.weight", e, n_vocab_));
  }
  if (is_last()) {
    STRATA_ASSIGN_OR_RETURN(output_norm_, upload_vector("output_norm.weight", e));
    if (has_output) {
      STRATA_ASSIGN_OR_RETURN(output_, upload_matrix("output.weight", e, n_vocab_));
    }
  }
  STRATA_ASSIGN_OR_RETURN(rope_freqs_,
                          shard_vector(*model_, "rope_freqs.weight", hp_.n_rot / 2, true));

  for (int il = range_.first; il < range_.last; ++il) {
    auto name = [&](std::string_view suffix) { return arch::layer_tensor(il, suffix); };
    DeviceLayer& l = layers_.emplace_back();
    STRATA_ASSIGN_OR_RETURN(l.attn_norm, upload_vector(name("attn_norm.weight"), e));
    STRATA_ASSIGN_OR_RETURN(l.wq, upload_matrix(name("attn_q.weight"), e, q_rows));
    STRATA_ASSIGN_OR_RETURN(l.wk, upload_matrix(name("attn_k.weight"), e, kv_k));
    STRATA_ASSIGN_OR_RETURN(l.wv, upload_matrix(name("attn_v.weight"), e, kv_v));
    // Biases: required by qwen2's recipe, taken when present otherwise.
    STRATA_ASSIGN_OR_RETURN(l.bq, upload_vector(name("attn_q.bias"), q_rows, !r.qkv_bias));
    STRATA_ASSIGN_OR_RETURN(l.bk, upload_vector(name("attn_k.bias"), kv_k, !r.qkv_bias));
    STRATA_ASSIGN_OR_RETURN(l.bv, upload_vector(name("attn_v.bias"), kv_v, !r.qkv_bias));
    if (r.qk_norm) {
      STRATA_ASSIGN_OR_RETURN(l.q_norm, upload_vector(name("attn_q_norm.weight"), dk));
      STRATA_ASSIGN_OR_RETURN(l.k_norm, upload_vector(name("attn_k_norm.weight"), dk));
    }
    STRATA_ASSIGN_OR_RETURN(l.wo, upload_matrix(name("attn_output.weight"),
                                                int64_t{hp_.n_head} * dv, e));
    STRATA_ASSIGN_OR_RETURN(l.ffn_norm, upload_vector(name(r.ffn_norm), e));
    STRATA_ASSIGN_OR_RETURN(l.gate, upload_matrix(name("ffn_gate.weight"), e, hp_.n_ff));
    STRATA_ASSIGN_OR_RETURN(l.up, upload_matrix(name("ffn_up.weight"), e, hp_.n_ff));
    STRATA_ASSIGN_OR_RETURN(l.down, upload_matrix(name("ffn_down.weight"), hp_.n_ff, e));
  }

  const ck::StepSources& src = ck::step_sources();
  STRATA_ASSIGN_OR_RETURN(k_rms_, kernel(src.rms_norm, ck::kRmsNormEntry));
  STRATA_ASSIGN_OR_RETURN(k_rope_, kernel(src.elementwise, ck::kRopeRotateEntry));
  STRATA_ASSIGN_OR_RETURN(k_swiglu_, kernel(src.elementwise, ck::kSwigluEntry));
  STRATA_ASSIGN_OR_RETURN(k_add_, kernel(src.elementwise, ck::kAddEntry));
  STRATA_ASSIGN_OR_RETURN(k_add_bias_, kernel(src.elementwise, ck::kAddBiasEntry));
  STRATA_ASSIGN_OR_RETURN(k_store_kv_, kernel(src.elementwise, ck::kStoreKvEntry));
  STRATA_ASSIGN_OR_RETURN(k_attention_, kernel(src.attention, ck::kAttentionDecodeEntry));

  const size_t b = static_cast<size_t>(options_.max_batch);
  const size_t f = sizeof(float);
  STRATA_ASSIGN_OR_RETURN(ids_, space(b * sizeof(int32_t)));
  STRATA_ASSIGN_OR_RETURN(x_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(xn_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(q_, space(b * q_rows * f));
  STRATA_ASSIGN_OR_RETURN(k_, space(b * kv_k * f));
  STRATA_ASSIGN_OR_RETURN(v_, space(b * kv_v * f));
  STRATA_ASSIGN_OR_RETURN(attn_, space(b * hp_.n_head * dv * f));
  STRATA_ASSIGN_OR_RETURN(proj_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(gate_, space(b * hp_.n_ff * f));
  STRATA_ASSIGN_OR_RETURN(up_, space(b * hp_.n_ff * f));
  STRATA_ASSIGN_OR_RETURN(cs_, space(b * (hp_.n_rot / 2) * 2 * f));
  positions_.resize(b);
  cs_host_.resize(b * (hp_.n_rot / 2) * 2);
  return absl::OkStatus();
}

// --- sequences -------------------------------------------------------------

absl::Status DeviceBackend::add_sequence(int seq, int n_ctx) {
  if (n_ctx <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx must be positive, got ", n_ctx));
  }
  if (sequences_.count(seq) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " already exists"));
  }
  const size_t bytes = static_cast<size_t>(n_layers()) * static_cast<size_t>(n_ctx) *
                       static_cast<size_t>(k_width() + v_width()) * sizeof(uint16_t);
  Sequence s;
  s.n_ctx = n_ctx;
  STRATA_ASSIGN_OR_RETURN(s.kv, space(bytes));
  if (n_ctx > max_ctx_) {
    STRATA_ASSIGN_OR_RETURN(scores_, space(size_t{static_cast<size_t>(hp_.n_head)} *
                                           static_cast<size_t>(n_ctx) * sizeof(float)));
    max_ctx_ = n_ctx;
  }
  sequences_.emplace(seq, std::move(s));
  return absl::OkStatus();
}

absl::Status DeviceBackend::remove_sequence(int seq) {
  if (sequences_.erase(seq) == 0) {
    return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DeviceBackend::sequence_length(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.length;
}

absl::StatusOr<int> DeviceBackend::sequence_context(int seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  return it->second.n_ctx;
}

absl::Status DeviceBackend::truncate_sequence(int seq, int n) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  if (n < 0 || n > it->second.length) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": cannot truncate to ", n,
                                                   " of ", it->second.length, " positions"));
  }
  it->second.length = n;
  return absl::OkStatus();
}

// A position's rows of every layer: K (k_width f16) then V (v_width f16),
// layer after layer. read_kv writes positions one after another.
int64_t DeviceBackend::kv_row_bytes() const {
  return int64_t{n_layers()} * (k_width() + v_width()) * int64_t{sizeof(uint16_t)};
}

absl::Status DeviceBackend::read_kv(int seq, int pos, int n, uint8_t* out) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  const Sequence& s = it->second;
  if (pos < 0 || n < 0 || pos + n > s.length) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": rows [", pos, ", ", pos + n,
                                              ") outside its ", s.length, " positions"));
  }
  const size_t kb = static_cast<size_t>(k_width()) * 2, vb = static_cast<size_t>(v_width()) * 2;
  std::vector<uint8_t> k(kb * n), v(vb * n);
  for (int layer = 0; layer < n_layers(); ++layer) {
    STRATA_RETURN_IF_ERROR(api_->download(k.data(), k_cache(s, layer) + int64_t{pos} * k_width(),
                                          k.size()));
    STRATA_RETURN_IF_ERROR(api_->download(v.data(), v_cache(s, layer) + int64_t{pos} * v_width(),
                                          v.size()));
    for (int t = 0; t < n; ++t) {
      uint8_t* row = out + static_cast<size_t>(t) * kv_row_bytes() + layer * (kb + vb);
      std::memcpy(row, k.data() + t * kb, kb);
      std::memcpy(row + kb, v.data() + t * vb, vb);
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::append_kv(int seq, int n, const uint8_t* in) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
  Sequence& s = it->second;
  if (n < 0 || s.length + n > s.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, ": ", s.length, " + ", n,
                                              " positions exceed the context of ", s.n_ctx));
  }
  const size_t kb = static_cast<size_t>(k_width()) * 2, vb = static_cast<size_t>(v_width()) * 2;
  std::vector<uint8_t> k(kb * n), v(vb * n);
  for (int layer = 0; layer < n_layers(); ++layer) {
    for (int t = 0; t < n; ++t) {
      const uint8_t* row = in + static_cast<size_t>(t) * kv_row_bytes() + layer * (kb + vb);
      std::memcpy(k.data() + t * kb, row, kb);
      std::memcpy(v.data() + t * vb, row + kb, vb);
    }
    STRATA_RETURN_IF_ERROR(
        api_->upload(k_cache(s, layer) + int64_t{s.length} * k_width(), k.data(), k.size()));
    STRATA_RETURN_IF_ERROR(
        api_->upload(v_cache(s, layer) + int64_t{s.length} * v_width(), v.data(), v.size()));
  }
  s.length += n;
  return absl::OkStatus();
}

// --- the step -----------------------------------------------------------------

absl::Status DeviceBackend::matvec(const DeviceMatrix& m, const float* x, int n, float* y) {
  constexpr unsigned kRowsPerBlock = ck::kStepMatvecThreads / 32;
  const unsigned grid = static_cast<unsigned>((m.n_out + kRowsPerBlock - 1) / kRowsPerBlock);
  int done = 0;
  while (done < n) {
    // The widest build that fits what is left.
    size_t i = ck::kStepMatvecColumns.size() - 1;
    while (ck::kStepMatvecColumns[i] > n - done) --i;
    const int cols = ck::kStepMatvecColumns[i];
    STRATA_RETURN_IF_ERROR(run(m.matvec[i], grid, ck::kStepMatvecThreads,
                               static_cast<const unsigned char*>(m.bytes.as<unsigned char>()),
                               x + int64_t{done} * m.n_in, y + int64_t{done} * m.n_out, m.n_out,
                               m.n_in, m.row_bytes));
    done += cols;
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::rms_norm(const float* x, const DeviceBuffer& weight, int rows,
                                     int dim, float* y) {
  return run(k_rms_, static_cast<unsigned>(rows), ck::kStepRmsNormThreads, x,
             static_cast<const float*>(weight.as<float>()), y, dim, hp_.rms_eps);
}

absl::Status DeviceBackend::add(const float* a, const float* b, float* y, int64_t n) {
  return run(k_add_, grid_for(n, ck::kStepElementwiseThreads), ck::kStepElementwiseThreads, a, b,
             y, static_cast<long long>(n));
}

// proj = W_o · Attention(q, k, v) of xn: the llama block's attention
// (as worker/cpu/forward.cc's attention_step for these recipes).
absl::Status DeviceBackend::attention(int il, int n) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const int layer = il - range_.first;
  const int dk = hp_.head_dim_k, dv = hp_.head_dim_v;
  const int64_t q_width = int64_t{hp_.n_head} * dk;
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  const float* xn = xn_.as<float>();
  STRATA_RETURN_IF_ERROR(matvec(w.wq, xn, n, q));
  STRATA_RETURN_IF_ERROR(matvec(w.wk, xn, n, k));
  STRATA_RETURN_IF_ERROR(matvec(w.wv, xn, n, v));
  const unsigned t = ck::kStepElementwiseThreads;
  auto bias = [&](float* x, const DeviceBuffer& b, int64_t width) -> absl::Status {
    if (b.get() == nullptr) return absl::OkStatus();
    return run(k_add_bias_, grid_for(n * width, t), t, x, static_cast<const float*>(b.as<float>()),
               static_cast<long long>(n), static_cast<int>(width));
  };
  STRATA_RETURN_IF_ERROR(bias(q, w.bq, q_width));
  STRATA_RETURN_IF_ERROR(bias(k, w.bk, k_width()));
  STRATA_RETURN_IF_ERROR(bias(v, w.bv, v_width()));
  if (hp_.recipe.qk_norm) {
    STRATA_RETURN_IF_ERROR(rms_norm(q, w.q_norm, n * hp_.n_head, dk, q));
    STRATA_RETURN_IF_ERROR(rms_norm(k, w.k_norm, n * hp_.n_head_kv, dk, k));
  }

  // RoPE: the angles of this layer's (base, scale) for the step's
  // positions, made on the host once per step and (base, scale).
  const arch::LayerRope& lr = hp_.rope[static_cast<size_t>(il)];
  if (!cs_valid_ || lr.freq_base != cs_base_ || lr.freq_scale != cs_scale_) {
    kernels::RopeParams rope;
    rope.order = hp_.recipe.rope == arch::RopeStyle::kNeox ? kernels::RopeOrder::kNeox
                                                           : kernels::RopeOrder::kNormal;
    rope.n_rot = hp_.n_rot;
    rope.freq_base = lr.freq_base;
    rope.freq_scale = lr.freq_scale;
    rope.freq_factors = rope_freqs_.empty() ? nullptr : rope_freqs_.data();
    rope.ext_factor = hp_.yarn_ext_factor;
    rope.attn_factor = hp_.yarn_attn_factor;
    rope.beta_fast = hp_.yarn_beta_fast;
    rope.beta_slow = hp_.yarn_beta_slow;
    rope.n_ctx_orig = hp_.n_ctx_orig;
    reference::ops::rope_angles(positions_.data(), n, rope, cs_host_.data(), rope_pool_);
    STRATA_RETURN_IF_ERROR(api_->upload(cs_.get(), cs_host_.data(),
                                        static_cast<size_t>(n) * (hp_.n_rot / 2) * 2 *
                                            sizeof(float)));
    cs_base_ = lr.freq_base;
    cs_scale_ = lr.freq_scale;
    cs_valid_ = true;
  }
  const int neox = hp_.recipe.rope == arch::RopeStyle::kNeox ? 1 : 0;
  const float* cs = cs_.as<float>();
  STRATA_RETURN_IF_ERROR(run(k_rope_, grid_for(int64_t{n} * hp_.n_head * (hp_.n_rot / 2), t), t,
                             q, cs, n, hp_.n_head, dk, hp_.n_rot, neox));
  STRATA_RETURN_IF_ERROR(run(k_rope_, grid_for(int64_t{n} * hp_.n_head_kv * (hp_.n_rot / 2), t),
                             t, k, cs, n, hp_.n_head_kv, dk, hp_.n_rot, neox));

  const int kw = static_cast<int>(k_width()), vw = static_cast<int>(v_width());
  for (const StepSlice& s : slices_) {
    STRATA_RETURN_IF_ERROR(run(k_store_kv_, grid_for(int64_t{s.rows} * std::max(kw, vw), t), t,
                               static_cast<const float*>(k + int64_t{s.row0} * kw),
                               static_cast<const float*>(v + int64_t{s.row0} * vw),
                               k_cache(*s.seq, layer), v_cache(*s.seq, layer), s.pos0, s.rows,
                               kw, vw));
  }
  // Each row attends to its sequence's positions up to its own (within
  // the window on sliding-window layers).
  const int window = hp_.sliding[static_cast<size_t>(il)] ? hp_.sliding_window : 0;
  const int64_t attn_width = int64_t{hp_.n_head} * dv;
  for (const StepSlice& s : slices_) {
    for (int r = 0; r < s.rows; ++r) {
      const int row = s.row0 + r;
      const int pos = s.pos0 + r;
      const int n_kv = pos + 1;
      const int begin = window > 0 ? std::max(0, n_kv - window) : 0;
      STRATA_RETURN_IF_ERROR(run(
          k_attention_, static_cast<unsigned>(hp_.n_head), ck::kStepAttentionThreads,
          static_cast<const float*>(q + row * q_width),
          static_cast<const unsigned short*>(k_cache(*s.seq, layer)),
          static_cast<const unsigned short*>(v_cache(*s.seq, layer)),
          attn_.as<float>() + row * attn_width, scores_.as<float>(), n_kv, begin, hp_.n_head,
          hp_.n_head_kv, dk, dv, hp_.attention_scale, hp_.attn_softcap));
    }
  }
  return matvec(w.wo, attn_.as<float>(), n, proj_.as<float>());
}

// The llama block (worker/cpu/forward.cc's llama_block):
//   x = x + Attention(RMSNorm(x)); x = x + W_down (silu(W_gate h) * W_up h), h = RMSNorm(x)
absl::Status DeviceBackend::block(int il, int n) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const int e = hp_.n_embd;
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* proj = proj_.as<float>();
  STRATA_RETURN_IF_ERROR(rms_norm(x, w.attn_norm, n, e, xn));
  STRATA_RETURN_IF_ERROR(attention(il, n));
  STRATA_RETURN_IF_ERROR(add(x, proj, x, int64_t{n} * e));
  STRATA_RETURN_IF_ERROR(rms_norm(x, w.ffn_norm, n, e, xn));
  float* gate = gate_.as<float>();
  STRATA_RETURN_IF_ERROR(matvec(w.gate, xn, n, gate));
  STRATA_RETURN_IF_ERROR(matvec(w.up, xn, n, up_.as<float>()));
  const int64_t nf = int64_t{n} * hp_.n_ff;
  const unsigned t = ck::kStepElementwiseThreads;
  STRATA_RETURN_IF_ERROR(run(k_swiglu_, grid_for(nf, t), t, static_cast<const float*>(gate),
                             static_cast<const float*>(up_.as<float>()), gate,
                             static_cast<long long>(nf)));
  STRATA_RETURN_IF_ERROR(matvec(w.down, gate, n, proj));
  return add(x, proj, x, int64_t{n} * e);
}

// logits of head_rows_: RMSNorm with output_norm (into xn_, rows in order),
// then the head, downloaded into logits_host_.
absl::Status DeviceBackend::head(int n) {
  (void)n;
  const int e = hp_.n_embd;
  const int rows = static_cast<int>(head_rows_.size());
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  // Runs of consecutive rows in one launch each.
  for (int i = 0; i < rows;) {
    int j = i + 1;
    while (j < rows && head_rows_[j] == head_rows_[j - 1] + 1) ++j;
    STRATA_RETURN_IF_ERROR(rms_norm(x + int64_t{head_rows_[i]} * e, output_norm_, j - i, e,
                                    xn + int64_t{i} * e));
    i = j;
  }
  const size_t need = static_cast<size_t>(rows) * n_vocab_ * sizeof(float);
  if (logits_.bytes() < need) STRATA_ASSIGN_OR_RETURN(logits_, space(need));
  const DeviceMatrix& out = tied_output_ ? token_embd_ : output_;
  STRATA_RETURN_IF_ERROR(matvec(out, xn, rows, logits_.as<float>()));
  logits_host_.resize(static_cast<size_t>(rows) * n_vocab_);
  return api_->download(logits_host_.data(), logits_.get(), need);
}

absl::Status DeviceBackend::forward(const ForwardRequest& req, ForwardResult* result) {
  ForwardSlice single;
  const absl::StatusOr<CheckedStep> step = check_forward(
      req, StepShape{is_first(), hp_.n_embd, options_.max_batch, n_vocab_},
      [this](int seq) -> absl::StatusOr<std::pair<int, int>> {
        auto it = sequences_.find(seq);
        if (it == sequences_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", seq));
        return std::make_pair(it->second.length, it->second.n_ctx);
      },
      &single);
  if (!step.ok()) return step.status();
  const int n = static_cast<int>(step->rows);
  const int64_t e = hp_.n_embd;
  slices_.clear();
  int row = 0;
  for (const ForwardSlice& s : step->slices) {
    Sequence& seq = sequences_.find(s.seq)->second;
    slices_.push_back(StepSlice{&seq, row, s.rows, seq.length, s.logits});
    for (int t = 0; t < s.rows; ++t) positions_[static_cast<size_t>(row + t)] = seq.length + t;
    row += s.rows;
  }
  cs_valid_ = false;  // new positions

  float* x = x_.as<float>();
  if (is_first()) {
    STRATA_RETURN_IF_ERROR(api_->upload(ids_.get(), req.tokens.data(),
                                        static_cast<size_t>(n) * sizeof(int32_t)));
    const int64_t units = int64_t{n} * ((e + 31) / 32);
    STRATA_RETURN_IF_ERROR(run(token_embd_.get_rows, grid_for(units, ck::kStepMatvecThreads),
                               ck::kStepMatvecThreads,
                               static_cast<const unsigned char*>(token_embd_.bytes.as<unsigned char>()),
                               static_cast<const int*>(ids_.as<int>()), x, n,
                               static_cast<int>(e), token_embd_.row_bytes));
  } else {
    STRATA_RETURN_IF_ERROR(api_->upload(x, req.hidden.data(), req.hidden.size() * sizeof(float)));
  }
  for (int il = range_.first; il < range_.last; ++il) {
    STRATA_RETURN_IF_ERROR(block(il, n));
    if (req.block_hashes != nullptr) {
      hidden_host_.resize(static_cast<size_t>(n * e));
      STRATA_RETURN_IF_ERROR(api_->download(hidden_host_.data(), x, hidden_host_.size() * sizeof(float)));
      append_row_hashes(hidden_host_.data(), n, e, req.block_hashes);
    }
  }

  result->n_rows = n;
  result->hidden = {};
  result->logits = {};
  if (!is_last()) {
    hidden_host_.resize(static_cast<size_t>(n * e));
    STRATA_RETURN_IF_ERROR(
        api_->download(hidden_host_.data(), x, hidden_host_.size() * sizeof(float)));
    // As the cpu backend: a NaN or Inf is not passed on (nothing changed).
    if (const int64_t i = first_not_finite(hidden_host_.data(), n * e); i < n * e) {
      return absl::InternalError(absl::StrCat(
          "blocks [", range_.first, ", ", range_.last, "): hidden row ", i / e, " column ", i % e,
          " is not finite (", hidden_host_[static_cast<size_t>(i)],
          "): the model's weights hold a NaN or Inf, or its activations overflow"));
    }
    for (const StepSlice& s : slices_) s.seq->length += s.rows;
    result->hidden = std::span<const float>(hidden_host_.data(), static_cast<size_t>(n * e));
    return absl::OkStatus();
  }
  head_rows_.clear();
  for (const StepSlice& s : slices_) {
    if (s.logits == Logits::kAll) {
      for (int t = 0; t < s.rows; ++t) head_rows_.push_back(s.row0 + t);
    } else if (s.logits == Logits::kLast) {
      head_rows_.push_back(s.row0 + s.rows - 1);
    }
  }
  if (!head_rows_.empty()) {
    STRATA_RETURN_IF_ERROR(head(n));
    const int64_t n_logits = static_cast<int64_t>(logits_host_.size());
    if (const int64_t i = first_not_finite(logits_host_.data(), n_logits); i < n_logits) {
      return absl::InternalError(absl::StrCat(
          "blocks [", range_.first, ", ", range_.last, ") and the head: logit row ", i / n_vocab_,
          " token ", i % n_vocab_, " is not finite (", logits_host_[static_cast<size_t>(i)],
          "): the weights hold a NaN or Inf, or the activations overflow"));
    }
    result->logits = std::span<const float>(logits_host_.data(), logits_host_.size());
  }
  for (const StepSlice& s : slices_) s.seq->length += s.rows;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> make_device_backend(
    std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
    BlockRange range, const DeviceBackendOptions& options, std::unique_ptr<DeviceApi> api) {
  if (model == nullptr) return absl::InvalidArgumentError("make_device_backend: no model");
  if (api == nullptr) return absl::InvalidArgumentError("make_device_backend: no device");
  if (range.first < 0 || range.first >= range.last || range.last > hp.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("blocks [", range.first, ", ", range.last,
                                                   ") are not a range of the model's ",
                                                   hp.n_layer));
  }
  if (options.max_batch < 1 || options.max_batch > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch must be 1 to 65536, got ", options.max_batch));
  }
  auto backend = std::make_unique<DeviceBackend>(std::move(model), hp, range, options,
                                                 std::move(api));
  if (absl::Status st = backend->load(); !st.ok()) return st;
  return backend;
}

}  // namespace strata::worker
