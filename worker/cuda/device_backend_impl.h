// The device backend's class and its pieces (private to worker/cuda/): the
// public entry is make_device_backend (device_backend.h). Loading (weights
// uploaded, kernels loaded, the tuner's choices) is in device_weights.cc;
// sequences and the factory in device_backend.cc; the step in
// device_forward.cc. Shapes are per row unless said; B = max_batch rows.
#pragma once

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
#include "kernels/cpu/reference/ops/swiglu_oai.h"
#include "model/ggml_type.h"
#include "worker/cuda/kernel_tuner.h"
#include "worker/cuda/kernels/flash_attention_source.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/step_kernels.h"
#include "worker/finite_scan.h"
#include "worker/shard_tensors.h"
#include "worker/trace.h"

namespace strata::worker::device {

namespace ck = cuda_kernels;

#define STRATA_DEVICE_RETURN_IF_ERROR(expr)      \
  do {                                            \
    if (absl::Status _st = (expr); !_st.ok()) {   \
      return _st;                                 \
    }                                             \
  } while (0)

#define STRATA_DEVICE_ASSIGN_OR_RETURN(lhs, expr)     \
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
  long long row_bytes = 0;  // a device row's bytes (weight_layout.h)
  // [w][i]: the kernel (its multi-output form, ck::matvec3_entry, which
  // serves every matrix) built for ROW_WARPS kStepRowWarps[w] and NCOLS
  // kStepMatvecColumns[i]; loaded when first needed (DeviceBackend::
  // kernel_of): the tuner's measurements, then the chosen split's, at load.
  mutable std::array<std::array<KernelHandle, ck::kStepMatvecColumns.size()>,
                     ck::kStepRowWarps.size()>
      matvec;
  // Matrices held as one: 3 for [q | k | v] rows, 2 for [gate | up] (phi3's
  // fused tensors, or the separate ones of one type joined at load).
  int parts = 1;
  int split = 0;  // the w the step launches (the tuner's choice)
  int threads = ck::kStepMatvecBlock;  // its launches' block (the tuner's choice)
  // How its input rows are rounded first (ck::round_kind of type): the
  // activations as the cpu backend multiplies them.
  int round = ck::kRoundNone;
  // The tensor-core kernel (prompt chunks), loaded at load when the backend
  // uses it; none for F32 and F16 (id -1). mma_i8: its int8 form, for the
  // types that have one when DeviceBackendOptions::mma_int8 (then it is the
  // one the step runs).
  KernelHandle mma;
  KernelHandle mma_i8;
  // mma on sm_90's warpgroup instructions (wgmma_source.h), loaded in its
  // place where DeviceBackendOptions::wgmma and the device is 9.0 and the
  // slices take the f16 kernel; id -1 otherwise.
  KernelHandle mma_wg;
  // Its products take int8 rows (quantized()): an int8 matvec build or
  // tensor-core kernel.
  bool takes_int8_rows() const { return int8 || mma_i8.id >= 0 || mma_wg.id >= 0; }
  KernelHandle get_rows;
  // A mixture's expert slots of this tensor in one launch (the first
  // expert's; ck::matvec_ids_entry or its int8 form, split's NCOLS 1 build),
  // loaded at load (DeviceBackend::load_ids_kernel).
  mutable KernelHandle matvec_ids;
  // Its matvec builds are the int8 form (matvec3_i8_entry, on quantized()
  // rows; DeviceBackendOptions::matvec_int8 and a type that has one), not
  // the float form on paired() rows.
  bool int8 = false;
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
  // Every expert of gate, up and down takes its tensor's first expert's
  // kernel build (split, block, int8 form; set after the tuner chose them):
  // expert_slots may launch each tensor's slots as one.
  bool one_build = false;
  bool present() const { return router.present(); }
};

struct DeviceLayer {
  DeviceBuffer attn_norm, ffn_norm;            // [n_embd] f32
  DeviceBuffer post_attn_norm, post_ffn_norm;  // gemma; empty when absent
  DeviceBuffer bq, bk, bv, bo;                 // biases, empty when absent
  DeviceBuffer q_norm, k_norm;                 // [dk] (qwen3, gemma3) or whole rows (olmoe)
  DeviceBuffer sinks;                          // [n_head] (gpt-oss)
  // wqkv: [q | k | v] rows (parts 3), phi3's fused tensor or q, k and v of
  // one type joined at load; then wq, wk, wv are empty.
  DeviceMatrix wq, wk, wv, wqkv, wo;
  // gate: [gate | up] rows (parts 2), phi3's fused ffn_up or gate and up of
  // one type joined at load; then up is empty.
  DeviceMatrix gate, up, down;
  DeviceExperts moe;
};

