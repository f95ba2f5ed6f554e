#include "worker/cuda/device_backend.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/base/op_types.h"
#include "kernels/cpu/base/thread_pool.h"
#include "kernels/cpu/reference/ops/elementwise.h"
#include "kernels/cpu/reference/ops/moe_routing.h"
#include "kernels/cpu/reference/ops/swiglu_oai.h"
#include "model/ggml_type.h"
#include "worker/cuda/kernel_tuner.h"
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

// A weight matrix on the device: its GGUF rows (in a buffer of
// DeviceBackend::weights_), and the kernels that read them (matrix x 1, 2,
// 4, 8, 16 columns; the embedding's get_rows). Empty (data null) when an
// optional tensor is absent.
struct DeviceMatrix {
  const unsigned char* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int n_in = 0;   // elements per row
  int n_out = 0;  // rows
  long long row_bytes = 0;
  // [w][i]: ROW_WARPS kStepRowWarps[w], NCOLS kStepMatvecColumns[i];
  // loaded when first needed (DeviceBackend::kernel_of): the tuner's
  // measurements, then the chosen split's, at load.
  mutable std::array<std::array<KernelHandle, ck::kStepMatvecColumns.size()>,
                     ck::kStepRowWarps.size()>
      matvec;
  int split = 0;  // the w the step launches (the tuner's choice)
  KernelHandle get_rows;
  bool present() const { return data != nullptr; }
};

// The mixture-of-experts feed-forward of a block (arch::MoeParams; as
// worker/cpu/cpu_weights.h's ExpertWeights).
struct DeviceExperts {
  DeviceMatrix router;                      // [n_expert][n_embd]
  DeviceBuffer router_bias;                 // [n_expert] (gpt-oss)
  std::vector<DeviceMatrix> gate, up, down; // [n_expert] views of one buffer each
  DeviceBuffer gate_bias, up_bias;          // [n_expert][n_ff_expert] (gpt-oss)
  DeviceBuffer down_bias;                   // [n_expert][n_embd] (gpt-oss)
  DeviceMatrix shared_router;               // [1][n_embd] (qwen2moe)
  DeviceMatrix shared_gate, shared_up, shared_down;
  bool present() const { return router.present(); }
};

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm;            // [n_embd] f32
  DeviceBuffer post_attn_norm, post_ffn_norm;  // gemma; empty when absent
  DeviceBuffer bq, bk, bv, bo;                 // biases, empty when absent
  DeviceBuffer q_norm, k_norm;                 // [dk] (qwen3, gemma3) or whole rows (olmoe)
  DeviceBuffer sinks;                          // [n_head] (gpt-oss)
  DeviceMatrix wq, wk, wv, wqkv, wo;           // wqkv: phi3's fused [q | k | v]
  DeviceMatrix gate, up, down;                 // up: [gate | up] when fused (phi3)
  DeviceExperts moe;
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
  for (GgmlType t : ck::kStepMatvecTypes) {
    names.emplace_back(ggml_type_info(t).name);
  }
  return absl::StrJoin(names, ", ");
}

// What of `hp` the device step does not run; "" when it runs it all.
std::string unsupported(const arch::Hyperparameters& hp) {
  if (hp.head_dim_k % 2 != 0 || hp.n_rot > hp.head_dim_k || hp.n_rot % 2 != 0) {
    return "this RoPE shape";
  }
  if (hp.moe.n_expert > 512) return "more than 512 experts";
  return "";
}

reference::ops::MoeGating moe_gating(arch::ExpertGating g) {
  switch (g) {
    case arch::ExpertGating::kSoftmax: return reference::ops::MoeGating::kSoftmax;
    case arch::ExpertGating::kSigmoid: return reference::ops::MoeGating::kSigmoid;
    case arch::ExpertGating::kSoftmaxWeight: return reference::ops::MoeGating::kSoftmaxWeight;
  }
  return reference::ops::MoeGating::kSoftmax;
}

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
                BlockRange range, const DeviceBackendOptions& options,
                std::unique_ptr<DeviceApi> api)
      : model_(std::move(model)), hp_(hp), range_(range), options_(options),
        api_(std::move(api)), host_pool_(1) {}

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
  int64_t q_width() const { return int64_t{hp_.n_head} * hp_.head_dim_k; }
  int64_t k_width() const { return int64_t{hp_.n_head_kv} * hp_.head_dim_k; }
  int64_t v_width() const { return int64_t{hp_.n_head_kv} * hp_.head_dim_v; }
  // The widest feed-forward: of the dense FFN, an expert, the shared expert.
  int64_t ff_width() const {
    return std::max<int64_t>({hp_.n_ff, hp_.moe.n_ff_expert, hp_.moe.n_ff_shared, 1});
  }
  // Rows whose experts run together (as the cpu backend's moe_block_rows:
  // expert_out_ stays 8192 slots x n_embd however many experts a file asks
  // each token to use).
  int moe_rows() const {
    const int k = std::max(hp_.moe.n_expert_used, 1);
    return std::max(1, std::min(options_.max_batch, 8192 / k));
  }
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
  absl::StatusOr<DeviceBuffer> upload_table(const std::string& name, int64_t n0, int64_t n1);
  // The matrix `name` [n_in, n_out] on the device with its kernels; empty
  // when `optional` and absent.
  absl::StatusOr<DeviceMatrix> upload_matrix(const std::string& name, int64_t n_in,
                                             int64_t n_out, bool optional = false,
                                             bool one_row_as_vector = false);
  // The n_expert matrices of the expert tensor `name`, one upload.
  absl::StatusOr<std::vector<DeviceMatrix>> upload_experts(const std::string& name,
                                                           int64_t n_in, int64_t n_out);
  // `view`'s bytes (`bytes` of them from its data) uploaded, kernels loaded.
  absl::StatusOr<DeviceMatrix> device_matrix(const std::string& name,
                                             const kernels::WeightMatrix& view, size_t bytes);
  absl::Status load_layer(int il, DeviceLayer& l);
  // m's matrix kernel [w][i], loaded (compiled) at its first use.
  absl::StatusOr<KernelHandle> kernel_of(const DeviceMatrix& m, size_t w, size_t i);
  // Every matrix's split-K choice: forced (options_.row_warps), measured
  // or read by the tuner (options_.tune), or 1 warp a row.
  absl::Status choose_splits();
  absl::Status load_chosen(const std::vector<DeviceMatrix*>& all);
  absl::StatusOr<KernelHandle> kernel(const KernelSource& source, std::string_view entry);
  absl::StatusOr<DeviceBuffer> space(size_t bytes);

  // Launches `k` with `args` (each of the entry's parameter's exact type).
  template <typename... A>
  absl::Status run(KernelHandle k, unsigned grid, unsigned block, A... args) {
    void* p[] = {static_cast<void*>(&args)...};
    return api_->launch(k, grid, block, p);
  }
  // A grid-stride elementwise kernel over `total` items.
  template <typename... A>
  absl::Status run_over(KernelHandle k, int64_t total, A... args) {
    constexpr unsigned t = ck::kStepElementwiseThreads;
    const int64_t most = int64_t{8} * std::max(api_->multiprocessors(), 1);
    const auto grid = static_cast<unsigned>(std::clamp<int64_t>((total + t - 1) / t, 1, most));
    return run(k, grid, t, args...);
  }

  // y [n][m.n_out] = x [n][m.n_in] · mᵀ, in chunks of the built column counts.
  absl::Status matvec(const DeviceMatrix& m, const float* x, int n, float* y);
  // y [rows][dim] = RMSNorm(x) * weight.
  absl::Status rms_norm(const float* x, const DeviceBuffer& weight, int rows, int dim, float* y);
  absl::Status add(const float* a, const float* b, float* y, int64_t n);
  absl::Status add_bias(float* x, const DeviceBuffer& bias, int rows, int64_t width,
                        int64_t offset = 0);
  // Columns [col0, col0 + width) of src [n][src_width] into dst [n][width].
  absl::Status copy_cols(const float* src, int64_t src_width, int64_t col0, float* dst,
                         int64_t width, int n);
  absl::Status block(int il, int n);
  absl::Status attention(int il, int n);
  // y [n][n_embd] = W_down act(W_gate x + b_gate, W_up x + b_up) + b_down, f
  // wide (the bias buffers' rows `bias_row`; empty buffers: none). Uses
  // gate_ and up_ (and fused_ for a fused gate|up matrix).
  absl::Status ffn(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down,
                   int64_t f, const float* x, int n, float* y, const DeviceBuffer* gate_bias,
                   const DeviceBuffer* up_bias, const DeviceBuffer* down_bias, int bias_row);
  absl::Status moe(int il, int n);
  absl::Status head();

  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  BlockRange range_;
  DeviceBackendOptions options_;
  std::unique_ptr<DeviceApi> api_;
  ThreadPool host_pool_;  // rope_angles on the host

  int n_vocab_ = 0;
  int measured_shapes_ = 0;  // matrix shapes the tuner timed at load
  std::deque<DeviceBuffer> weights_;  // every matrix's bytes
  DeviceMatrix token_embd_;           // first stage, or the last's tied head
  DeviceBuffer output_norm_;
  DeviceMatrix output_;
  bool tied_output_ = false;
  std::vector<float> rope_freqs_;  // [n_rot / 2] (llama3), empty when absent
  std::vector<DeviceLayer> layers_;

  KernelHandle k_attention_rows_;
  KernelHandle k_rms_, k_rope_, k_swiglu_, k_add_, k_add_bias_, k_store_kv_, k_attention_,
      k_scale_, k_soft_cap_, k_geglu_, k_swiglu_oai_, k_copy_cols_, k_gather_, k_scatter_,
      k_moe_sum_, k_add_shared_;

  std::map<int, Sequence> sequences_;
  int max_ctx_ = 0;         // the longest context added: sizes scores_
  int attention_rows_ = 1;  // prompt rows a launch of attention takes

  // Step buffers on the device, B = max_batch rows.
  DeviceBuffer ids_;     // [B] int32
  DeviceBuffer x_;       // [B][n_embd] residual stream
  DeviceBuffer xn_;      // [B][n_embd] normed input of a sublayer
  DeviceBuffer q_;       // [B][n_head][dk]
  DeviceBuffer k_;       // [B][n_head_kv][dk]
  DeviceBuffer v_;       // [B][n_head_kv][dv]
  DeviceBuffer attn_;    // [B][n_head][dv]
  DeviceBuffer proj_;    // [B][n_embd]
  DeviceBuffer gate_;    // [B][ff_width()]
  DeviceBuffer up_;      // [B][ff_width()]
  DeviceBuffer fused_;   // [B][fused width] a fused projection's rows (phi3)
  DeviceBuffer scores_;  // [attention_rows_][n_head][max_ctx] attention scratch
  DeviceBuffer logits_;  // [rows][n_vocab], grown on demand
  // Mixture of experts (empty for a dense model), R = moe_rows(), k =
  // n_expert_used.
  DeviceBuffer router_logits_;  // [B][n_expert]
  DeviceBuffer slot_rows_;      // [R k] int: the row of each grouped slot
  DeviceBuffer slot_ids_;       // [R k] int: the slot (t k + j) of each
  DeviceBuffer slot_weights_;   // [R][k]
  DeviceBuffer moe_x_;          // [B][n_embd] an expert's gathered rows
  DeviceBuffer moe_y_;          // [B][n_embd] their outputs, the shared expert's
  DeviceBuffer expert_out_;     // [R k][n_embd] each slot's output
  DeviceBuffer shared_gate_;    // [B] the shared expert's gate logits
  // RoPE angle tables of the step: two, for families whose layers have two
  // RoPE settings (gemma3's local and global layers).
  struct RopeTable {
    DeviceBuffer cs;  // [B][n_rot / 2][2]
    float base = 0.0f, scale = 0.0f;
    uint64_t step = 0;  // 0: never made
  };
  RopeTable rope_tables_[2];
  int rope_next_ = 0;
  uint64_t step_ = 0;

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
  std::vector<int> head_rows_;
  std::vector<float> hidden_host_;  // [B][n_embd]
  std::vector<float> logits_host_;
  // Routing on the host (moe()).
  std::vector<float> router_host_;       // [B][n_expert]
  std::vector<int32_t> route_experts_;   // [B][k]
  std::vector<float> route_weights_;     // [B][k]
  std::vector<float> route_scratch_;     // [2 n_expert]
  std::vector<int32_t> expert_begin_;    // [n_expert + 1]
  std::vector<int32_t> expert_fill_;     // [n_expert]
  std::vector<int32_t> grouped_rows_;    // [R k]
  std::vector<int32_t> grouped_slots_;   // [R k]
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

absl::StatusOr<DeviceBuffer> DeviceBackend::upload_table(const std::string& name, int64_t n0,
                                                         int64_t n1) {
  absl::StatusOr<std::vector<float>> v = shard_table(*model_, name, n0, n1);
  if (!v.ok()) return v.status();
  return upload(v->data(), v->size() * sizeof(float));
}

absl::StatusOr<KernelHandle> DeviceBackend::kernel(const KernelSource& source,
                                                   std::string_view entry) {
  return api_->load(KernelRef{&source, std::string(entry)});
}