// One sequence: its length and its caches, one buffer: per layer of the
// shard K [n_ctx][k_width] then V [n_ctx][v_width], f16.
struct Sequence {
  int n_ctx = 0;
  int length = 0;
  DeviceBuffer kv;
};

// Rows x [n][width] that matrices are about to multiply, and which of
// their roundings (ck::kRound*) DeviceBackend::paired made last into its
// buffer of that kind: each kind is made once for the matrices that share
// these rows, and made again if another PairedRows used the buffer since.
struct PairedRows {
  const float* x = nullptr;
  int n = 0;
  int64_t width = 0;
  std::array<uint64_t, ck::kRoundKinds> stamp{};
  std::array<uint64_t, ck::kRoundKinds> stamp_i8{};  // quantized()'s, the same way
};

// Rows as int8 (strata_quantize_rows): q [n][width], and per 32-value unit
// its scale d and sum of q, [n][width / 32].
struct Int8Rows {
  const signed char* q = nullptr;
  const float* d = nullptr;
  const float* sums = nullptr;
};
// One buffer holds rows rows of width (a multiple of 32) int8 values: q,
// then d, then sums. Its bytes, and its parts at `base`.
inline size_t int8_rows_bytes(int64_t rows, int64_t width) {
  const auto values = static_cast<size_t>(rows * width);
  return values + 2 * (values / 32) * sizeof(float);
}
inline Int8Rows int8_rows_at(const unsigned char* base, int64_t rows, int64_t width) {
  const auto values = static_cast<size_t>(rows * width);
  Int8Rows r;
  r.q = reinterpret_cast<const signed char*>(base);
  r.d = reinterpret_cast<const float*>(base + values);
  r.sums = r.d + values / 32;
  return r;
}

// A matrix's input rows [n][width] as its matvec kernel takes them
// (DeviceMatrix::int8): the paired floats x, or the int8 rows q.
struct MatvecRows {
  const float* x = nullptr;
  Int8Rows q;
  // The rows from row `row` on.
  MatvecRows from(int64_t row, int64_t width) const {
    MatvecRows r = *this;
    if (x != nullptr) r.x = x + row * width;
    if (q.q != nullptr) {
      r.q.q = q.q + row * width;
      r.q.d = q.d + row * (width / 32);
      r.q.sums = q.sums + row * (width / 32);
    }
    return r;
  }
};