absl::StatusOr<DeviceMatrix> DeviceBackend::device_matrix(const std::string& name,
                                                          const kernels::WeightMatrix& view,
                                                          size_t bytes) {
  const std::string_view entry = ck::matvec_entry(view.type);
  if (entry.empty()) {
    return absl::UnimplementedError(absl::StrCat(name, ": ",
                                                 std::string(ggml_type_info(view.type).name),
                                                 " has no cuda kernel yet (", matvec_types(),
                                                 ")"));
  }
  DeviceMatrix m;
  m.type = view.type;
  m.n_in = static_cast<int>(view.n_in);
  m.n_out = static_cast<int>(view.n_out);
  m.row_bytes = view.row_bytes;
  DeviceBuffer bytes_on_device;
  STRATA_ASSIGN_OR_RETURN(bytes_on_device, upload(view.data, bytes));
  m.data = weights_.emplace_back(std::move(bytes_on_device)).as<unsigned char>();
  const auto& src = ck::step_sources().matvec[ck::step_matvec_type_index(view.type)];
  STRATA_ASSIGN_OR_RETURN(m.get_rows, kernel(src[0][0], ck::get_rows_entry(view.type)));
  return m;
}

absl::StatusOr<DeviceMatrix> DeviceBackend::upload_matrix(const std::string& name,
                                                          int64_t n_in, int64_t n_out,
                                                          bool optional,
                                                          bool one_row_as_vector) {
  absl::StatusOr<kernels::WeightMatrix> w =
      shard_matrix(*model_, name, n_in, n_out, optional, one_row_as_vector);
  if (!w.ok()) return w.status();
  if (w->data == nullptr) return DeviceMatrix{};
  return device_matrix(name, *w, static_cast<size_t>(w->n_out * w->row_bytes));
}

absl::StatusOr<std::vector<DeviceMatrix>> DeviceBackend::upload_experts(const std::string& name,
                                                                        int64_t n_in,
                                                                        int64_t n_out) {
  absl::StatusOr<std::vector<kernels::WeightMatrix>> views =
      shard_experts(*model_, name, n_in, n_out, hp_.moe.n_expert);
  if (!views.ok()) return views.status();
  // One upload of the whole tensor; expert e's rows follow e slices in.
  const kernels::WeightMatrix& first = views->front();
  const size_t slice = static_cast<size_t>(first.n_out * first.row_bytes);
  absl::StatusOr<DeviceMatrix> all = device_matrix(name, first, slice * views->size());
  if (!all.ok()) return all.status();
  std::vector<DeviceMatrix> out(views->size(), *all);
  for (size_t e = 0; e < out.size(); ++e) out[e].data = all->data + e * slice;
  return out;
}

absl::Status DeviceBackend::load_layer(int il, DeviceLayer& l) {
  auto name = [&](std::string_view suffix) { return arch::layer_tensor(il, suffix); };
  const arch::BlockRecipe& r = hp_.recipe;
  const int64_t e = hp_.n_embd;
  const int64_t dk = hp_.head_dim_k;
  const int64_t qw = q_width(), kw = k_width(), vw = v_width();
  STRATA_ASSIGN_OR_RETURN(l.attn_norm, upload_vector(name("attn_norm.weight"), e));
  if (r.fused_qkv && model_->find_tensor(name("attn_qkv.weight")) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(l.wqkv, upload_matrix(name("attn_qkv.weight"), e, qw + kw + vw));
  } else {
    STRATA_ASSIGN_OR_RETURN(l.wq, upload_matrix(name("attn_q.weight"), e, qw));
    STRATA_ASSIGN_OR_RETURN(l.wk, upload_matrix(name("attn_k.weight"), e, kw));
    STRATA_ASSIGN_OR_RETURN(l.wv, upload_matrix(name("attn_v.weight"), e, vw));
  }
  // Biases: required by qwen2's recipe, taken when present otherwise.
  STRATA_ASSIGN_OR_RETURN(l.bq, upload_vector(name("attn_q.bias"), qw, !r.qkv_bias));
  STRATA_ASSIGN_OR_RETURN(l.bk, upload_vector(name("attn_k.bias"), kw, !r.qkv_bias));
  STRATA_ASSIGN_OR_RETURN(l.bv, upload_vector(name("attn_v.bias"), vw, !r.qkv_bias));
  if (r.qk_norm) {
    STRATA_ASSIGN_OR_RETURN(l.q_norm, upload_vector(name("attn_q_norm.weight"), dk));
    STRATA_ASSIGN_OR_RETURN(l.k_norm, upload_vector(name("attn_k_norm.weight"), dk));
  }
  if (r.qk_norm_full) {
    STRATA_ASSIGN_OR_RETURN(l.q_norm, upload_vector(name("attn_q_norm.weight"), qw));
    STRATA_ASSIGN_OR_RETURN(l.k_norm, upload_vector(name("attn_k_norm.weight"), kw));
  }
  STRATA_ASSIGN_OR_RETURN(l.wo, upload_matrix(name("attn_output.weight"),
                                              int64_t{hp_.n_head} * hp_.head_dim_v, e));
  if (r.attn_out_bias) STRATA_ASSIGN_OR_RETURN(l.bo, upload_vector(name("attn_output.bias"), e));
  if (r.attn_sinks) {
    STRATA_ASSIGN_OR_RETURN(l.sinks, upload_vector(name("attn_sinks.weight"), hp_.n_head));
  }
  if (r.post_attn_norm) {
    STRATA_ASSIGN_OR_RETURN(l.post_attn_norm,
                            upload_vector(name("post_attention_norm.weight"), e));
  }
  STRATA_ASSIGN_OR_RETURN(l.ffn_norm, upload_vector(name(r.ffn_norm), e));
  if (hp_.moe.n_expert > 0) {
    DeviceExperts& x = l.moe;
    const int64_t n_expert = hp_.moe.n_expert, f = hp_.moe.n_ff_expert;
    STRATA_ASSIGN_OR_RETURN(x.router, upload_matrix(name("ffn_gate_inp.weight"), e, n_expert));
    STRATA_ASSIGN_OR_RETURN(x.gate, upload_experts(name("ffn_gate_exps.weight"), e, f));
    STRATA_ASSIGN_OR_RETURN(x.up, upload_experts(name("ffn_up_exps.weight"), e, f));
    STRATA_ASSIGN_OR_RETURN(x.down, upload_experts(name("ffn_down_exps.weight"), f, e));
    if (r.expert_bias) {
      STRATA_ASSIGN_OR_RETURN(x.router_bias, upload_vector(name("ffn_gate_inp.bias"), n_expert));
      STRATA_ASSIGN_OR_RETURN(x.gate_bias, upload_table(name("ffn_gate_exps.bias"), f, n_expert));
      STRATA_ASSIGN_OR_RETURN(x.up_bias, upload_table(name("ffn_up_exps.bias"), f, n_expert));
      STRATA_ASSIGN_OR_RETURN(x.down_bias, upload_table(name("ffn_down_exps.bias"), e, n_expert));
    }
    if (hp_.moe.n_ff_shared > 0) {
      const int64_t fs = hp_.moe.n_ff_shared;
      // ffn_gate_inp_shexp is one row of n_embd, stored as a vector.
      STRATA_ASSIGN_OR_RETURN(x.shared_router,
                              upload_matrix(name("ffn_gate_inp_shexp.weight"), e, 1, false, true));
      STRATA_ASSIGN_OR_RETURN(x.shared_gate, upload_matrix(name("ffn_gate_shexp.weight"), e, fs));
      STRATA_ASSIGN_OR_RETURN(x.shared_up, upload_matrix(name("ffn_up_shexp.weight"), e, fs));
      STRATA_ASSIGN_OR_RETURN(x.shared_down, upload_matrix(name("ffn_down_shexp.weight"), fs, e));
    }
  } else if (r.fused_gate_up) {
    STRATA_ASSIGN_OR_RETURN(l.up, upload_matrix(name("ffn_up.weight"), e, 2 * int64_t{hp_.n_ff}));
  } else {
    STRATA_ASSIGN_OR_RETURN(l.gate, upload_matrix(name("ffn_gate.weight"), e, hp_.n_ff));
    STRATA_ASSIGN_OR_RETURN(l.up, upload_matrix(name("ffn_up.weight"), e, hp_.n_ff));
  }
  if (hp_.moe.n_expert == 0) {
    STRATA_ASSIGN_OR_RETURN(l.down, upload_matrix(name("ffn_down.weight"), hp_.n_ff, e));
  }
  if (r.post_ffn_norm) {
    STRATA_ASSIGN_OR_RETURN(l.post_ffn_norm, upload_vector(name("post_ffw_norm.weight"), e));
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::load() {
  if (const std::string what = unsupported(hp_); !what.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("the cuda backend does not run ", what, " yet (", hp_.architecture, ")"));
  }
  const int64_t e = hp_.n_embd;

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
    STRATA_RETURN_IF_ERROR(load_layer(il, layers_.emplace_back()));
  }

  const ck::StepSources& src = ck::step_sources();
  STRATA_ASSIGN_OR_RETURN(k_rms_, kernel(src.rms_norm, ck::kRmsNormEntry));
  STRATA_ASSIGN_OR_RETURN(k_attention_, kernel(src.attention, ck::kAttentionDecodeEntry));
  STRATA_ASSIGN_OR_RETURN(k_attention_rows_, kernel(src.attention, ck::kAttentionRowsEntry));
  struct Elementwise {
    KernelHandle* handle;
    const char* entry;
  };
  for (const Elementwise& k : std::initializer_list<Elementwise>{
           {&k_rope_, ck::kRopeRotateEntry},     {&k_swiglu_, ck::kSwigluEntry},
           {&k_add_, ck::kAddEntry},             {&k_add_bias_, ck::kAddBiasEntry},
           {&k_store_kv_, ck::kStoreKvEntry},    {&k_scale_, ck::kScaleEntry},
           {&k_soft_cap_, ck::kSoftCapEntry},    {&k_geglu_, ck::kGegluEntry},
           {&k_swiglu_oai_, ck::kSwigluOaiEntry}, {&k_copy_cols_, ck::kCopyColsEntry},
           {&k_gather_, ck::kGatherRowsEntry},   {&k_scatter_, ck::kScatterRowsEntry},
           {&k_moe_sum_, ck::kMoeSumEntry},      {&k_add_shared_, ck::kAddSharedExpertEntry}}) {
    STRATA_ASSIGN_OR_RETURN(*k.handle, kernel(src.elementwise, k.entry));
  }

  const size_t b = static_cast<size_t>(options_.max_batch);
  const size_t f = sizeof(float);
  STRATA_ASSIGN_OR_RETURN(ids_, space(b * sizeof(int32_t)));
  STRATA_ASSIGN_OR_RETURN(x_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(xn_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(q_, space(b * q_width() * f));
  STRATA_ASSIGN_OR_RETURN(k_, space(b * k_width() * f));
  STRATA_ASSIGN_OR_RETURN(v_, space(b * v_width() * f));
  STRATA_ASSIGN_OR_RETURN(attn_, space(b * hp_.n_head * hp_.head_dim_v * f));
  STRATA_ASSIGN_OR_RETURN(proj_, space(b * e * f));
  STRATA_ASSIGN_OR_RETURN(gate_, space(b * ff_width() * f));
  STRATA_ASSIGN_OR_RETURN(up_, space(b * ff_width() * f));
  if (hp_.recipe.fused_qkv || hp_.recipe.fused_gate_up) {
    const int64_t fused = std::max(q_width() + k_width() + v_width(), 2 * int64_t{hp_.n_ff});
    STRATA_ASSIGN_OR_RETURN(fused_, space(b * fused * f));
  }
  for (RopeTable& t : rope_tables_) {
    STRATA_ASSIGN_OR_RETURN(t.cs, space(b * (hp_.n_rot / 2) * 2 * f));
  }
  if (hp_.moe.n_expert > 0) {
    const size_t n_expert = static_cast<size_t>(hp_.moe.n_expert);
    const size_t slots = static_cast<size_t>(moe_rows()) * hp_.moe.n_expert_used;
    STRATA_ASSIGN_OR_RETURN(router_logits_, space(b * n_expert * f));
    STRATA_ASSIGN_OR_RETURN(slot_rows_, space(slots * sizeof(int32_t)));
    STRATA_ASSIGN_OR_RETURN(slot_ids_, space(slots * sizeof(int32_t)));
    STRATA_ASSIGN_OR_RETURN(slot_weights_, space(slots * f));
    STRATA_ASSIGN_OR_RETURN(moe_x_, space(b * e * f));
    STRATA_ASSIGN_OR_RETURN(moe_y_, space(b * e * f));
    STRATA_ASSIGN_OR_RETURN(expert_out_, space(slots * e * f));
    STRATA_ASSIGN_OR_RETURN(shared_gate_, space(b * f));
    router_host_.resize(b * n_expert);
    route_experts_.resize(b * hp_.moe.n_expert_used);
    route_weights_.resize(b * hp_.moe.n_expert_used);
    route_scratch_.resize(2 * n_expert);
    expert_begin_.resize(n_expert + 1);
    expert_fill_.resize(n_expert);
    grouped_rows_.resize(slots);
    grouped_slots_.resize(slots);
  }
  positions_.resize(b);
  cs_host_.resize(b * (hp_.n_rot / 2) * 2);
  return choose_splits();
}

absl::Status DeviceBackend::choose_splits() {
  std::vector<DeviceMatrix*> all;
  auto take = [&](DeviceMatrix& m) {
    if (m.present()) all.push_back(&m);
  };
  take(token_embd_);
  take(output_);
  for (DeviceLayer& l : layers_) {
    for (DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.gate, &l.up, &l.down,
                            &l.moe.router, &l.moe.shared_router, &l.moe.shared_gate,
                            &l.moe.shared_up, &l.moe.shared_down}) {
      take(*m);
    }
    for (auto* experts : {&l.moe.gate, &l.moe.up, &l.moe.down}) {
      for (DeviceMatrix& m : *experts) take(m);
    }
  }
  if (options_.row_warps != 0) {
    size_t w = 0;
    while (w < ck::kStepRowWarps.size() && ck::kStepRowWarps[w] != options_.row_warps) ++w;
    if (w == ck::kStepRowWarps.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("row_warps must be 0 (tuned), 1, 2 or 4, got ", options_.row_warps));
    }
    for (DeviceMatrix* m : all) m->split = static_cast<int>(w);
    return load_chosen(all);
  }
  if (!options_.tune) return load_chosen(all);  // one warp a row
  const std::string path = options_.tuner_path.empty() ? default_tuner_path()
                           : options_.tuner_path == "-" ? ""
                                                        : options_.tuner_path;
  MatvecTuner tuner(path, tuning_key(api_->tuning_key()));
  tuner.load();
  // Scratch for the measurements: zero activations of the widest row, the
  // longest output.
  int widest = 1, longest = 1;
  for (const DeviceMatrix* m : all) {
    widest = std::max(widest, m->n_in);
    longest = std::max(longest, m->n_out);
  }
  DeviceBuffer x, y;
  STRATA_ASSIGN_OR_RETURN(x, space(static_cast<size_t>(widest) * sizeof(float)));
  STRATA_ASSIGN_OR_RETURN(y, space(static_cast<size_t>(longest) * sizeof(float)));
  STRATA_RETURN_IF_ERROR(api_->fill(x.get(), 0, static_cast<size_t>(widest) * sizeof(float)));
  for (DeviceMatrix* m : all) {
    const MatvecShape shape{m->type, m->n_in, m->n_out};
    std::optional<int> w = tuner.find(shape);
    if (!w) {
      std::vector<double> ms;
      for (size_t s = 0; s < ck::kStepRowWarps.size(); ++s) {
        m->split = static_cast<int>(s);
        absl::StatusOr<double> t = api_->time_ms(
            [&] { return matvec(*m, x.as<float>(), 1, y.as<float>()); }, 5);
        if (!t.ok()) return t.status();
        ms.push_back(*t);
      }
      w = tuner.record(shape, ms);
    }
    size_t s = 0;
    while (ck::kStepRowWarps[s] != *w) ++s;
    m->split = static_cast<int>(s);
  }
  // A tuner file that cannot be written costs the next load a measurement,
  // not this load.
  if (tuner.measured() > 0) tuner.save().IgnoreError();
  measured_shapes_ = tuner.measured();
  return load_chosen(all);
}