// strata_moe_route's gating argument (sources.h) for a family's gating.
inline int moe_gating(arch::ExpertGating g) {
  switch (g) {
    case arch::ExpertGating::kSoftmax: return cuda_kernels::kMoeGatingSoftmax;
    case arch::ExpertGating::kSigmoid: return cuda_kernels::kMoeGatingSigmoid;
    case arch::ExpertGating::kSoftmaxWeight: return cuda_kernels::kMoeGatingSoftmaxWeight;
  }
  return cuda_kernels::kMoeGatingSoftmax;
}

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(std::shared_ptr<const gguf::GgufModel> model, const arch::Hyperparameters& hp,
                BlockRange range, const DeviceBackendOptions& options,
                std::unique_ptr<DeviceApi> api)
      : model_(std::move(model)), hp_(hp), range_(range), options_(options),
        api_(std::move(api)), host_pool_(1) {}
  ~DeviceBackend() override { write_kernel_profile(); }

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
  // Whether m's chunks of kStepMatvecColumns[i] columns run on the int8
  // form's tensor-core build (matvec3_mma_entry; the same bits as dp4a's).
  bool matvec_on_tensor_cores(const DeviceMatrix& m, size_t i) const;
  // The matrices `names` ([n_in, n_out_i] of one type) joined as one [q | k
  // | v]-style matrix on the device; empty when their types differ.
  absl::StatusOr<DeviceMatrix> upload_joined(const std::vector<std::string>& names, int64_t n_in,
                                             const std::vector<int64_t>& n_outs);
  // The shard's matrices; `per_slice`: those step_matvec3 runs a slice's
  // rows through (a block's attention and feed-forward and the shared
  // expert: the tensor-core kernel's users); experts, routers, the head and
  // the table take matvec.
  void matrices(std::vector<DeviceMatrix*>* all, std::vector<DeviceMatrix*>* per_slice);
  // Every matrix's split-K and block choice: forced (options_.row_warps), measured
  // or read by the tuner (options_.tune), or 1 warp a row.
  absl::Status choose_splits();
  // options_.kernel_profile_path's JSON, once profiling began (a failure to
  // write it is told on stderr: it runs in the destructor).
  void write_kernel_profile() const;
  // Loads every matrix's chosen matvec builds and, for `per_slice` (the
  // matrices step_matvec3 takes), its type's tensor-core builds: the f16
  // kernel and the form the step runs (the first the options allow, or
  // with `tuner` the fastest, read or measured: prefill_forms).
  absl::Status load_chosen(const std::vector<DeviceMatrix*>& all,
                           const std::vector<DeviceMatrix*>& per_slice, KernelTuner* tuner);
  // The tensor-core forms options_ and the device allow m, in the order
  // the backend prefers them (kernel_tuner.h PrefillForm).
  std::vector<PrefillForm> prefill_forms(const DeviceMatrix& m) const;
  // m's kernel for `form` loaded and set, the others' cleared (launch_mma
  // runs the one set; the f16 kernel m.mma stays: it marks that m has
  // tensor cores).
  absl::Status set_prefill_form(DeviceMatrix& m, PrefillForm form);
  // The time of one chunk of `rows` zero rows on each of `forms` (m's
  // kernels for them loaded here); `scratch` holds the rows and outputs
  // of the widest per-slice matrix, made on first use.
  absl::StatusOr<std::vector<double>> time_prefill(DeviceMatrix& m,
                                                   const std::vector<PrefillForm>& forms,
                                                   int rows, DeviceBuffer& scratch,
                                                   int64_t widest, int64_t longest);
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
    // The quantizing kernels give each warp whole units (a warp's shuffles
    // need all of its lanes in the loop): whole warps a block.
    static_assert(t % 32 == 0, "run_over's blocks are whole warps");
    const int64_t most = int64_t{8} * std::max(api_->multiprocessors(), 1);
    const auto grid = static_cast<unsigned>(std::clamp<int64_t>((total + t - 1) / t, 1, most));
    return run(k, grid, t, args...);
  }

  // Rows to multiply (see PairedRows): x [n][width].
  static PairedRows rows_of(const float* x, int n, int64_t width) {
    PairedRows r;
    r.x = x;
    r.n = n;
    r.width = width;
    return r;
  }
  // in's rows as m's weights pair with them (m.round): in.x itself for
  // kRoundNone, else paired_[m.round], rounded now unless `in` made it and
  // no other rows have been rounded into it since.
  absl::StatusOr<const float*> paired(const DeviceMatrix& m, PairedRows& in);
  // in's rows quantized as m's weights pair with them (Q8_0 or Q8_K kinds),
  // into int8_[m.round], made once as paired() makes its values.
  absl::StatusOr<Int8Rows> quantized(const DeviceMatrix& m, PairedRows& in);
  // in's rows for m's matvec kernel: quantized() when m.int8, else paired().
  absl::StatusOr<MatvecRows> matvec_rows(const DeviceMatrix& m, PairedRows& in);
  // y [n][m.n_out] = x [n][m.n_in] · mᵀ, in chunks of the built column
  // counts, x rounded first as the cpu backend does (paired()).
  absl::Status matvec(const DeviceMatrix& m, PairedRows& x, float* y) {
    return matvec3(m, x, y, y, y, m.n_out, 0);
  }
  // The same with the product's columns [0, n0) into y0 [n][n0], [n0, n0 +
  // n1) into y1 [n][n1], the rest into y2 [n][n_out - n0 - n1] (a matrix of
  // several parts): one launch a chunk.
  absl::Status matvec3(const DeviceMatrix& m, PairedRows& x, float* y0, float* y1, float* y2,
                       int n0, int n1);
  // matvec3's launches on rows already made (matvec_rows, [n][m.n_in]).
  absl::Status launch_matvec3(const DeviceMatrix& m, const MatvecRows& x, int n, float* y0,
                              float* y1, float* y2, int n0, int n1);
  // matvec3 over the step's rows (x [n][n_in] in the step's row order):
  // each run of slices of at least options_.mma_min_rows rows on m's
  // tensor-core kernel (when it has one), the others on matvec3.
  absl::Status step_matvec3(const DeviceMatrix& m, PairedRows& x, float* y0, float* y1,
                            float* y2, int n0, int n1);
  // One run of `rows` rows on m's tensor-core form (the int8 or wgmma
  // kernel on q's rows when m has one, else the f16 kernel on x's).
  absl::Status launch_mma(const DeviceMatrix& m, const Int8Rows* q, const float* x, int rows,
                          float* y0, float* y1, float* y2, int n0, int n1);
  absl::Status step_matvec(const DeviceMatrix& m, PairedRows& x, float* y) {
    return step_matvec3(m, x, y, y, y, m.n_out, 0);
  }
  // y [rows][dim] = RMSNorm(x) * weight.
  absl::Status rms_norm(const float* x, const DeviceBuffer& weight, int rows, int dim, float* y);
  absl::Status add(const float* a, const float* b, float* y, int64_t n);
  // x += delta, then y = RMSNorm(x) * weight, one launch (the same bits).
  absl::Status add_rms_norm(float* x, const float* delta, const DeviceBuffer& weight, int rows,
                            int dim, float* y);
  // The kind of int8 rows (ck::kRound*) m's products take (m.int8 or its
  // int8 tensor-core kernel: quantized()), or kRoundNone: what a kernel
  // that makes m's input rows can quantize in the same launch.
  int int8_kind(const DeviceMatrix& m) const;
  // y = RMSNorm(x (+= delta when delta is given)) * weight, and when kind is
  // not kRoundNone y as int8 rows of kind in the same launch (the fused
  // entries), marked made for `rows` (y's PairedRows: quantized() then
  // launches nothing).
  absl::Status norm_rows(float* x, const float* delta, const DeviceBuffer& weight, int n,
                         int dim, float* y, PairedRows& rows, int kind);
  // The int8 rows buffer of `kind` for n rows of `width`, checked.
  absl::StatusOr<Int8Rows> int8_rows(int kind, int n, int64_t width);
  // `in`'s int8 rows of `kind` are int8_[kind] as made now.
  void mark_quantized(PairedRows& in, int kind) {
    const auto k = static_cast<size_t>(kind);
    in.stamp_i8[k] = int8_stamp_[k] = ++stamps_;
  }
  absl::Status add_bias(float* x, const DeviceBuffer& bias, int rows, int64_t width,
                        int64_t offset = 0);
  absl::Status block(int il, int n);
  // xn: the block's normed rows (rows_of(xn_)), perhaps quantized already.
  absl::Status attention(int il, int n, PairedRows& xn);
  // y [n][n_embd] = W_down act(W_gate x + b_gate, W_up x + b_up) + b_down, f
  // wide (the bias buffers' rows `bias_row`; empty buffers: none). Uses
  // gate_ and up_. step_rows: x is the step's rows (step_matvec3), else
  // gathered rows (an expert's: matvec3). x: [n][n_embd] rows.
  absl::Status ffn(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down,
                   int64_t f, PairedRows& x, int n, float* y, const DeviceBuffer* gate_bias,
                   const DeviceBuffer* up_bias, const DeviceBuffer* down_bias, int bias_row,
                   bool step_rows);
  absl::Status moe(int il, int n);
  absl::Status activate(float* gate, const float* up, int n, int64_t f,
                        const DeviceMatrix& down_m, PairedRows& act);
  bool expert_slots_fit(const DeviceExperts& x, int n) const;
  // m.matvec_ids, loaded once (at load for every expert matrix whose slots
  // may run: a step replayed from a graph cannot load kernels).
  absl::Status load_ids_kernel(const DeviceMatrix& m);
  absl::Status expert_product(const std::vector<DeviceMatrix>& experts, PairedRows& in,
                              int x_div, float* y, int slots);
  absl::Status expert_slots(const DeviceExperts& x, int n, PairedRows& xn_rows, float* proj);
  absl::Status gathered_experts(const DeviceExperts& x, int il, int n, float* proj);
  absl::Status head();
  absl::Status upload_rope_tables(int n);
  absl::Status launch_step(int n, std::vector<uint64_t>* hashes);
  bool graph_step(const ForwardRequest& req) const;
  // Releases the captured decode graphs (a buffer they name is made anew).
  void drop_graphs();
  // Fills and uploads the decode table (decode_, n_decode_) of the step.
  absl::Status upload_decode_table();

  std::shared_ptr<const gguf::GgufModel> model_;
  arch::Hyperparameters hp_;
  BlockRange range_;
  DeviceBackendOptions options_;
  std::unique_ptr<DeviceApi> api_;
  ThreadPool host_pool_;  // rope_angles on the host

  int n_vocab_ = 0;
  std::deque<DeviceBuffer> weights_;  // every matrix's bytes
  DeviceMatrix token_embd_;           // first stage, or the last's tied head
  DeviceBuffer output_norm_;
  std::vector<float> output_norm_host_;   // [n_embd] (embeddings, on the host)
  std::vector<float> embeddings_host_;    // [embedding slices][n_embd]
  std::vector<float> embedding_rows_;     // the slice's rows, downloaded
  DeviceMatrix output_;
  bool tied_output_ = false;
  std::vector<float> rope_freqs_;  // [n_rot / 2] (llama3), empty when absent
  std::vector<DeviceLayer> layers_;

  // Flash attention of tensor-core slices (prompt chunks of mma_min_rows
  // rows or more); id -1 when the head size has no build (dk != dv, or not
  // in ck::kStepFlashHeadDims) or the tensor cores are off.
  KernelHandle k_flash_;
  KernelHandle k_round_rows_;   // inputs as their matrices' weights pair with them
  KernelHandle k_quantize_rows_;  // the same as int8 (the int8 tensor-core kernel's)
  KernelHandle k_argmax_rows_;  // the kArgmax rows' picks
  KernelHandle k_top_k_rows_;   // the kTopK rows' candidates
  KernelHandle k_moe_route_;    // a mixture's routing (moe_route.cuh)
  KernelHandle k_attention_rows_, k_attention_batch_, k_store_kv_batch_, k_add_rms_, k_rope_qk_;
  // Decode attention that also quantizes o's rows (all-decode steps whose o
  // takes int8 rows), with its per-row count of finished heads (zeros
  // between launches; [max_batch]).
  KernelHandle k_attention_batch_q_;
  DeviceBuffer attn_done_;
  // Decode attention split over the keys (options_.attention_splits):
  // splits_ blocks a head at most, split_rows_ rows a launch, with their
  // scratch: each chunk's maximum and sum [split_rows_][n_head][splits_][2],
  // its weighed values [split_rows_][n_head][splits_][dv], and each head's
  // count of finished chunks [split_rows_][n_head] (zeros between launches).
  // split_step_: this step has a decode row longer than a chunk.
  KernelHandle k_attention_split_scores_, k_attention_split_weigh_;
  int splits_ = 1;
  int split_rows_ = 1;
  DeviceBuffer attn_part_, attn_part_o_, attn_head_done_;
  bool split_step_ = false;
  KernelHandle k_rms_q_, k_add_rms_q_, k_swiglu_q_;  // the quantizing forms
  KernelHandle k_rope_store_kv_batch_;  // a decode step's RoPE and KV store
  KernelHandle k_rms_, k_swiglu_, k_add_, k_add_bias_, k_store_kv_,
      k_scale_, k_soft_cap_, k_geglu_, k_swiglu_oai_, k_gather_, k_scatter_,
      k_moe_sum_, k_add_shared_, k_add_bias_ids_;

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
  DeviceBuffer scores_;  // [attention_rows_][n_head][max_ctx] attention scratch
  DeviceBuffer logits_;  // [rows][n_vocab], grown on demand
  // [kind]: rows rounded as that kind (paired()), [B][the widest n_in of
  // the shard's matrices of that kind]; empty for kinds no matrix uses.
  std::array<DeviceBuffer, ck::kRoundKinds> paired_;
  std::array<int64_t, ck::kRoundKinds> paired_floats_{};  // each one's size
  std::array<uint64_t, ck::kRoundKinds> paired_stamp_{};  // the last rounding into each
  uint64_t stamps_ = 0;
  // [kind] (Q8_0, Q8_K): rows as int8 for the int8 tensor-core kernel
  // (quantized()), q [B][widest n_in of its matrices], then d and sums
  // [B][that / 32] (f32 each); empty for kinds no such matrix uses.
  std::array<DeviceBuffer, ck::kRoundKinds> int8_;
  std::array<int64_t, ck::kRoundKinds> int8_width_{};
  std::array<uint64_t, ck::kRoundKinds> int8_stamp_{};
  DeviceBuffer picks_;   // [B] int: the kArgmax rows' picks, then [B] int: their bad flags
  // The kTopK rows: [B][2] int (k, first output), then [B] int: bad flags;
  // their candidates, [B kMaxTopK] ids and values.
  DeviceBuffer top_table_;
  DeviceBuffer top_ids_;
  DeviceBuffer top_values_;
  // Mixture of experts (empty for a dense model), R = moe_rows(), k =
  // n_expert_used.
  DeviceBuffer router_logits_;  // [B][n_expert]
  DeviceBuffer slot_rows_;      // [R k] int: the row of each grouped slot
  DeviceBuffer slot_ids_;       // [R k] int: the slot (t k + j) of each
  // The step's routing (strata_moe_route): slot s = t k + j of row t.
  DeviceBuffer slot_weights_;   // [B][k]
  DeviceBuffer slot_experts_;   // [B][k] int
  DeviceBuffer moe_x_;          // [B][n_embd] an expert's gathered rows
  DeviceBuffer moe_y_;          // [B][n_embd] their outputs, the shared expert's
  DeviceBuffer expert_out_;     // [R k][n_embd] each slot's output
  DeviceBuffer shared_gate_;    // [B] the shared expert's gate logits
  // RoPE angle tables of the step, one a setting of the shard's layers
  // (gemma3's local and global layers have two), made at every step.
  struct RopeTable {
    DeviceBuffer cs;  // [B][n_rot / 2][2]
    float base = 0.0f, scale = 0.0f;
  };
  std::vector<RopeTable> rope_tables_;
  std::vector<int> rope_of_layer_;  // [layer of the shard]: its table

  // Decode steps as CUDA graphs (graph_step), by row count.
  std::map<int, GraphHandle> decode_graphs_;
  bool graphs_unsupported_ = false;  // the api said Unimplemented

  // The current step (forward()).
  struct StepSlice {
    Sequence* seq = nullptr;
    int row0 = 0;
    int rows = 0;
    int pos0 = 0;
    Logits logits = Logits::kNone;
    int top_k = 0;  // kTopK
  };
  std::vector<StepSlice> slices_;
  // The step's rows in runs of consecutive slices on one kernel: tensor
  // (slices of at least mma_min_rows rows) or matvec.
  struct RowRun {
    int row0 = 0;
    int rows = 0;
    bool tensor = false;
  };
  std::vector<RowRun> runs_;
  bool fuse_residual_ = true;      // blocks leave their last add to the next
  bool residual_pending_ = false;  // x += proj_ still to do
  // The step's decode rows (one-row slices) on the device: their
  // sequences' cache buffers, contexts, positions, keys to attend, rows;
  // pointers into decode_table_ ([B] each).
  struct DecodeTable {
    const unsigned long long* base = nullptr;
    const int* n_ctx = nullptr;
    const int* pos = nullptr;
    const int* n_kv = nullptr;
    const int* row = nullptr;
  };
  DeviceBuffer decode_table_;
  DecodeTable decode_;
  std::vector<uint8_t> decode_host_;
  int n_decode_ = 0;
  std::vector<int32_t> positions_;  // [B]
  std::vector<float> cs_host_;      // [B][n_rot / 2][2]
  // The rows of the head: the logits rows (kLast, kAll) in slice order,
  // then the kArgmax rows (n_picks_ of them, picked on the device), then
  // the kTopK rows (n_tops_, n_top_candidates_ candidates in all).
  std::vector<int> head_rows_;
  bool profiling_ = false;  // the api times launches (kernel_profile_path)
  int n_picks_ = 0;
  int n_tops_ = 0;
  int n_top_candidates_ = 0;
  std::vector<int32_t> top_table_host_;  // [3 B]: k and first output a row, then bad flags
  std::vector<int32_t> top_ids_host_;
  std::vector<float> top_values_host_;
  std::vector<int32_t> picks_host_;  // [B]: the kArgmax rows' picks
  std::vector<int32_t> flags_host_;  // [B]: the picked or top-k rows' bad flags
  std::vector<float> hidden_host_;  // [B][n_embd]
  std::vector<float> logits_host_;
  // The gathered experts' grouping on the host (moe()).
  std::vector<int32_t> route_experts_;   // [B][k]: slot_experts_ downloaded
  std::vector<int32_t> expert_begin_;    // [n_expert + 1]
  std::vector<int32_t> expert_fill_;     // [n_expert]
  std::vector<int32_t> grouped_rows_;    // [R k]
  std::vector<int32_t> grouped_slots_;   // [R k]
};

}  // namespace strata::worker::device