// Every column count of each matrix's chosen split, compiled now (at
// load), not at the first step that needs it.
absl::Status DeviceBackend::load_chosen(const std::vector<DeviceMatrix*>& all) {
  for (const DeviceMatrix* m : all) {
    for (size_t i = 0; i < ck::kStepMatvecColumns.size(); ++i) {
      absl::StatusOr<KernelHandle> k = kernel_of(*m, static_cast<size_t>(m->split), i);
      if (!k.ok()) return k.status();
    }
  }
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
    // Prompt rows in one attention launch: as many as 64 MiB of scores
    // hold at the longest context (at least one).
    const size_t per_row = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(n_ctx) *
                           sizeof(float);
    const int rows = static_cast<int>(
        std::clamp<size_t>((size_t{64} << 20) / per_row, 1, static_cast<size_t>(options_.max_batch)));
    STRATA_ASSIGN_OR_RETURN(scores_, space(per_row * static_cast<size_t>(rows)));
    max_ctx_ = n_ctx;
    attention_rows_ = rows;
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

absl::StatusOr<KernelHandle> DeviceBackend::kernel_of(const DeviceMatrix& m, size_t w, size_t i) {
  KernelHandle& h = m.matvec[w][i];
  if (h.id < 0) {
    const auto& src = ck::step_sources().matvec[ck::step_matvec_type_index(m.type)];
    STRATA_ASSIGN_OR_RETURN(h, kernel(src[w][i], ck::matvec_entry(m.type)));
  }
  return h;
}

absl::Status DeviceBackend::matvec(const DeviceMatrix& m, const float* x, int n, float* y) {
  const int rows_per_block =
      ck::kStepMatvecThreads / 32 / ck::kStepRowWarps[static_cast<size_t>(m.split)];
  const unsigned grid = static_cast<unsigned>((m.n_out + rows_per_block - 1) / rows_per_block);
  int done = 0;
  while (done < n) {
    // The widest build that fits what is left.
    size_t i = ck::kStepMatvecColumns.size() - 1;
    while (ck::kStepMatvecColumns[i] > n - done) --i;
    absl::StatusOr<KernelHandle> k = kernel_of(m, static_cast<size_t>(m.split), i);
    if (!k.ok()) return k.status();
    STRATA_RETURN_IF_ERROR(run(*k, grid, ck::kStepMatvecThreads, m.data,
                               x + int64_t{done} * m.n_in, y + int64_t{done} * m.n_out, m.n_out,
                               m.n_in, m.row_bytes));
    done += ck::kStepMatvecColumns[i];
  }
  return absl::OkStatus();
}

absl::Status DeviceBackend::rms_norm(const float* x, const DeviceBuffer& weight, int rows,
                                     int dim, float* y) {
  return run(k_rms_, static_cast<unsigned>(rows), ck::kStepRmsNormThreads, x,
             static_cast<const float*>(weight.as<float>()), y, dim, hp_.rms_eps);
}

absl::Status DeviceBackend::add(const float* a, const float* b, float* y, int64_t n) {
  return run_over(k_add_, n, a, b, y, static_cast<long long>(n));
}

absl::Status DeviceBackend::add_bias(float* x, const DeviceBuffer& bias, int rows, int64_t width,
                                     int64_t offset) {
  if (bias.get() == nullptr) return absl::OkStatus();
  return run_over(k_add_bias_, int64_t{rows} * width, x,
                  static_cast<const float*>(bias.as<float>() + offset),
                  static_cast<long long>(rows), static_cast<int>(width));
}

absl::Status DeviceBackend::copy_cols(const float* src, int64_t src_width, int64_t col0,
                                      float* dst, int64_t width, int n) {
  return run_over(k_copy_cols_, int64_t{n} * width, src, static_cast<int>(src_width),
                  static_cast<int>(col0), dst, static_cast<int>(width),
                  static_cast<long long>(n));
}

// proj = W_o · Attention(q, k, v) of xn (+ b_o), q = W_q xn (+ b_q), etc.,
// with QK-norm and RoPE on q and k; as worker/cpu/forward.cc's
// attention_step.
absl::Status DeviceBackend::attention(int il, int n) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const arch::BlockRecipe& r = hp_.recipe;
  const int layer = il - range_.first;
  const int dk = hp_.head_dim_k, dv = hp_.head_dim_v;
  const int64_t qw = q_width(), kw = k_width(), vw = v_width();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  const float* xn = xn_.as<float>();
  if (w.wqkv.present()) {  // phi3: [q | k | v] per row
    float* fused = fused_.as<float>();
    STRATA_RETURN_IF_ERROR(matvec(w.wqkv, xn, n, fused));
    STRATA_RETURN_IF_ERROR(copy_cols(fused, qw + kw + vw, 0, q, qw, n));
    STRATA_RETURN_IF_ERROR(copy_cols(fused, qw + kw + vw, qw, k, kw, n));
    STRATA_RETURN_IF_ERROR(copy_cols(fused, qw + kw + vw, qw + kw, v, vw, n));
  } else {
    STRATA_RETURN_IF_ERROR(matvec(w.wq, xn, n, q));
    STRATA_RETURN_IF_ERROR(matvec(w.wk, xn, n, k));
    STRATA_RETURN_IF_ERROR(matvec(w.wv, xn, n, v));
  }
  STRATA_RETURN_IF_ERROR(add_bias(q, w.bq, n, qw));
  STRATA_RETURN_IF_ERROR(add_bias(k, w.bk, n, kw));
  STRATA_RETURN_IF_ERROR(add_bias(v, w.bv, n, vw));
  if (r.qk_norm) {
    STRATA_RETURN_IF_ERROR(rms_norm(q, w.q_norm, n * hp_.n_head, dk, q));
    STRATA_RETURN_IF_ERROR(rms_norm(k, w.k_norm, n * hp_.n_head_kv, dk, k));
  }
  if (r.qk_norm_full) {  // olmoe: over each whole row
    STRATA_RETURN_IF_ERROR(rms_norm(q, w.q_norm, n, static_cast<int>(qw), q));
    STRATA_RETURN_IF_ERROR(rms_norm(k, w.k_norm, n, static_cast<int>(kw), k));
  }

  // RoPE: the angles of this layer's (base, scale) for the step's
  // positions, made on the host once per step and setting.
  const arch::LayerRope& lr = hp_.rope[static_cast<size_t>(il)];
  RopeTable* table = nullptr;
  for (RopeTable& t : rope_tables_) {
    if (t.step == step_ && t.base == lr.freq_base && t.scale == lr.freq_scale) table = &t;
  }
  if (table == nullptr) {
    table = &rope_tables_[rope_next_];
    rope_next_ = (rope_next_ + 1) % 2;
    kernels::RopeParams rope;
    rope.order = r.rope == arch::RopeStyle::kNeox ? kernels::RopeOrder::kNeox
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
    reference::ops::rope_angles(positions_.data(), n, rope, cs_host_.data(), host_pool_);
    STRATA_RETURN_IF_ERROR(api_->upload(table->cs.get(), cs_host_.data(),
                                        static_cast<size_t>(n) * (hp_.n_rot / 2) * 2 *
                                            sizeof(float)));
    table->base = lr.freq_base;
    table->scale = lr.freq_scale;
    table->step = step_;
  }
  const int neox = r.rope == arch::RopeStyle::kNeox ? 1 : 0;
  const float* cs = table->cs.as<float>();
  const int half = hp_.n_rot / 2;
  STRATA_RETURN_IF_ERROR(run_over(k_rope_, int64_t{n} * hp_.n_head * half, q, cs, n, hp_.n_head,
                                  dk, hp_.n_rot, neox));
  STRATA_RETURN_IF_ERROR(run_over(k_rope_, int64_t{n} * hp_.n_head_kv * half, k, cs, n,
                                  hp_.n_head_kv, dk, hp_.n_rot, neox));

  for (const StepSlice& s : slices_) {
    STRATA_RETURN_IF_ERROR(run_over(
        k_store_kv_, int64_t{s.rows} * std::max(kw, vw),
        static_cast<const float*>(k + int64_t{s.row0} * kw),
        static_cast<const float*>(v + int64_t{s.row0} * vw), k_cache(*s.seq, layer),
        v_cache(*s.seq, layer), s.pos0, s.rows, static_cast<int>(kw), static_cast<int>(vw)));
  }
  float scale = hp_.attention_scale;
  if (r.scale_query) {  // gemma, phi3: q scaled before attention
    STRATA_RETURN_IF_ERROR(run_over(k_scale_, n * qw, q, hp_.attention_scale,
                                    static_cast<long long>(n * qw)));
    scale = 1.0f;
  }
  // Each row attends to its sequence's positions up to its own (within
  // the window on sliding-window layers).
  const int window = hp_.sliding[static_cast<size_t>(il)] ? hp_.sliding_window : 0;
  const int64_t attn_width = int64_t{hp_.n_head} * dv;
  const float* sinks = w.sinks.get() != nullptr ? w.sinks.as<float>() : nullptr;
  for (const StepSlice& s : slices_) {
    const auto* kc = static_cast<const unsigned short*>(k_cache(*s.seq, layer));
    const auto* vc = static_cast<const unsigned short*>(v_cache(*s.seq, layer));
    if (s.rows == 1) {  // a decode row
      const int n_kv = s.pos0 + 1;
      const int begin = window > 0 ? std::max(0, n_kv - window) : 0;
      STRATA_RETURN_IF_ERROR(run(k_attention_, static_cast<unsigned>(hp_.n_head),
                                 ck::kStepAttentionThreads,
                                 static_cast<const float*>(q + s.row0 * qw), kc, vc,
                                 attn_.as<float>() + s.row0 * attn_width, scores_.as<float>(),
                                 n_kv, begin, hp_.n_head, hp_.n_head_kv, dk, dv, scale,
                                 hp_.attn_softcap, sinks));
      continue;
    }
    // A prompt chunk: attention_rows_ rows a launch, the same numbers.
    for (int t0 = 0; t0 < s.rows; t0 += attention_rows_) {
      const int rows = std::min(attention_rows_, s.rows - t0);
      const int row = s.row0 + t0;
      STRATA_RETURN_IF_ERROR(run(
          k_attention_rows_, static_cast<unsigned>(hp_.n_head * rows), ck::kStepAttentionThreads,
          static_cast<const float*>(q + row * qw), kc, vc, attn_.as<float>() + row * attn_width,
          scores_.as<float>(), max_ctx_, s.pos0 + t0, window, hp_.n_head, hp_.n_head_kv, dk, dv,
          scale, hp_.attn_softcap, sinks));
    }
  }
  STRATA_RETURN_IF_ERROR(matvec(w.wo, attn_.as<float>(), n, proj_.as<float>()));
  return add_bias(proj_.as<float>(), w.bo, n, hp_.n_embd);
}

absl::Status DeviceBackend::ffn(const DeviceMatrix& gate_m, const DeviceMatrix& up_m,
                                const DeviceMatrix& down_m, int64_t f, const float* x, int n,
                                float* y, const DeviceBuffer* gate_bias,
                                const DeviceBuffer* up_bias, const DeviceBuffer* down_bias,
                                int bias_row) {
  float* gate = gate_.as<float>();  // [n][f]
  float* up = up_.as<float>();      // [n][f]
  if (!gate_m.present()) {  // one [gate | up] matrix (phi3)
    float* fused = fused_.as<float>();
    STRATA_RETURN_IF_ERROR(matvec(up_m, x, n, fused));
    STRATA_RETURN_IF_ERROR(copy_cols(fused, 2 * f, 0, gate, f, n));
    STRATA_RETURN_IF_ERROR(copy_cols(fused, 2 * f, f, up, f, n));
  } else {
    STRATA_RETURN_IF_ERROR(matvec(gate_m, x, n, gate));
    STRATA_RETURN_IF_ERROR(matvec(up_m, x, n, up));
  }
  if (gate_bias != nullptr) STRATA_RETURN_IF_ERROR(add_bias(gate, *gate_bias, n, f, bias_row * f));
  if (up_bias != nullptr) STRATA_RETURN_IF_ERROR(add_bias(up, *up_bias, n, f, bias_row * f));
  const int64_t nf = int64_t{n} * f;
  switch (hp_.recipe.activation) {
    case arch::FfnActivation::kSilu:
      STRATA_RETURN_IF_ERROR(run_over(k_swiglu_, nf, static_cast<const float*>(gate),
                                      static_cast<const float*>(up), gate,
                                      static_cast<long long>(nf)));
      break;
    case arch::FfnActivation::kGeluTanh:
      STRATA_RETURN_IF_ERROR(run_over(k_geglu_, nf, static_cast<const float*>(gate),
                                      static_cast<const float*>(up), gate,
                                      static_cast<long long>(nf)));
      break;
    case arch::FfnActivation::kSwigluOai:
      STRATA_RETURN_IF_ERROR(run_over(k_swiglu_oai_, nf, static_cast<const float*>(gate),
                                      static_cast<const float*>(up), gate,
                                      static_cast<long long>(nf), reference::ops::kGptOssAlpha,
                                      reference::ops::kGptOssLimit));
      break;
  }
  STRATA_RETURN_IF_ERROR(matvec(down_m, gate, n, y));
  if (down_bias != nullptr) {
    STRATA_RETURN_IF_ERROR(add_bias(y, *down_bias, n, hp_.n_embd, int64_t{bias_row} * hp_.n_embd));
  }
  return absl::OkStatus();
}

// proj = Σ_j w_j · Expert_{e_j}(xn) (+ sigmoid(g · xn) · Shared(xn)), as
// worker/cpu/moe.cc: the router on the device, the routing on the host
// (reference::ops::moe_route on the downloaded logits), each used expert
// once over its gathered rows, the slots' weighted sum in slot order.
absl::Status DeviceBackend::moe(int il, int n) {
  const DeviceExperts& x = layers_[static_cast<size_t>(il - range_.first)].moe;
  const arch::MoeParams& p = hp_.moe;
  const int64_t e = hp_.n_embd;
  const int k = p.n_expert_used;
  const float* xn = xn_.as<float>();
  float* proj = proj_.as<float>();

  STRATA_RETURN_IF_ERROR(matvec(x.router, xn, n, router_logits_.as<float>()));
  STRATA_RETURN_IF_ERROR(add_bias(router_logits_.as<float>(), x.router_bias, n, p.n_expert));
  STRATA_RETURN_IF_ERROR(api_->download(router_host_.data(), router_logits_.get(),
                                        static_cast<size_t>(n) * p.n_expert * sizeof(float)));
  reference::ops::MoeRouting routing;
  routing.n_expert = p.n_expert;
  routing.n_expert_used = k;
  routing.gating = moe_gating(p.gating);
  routing.norm_weights = p.norm_weights;
  routing.weights_scale = p.weights_scale;
  reference::ops::moe_route(router_host_.data(), n, routing, route_experts_.data(),
                            route_weights_.data(), route_scratch_.data());

  const bool biased = x.gate_bias.get() != nullptr;
  for (int r0 = 0; r0 < n; r0 += moe_rows()) {
    const int rows = std::min(moe_rows(), n - r0);
    const int n_slots = rows * k;
    const int32_t* experts = route_experts_.data() + int64_t{r0} * k;
    // Group the slots by expert (counting sort, rows ascending within one).
    std::fill(expert_begin_.begin(), expert_begin_.end(), 0);
    for (int s = 0; s < n_slots; ++s) ++expert_begin_[static_cast<size_t>(experts[s]) + 1];
    for (int ex = 0; ex < p.n_expert; ++ex) expert_begin_[ex + 1] += expert_begin_[ex];
    std::copy(expert_begin_.begin(), expert_begin_.end() - 1, expert_fill_.begin());
    for (int s = 0; s < n_slots; ++s) {
      const int32_t at = expert_fill_[static_cast<size_t>(experts[s])]++;
      grouped_slots_[static_cast<size_t>(at)] = s;
      grouped_rows_[static_cast<size_t>(at)] = r0 + s / k;
    }
    const size_t ints = static_cast<size_t>(n_slots) * sizeof(int32_t);
    STRATA_RETURN_IF_ERROR(api_->upload(slot_rows_.get(), grouped_rows_.data(), ints));
    STRATA_RETURN_IF_ERROR(api_->upload(slot_ids_.get(), grouped_slots_.data(), ints));
    STRATA_RETURN_IF_ERROR(api_->upload(slot_weights_.get(),
                                        route_weights_.data() + int64_t{r0} * k,
                                        static_cast<size_t>(n_slots) * sizeof(float)));
    for (int ex = 0; ex < p.n_expert; ++ex) {
      const int begin = expert_begin_[static_cast<size_t>(ex)];
      const int m = expert_begin_[static_cast<size_t>(ex) + 1] - begin;
      if (m == 0) continue;
      STRATA_RETURN_IF_ERROR(run_over(k_gather_, int64_t{m} * e, xn,
                                      static_cast<const int*>(slot_rows_.as<int>() + begin),
                                      moe_x_.as<float>(), m, static_cast<int>(e)));
      const size_t i = static_cast<size_t>(ex);
      STRATA_RETURN_IF_ERROR(ffn(x.gate[i], x.up[i], x.down[i], p.n_ff_expert,
                                 moe_x_.as<float>(), m, moe_y_.as<float>(),
                                 biased ? &x.gate_bias : nullptr, biased ? &x.up_bias : nullptr,
                                 biased ? &x.down_bias : nullptr, ex));
      STRATA_RETURN_IF_ERROR(run_over(k_scatter_, int64_t{m} * e,
                                      static_cast<const float*>(moe_y_.as<float>()),
                                      static_cast<const int*>(slot_ids_.as<int>() + begin),
                                      expert_out_.as<float>(), m, static_cast<int>(e)));
    }
    STRATA_RETURN_IF_ERROR(run_over(k_moe_sum_, int64_t{rows} * e,
                                    static_cast<const float*>(expert_out_.as<float>()),
                                    static_cast<const float*>(slot_weights_.as<float>()),
                                    proj + int64_t{r0} * e, rows, k, static_cast<int>(e)));
  }
  if (!x.shared_down.present()) return absl::OkStatus();
  // The shared expert on every row, scaled by sigmoid(g), g the one-row
  // router's logit.
  STRATA_RETURN_IF_ERROR(ffn(x.shared_gate, x.shared_up, x.shared_down, p.n_ff_shared, xn, n,
                             moe_y_.as<float>(), nullptr, nullptr, nullptr, 0));
  STRATA_RETURN_IF_ERROR(matvec(x.shared_router, xn, n, shared_gate_.as<float>()));
  return run_over(k_add_shared_, int64_t{n} * e, proj,
                  static_cast<const float*>(moe_y_.as<float>()),
                  static_cast<const float*>(shared_gate_.as<float>()), n, static_cast<int>(e));
}

// One block (worker/cpu/forward.cc's llama_block and gemma_block):
//   x = x + Post(Attention(RMSNorm(x)));  x = x + Post(FFN(RMSNorm(x)))
// with Post the gemma families' RMSNorm of a sublayer's output (none for
// the others) and FFN dense or the mixture of experts.
absl::Status DeviceBackend::block(int il, int n) {
  const DeviceLayer& w = layers_[static_cast<size_t>(il - range_.first)];
  const int e = hp_.n_embd;
  float* x = x_.as<float>();
  float* xn = xn_.as<float>();
  float* proj = proj_.as<float>();
  STRATA_RETURN_IF_ERROR(rms_norm(x, w.attn_norm, n, e, xn));
  STRATA_RETURN_IF_ERROR(attention(il, n));
  if (w.post_attn_norm.get() != nullptr) {
    STRATA_RETURN_IF_ERROR(rms_norm(proj, w.post_attn_norm, n, e, proj));
  }
  STRATA_RETURN_IF_ERROR(add(x, proj, x, int64_t{n} * e));
  STRATA_RETURN_IF_ERROR(rms_norm(x, w.ffn_norm, n, e, xn));
  if (w.moe.present()) {
    STRATA_RETURN_IF_ERROR(moe(il, n));
  } else {
    STRATA_RETURN_IF_ERROR(
        ffn(w.gate, w.up, w.down, hp_.n_ff, xn, n, proj, nullptr, nullptr, nullptr, 0));
  }
  if (w.post_ffn_norm.get() != nullptr) {
    STRATA_RETURN_IF_ERROR(rms_norm(proj, w.post_ffn_norm, n, e, proj));
  }
  return add(x, proj, x, int64_t{n} * e);
}

// logits of head_rows_: RMSNorm with output_norm (into xn_, rows in order),
// the head, the final soft cap (gemma2), downloaded into logits_host_.
absl::Status DeviceBackend::head() {
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
  const int64_t n_logits = int64_t{rows} * n_vocab_;
  const size_t need = static_cast<size_t>(n_logits) * sizeof(float);
  if (logits_.bytes() < need) STRATA_ASSIGN_OR_RETURN(logits_, space(need));
  const DeviceMatrix& out = tied_output_ ? token_embd_ : output_;
  STRATA_RETURN_IF_ERROR(matvec(out, xn, rows, logits_.as<float>()));
  if (hp_.final_softcap > 0.0f) {
    STRATA_RETURN_IF_ERROR(run_over(k_soft_cap_, n_logits, logits_.as<float>(),
                                    hp_.final_softcap, static_cast<long long>(n_logits)));
  }
  logits_host_.resize(static_cast<size_t>(n_logits));
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
  ++step_;  // new positions: the RoPE tables of the last step are stale

  float* x = x_.as<float>();
  if (is_first()) {
    STRATA_RETURN_IF_ERROR(api_->upload(ids_.get(), req.tokens.data(),
                                        static_cast<size_t>(n) * sizeof(int32_t)));
    const int64_t units = int64_t{n} * ((e + 31) / 32);
    const int64_t most = int64_t{8} * std::max(api_->multiprocessors(), 1);
    const auto grid = static_cast<unsigned>(
        std::clamp<int64_t>((units + ck::kStepMatvecThreads - 1) / ck::kStepMatvecThreads, 1,
                            most));
    STRATA_RETURN_IF_ERROR(run(token_embd_.get_rows, grid, ck::kStepMatvecThreads,
                               token_embd_.data, static_cast<const int*>(ids_.as<int>()), x, n,
                               static_cast<int>(e), token_embd_.row_bytes));
    if (hp_.recipe.embedding_scale != 1.0f) {  // gemma
      STRATA_RETURN_IF_ERROR(run_over(k_scale_, n * e, x, hp_.recipe.embedding_scale,
                                      static_cast<long long>(n * e)));
    }
  } else {
    STRATA_RETURN_IF_ERROR(api_->upload(x, req.hidden.data(), req.hidden.size() * sizeof(float)));
  }
  for (int il = range_.first; il < range_.last; ++il) {
    STRATA_RETURN_IF_ERROR(block(il, n));
    if (req.block_hashes != nullptr) {
      hidden_host_.resize(static_cast<size_t>(n * e));
      STRATA_RETURN_IF_ERROR(
          api_->download(hidden_host_.data(), x, hidden_host_.size() * sizeof(float)));
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
    STRATA_RETURN_IF_ERROR(head());
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
