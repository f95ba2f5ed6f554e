// Loading the device backend (device_backend_impl.h): the shard's tensors
// checked and uploaded, the step's kernels loaded (compiled at first use),
// the step buffers, each matrix's split-K choice (the tuner); the kernel
// profile's file.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "nlohmann/json.hpp"
#include "worker/cuda/device_backend_impl.h"
#include "worker/cuda/weight_layout.h"

namespace strata::worker::device {
namespace {

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

// The index in kStepRowWarps of `row_warps` (one of them).
int split_index(int row_warps) {
  int s = 0;
  while (ck::kStepRowWarps[static_cast<size_t>(s)] != row_warps) ++s;
  return s;
}

// The kernels load a block type's quants 16 bytes at a time (its device
// rows, weight_layout.h), F16's values 2, F32's byte by byte (matvec.cuh):
// a matrix's rows must start there.
bool aligned_for_kernels(const DeviceMatrix& m) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(m.data);
  switch (m.type) {
    case GgmlType::kF32:
      return true;
    case GgmlType::kF16:
      return at % 2 == 0 && m.row_bytes % 2 == 0;
    default:
      return at % 16 == 0 && m.row_bytes % 16 == 0;
  }
}

}  // namespace

absl::StatusOr<DeviceBuffer> DeviceBackend::space(size_t bytes) {
  return DeviceBuffer::make(api_.get(), std::max<size_t>(bytes, 4));
}

absl::StatusOr<DeviceBuffer> DeviceBackend::upload(const void* host, size_t bytes) {
  absl::StatusOr<DeviceBuffer> b = space(bytes);
  if (!b.ok()) return b.status();
  STRATA_DEVICE_RETURN_IF_ERROR(api_->upload(b->get(), host, bytes));
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
  m.round = ck::round_kind(view.type);
  m.int8 = options_.matvec_int8 && !ck::matvec3_i8_entry(view.type).empty();
  // The rows in the kernels' layout (weight_layout.h): `bytes` holds whole
  // GGUF rows (a matrix, or every expert's).
  absl::StatusOr<int64_t> row_bytes = ck::device_row_bytes(view.type, view.n_in);
  if (!row_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", row_bytes.status().message()));
  }
  m.row_bytes = *row_bytes;
  DeviceBuffer bytes_on_device;
  if (ck::regrouped(view.type)) {
    // Regrouped and uploaded a chunk of rows at a time: the host holds
    // options_.upload_chunk_bytes of device rows (64 MiB), whatever the
    // tensor (a 120B model's experts are GiBs).
    const int64_t n_rows = static_cast<int64_t>(bytes) / view.row_bytes;
    STRATA_DEVICE_ASSIGN_OR_RETURN(bytes_on_device,
                                   space(static_cast<size_t>(n_rows * m.row_bytes)));
    const int64_t chunk = std::max<int64_t>(1, options_.upload_chunk_bytes / m.row_bytes);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
      const int64_t rows = std::min(chunk, n_rows - r0);
      absl::StatusOr<std::vector<uint8_t>> dev =
          ck::device_rows(view.type, view.n_in, rows, view.data + r0 * view.row_bytes);
      if (!dev.ok()) return dev.status();
      STRATA_DEVICE_RETURN_IF_ERROR(api_->upload(
          bytes_on_device.as<unsigned char>() + r0 * m.row_bytes, dev->data(), dev->size()));
    }
  } else {
    STRATA_DEVICE_ASSIGN_OR_RETURN(bytes_on_device, upload(view.data, bytes));
  }
  m.data = weights_.emplace_back(std::move(bytes_on_device)).as<unsigned char>();
  if (!aligned_for_kernels(m)) return absl::InternalError(absl::StrCat(name, ": rows not aligned"));
  const auto& src = ck::step_sources().matvec[ck::step_matvec_type_index(view.type)];
  STRATA_DEVICE_ASSIGN_OR_RETURN(m.get_rows, kernel(src[0][0], ck::get_rows_entry(view.type)));
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

absl::StatusOr<DeviceMatrix> DeviceBackend::upload_joined(const std::vector<std::string>& names,
                                                          int64_t n_in,
                                                          const std::vector<int64_t>& n_outs) {
  std::vector<kernels::WeightMatrix> views;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StatusOr<kernels::WeightMatrix> w = shard_matrix(*model_, names[i], n_in, n_outs[i]);
    if (!w.ok()) return w.status();
    if (!views.empty() && w->type != views.front().type) return DeviceMatrix{};
    views.push_back(*w);
  }
  kernels::WeightMatrix joined = views.front();
  joined.n_out = 0;
  std::vector<uint8_t> bytes;
  for (const kernels::WeightMatrix& v : views) {
    const size_t n = static_cast<size_t>(v.n_out * v.row_bytes);
    bytes.insert(bytes.end(), v.data, v.data + n);
    joined.n_out += v.n_out;
  }
  joined.data = bytes.data();
  DeviceMatrix m;
  STRATA_DEVICE_ASSIGN_OR_RETURN(m, device_matrix(names.front(), joined, bytes.size()));
  m.parts = static_cast<int>(views.size());
  return m;
}

absl::StatusOr<std::vector<DeviceMatrix>> DeviceBackend::upload_experts(const std::string& name,
                                                                        int64_t n_in,
                                                                        int64_t n_out) {
  absl::StatusOr<std::vector<kernels::WeightMatrix>> views =
      shard_experts(*model_, name, n_in, n_out, hp_.moe.n_expert);
  if (!views.ok()) return views.status();
  // One upload of the whole tensor; expert e's rows follow e slices in.
  const kernels::WeightMatrix& first = views->front();
  absl::StatusOr<DeviceMatrix> all = device_matrix(
      name, first, static_cast<size_t>(first.n_out * first.row_bytes) * views->size());
  if (!all.ok()) return all.status();
  const size_t slice = static_cast<size_t>(first.n_out * all->row_bytes);  // device rows
  std::vector<DeviceMatrix> out(views->size(), *all);
  for (size_t e = 0; e < out.size(); ++e) {
    out[e].data = all->data + e * slice;
    if (!aligned_for_kernels(out[e])) {
      return absl::InternalError(absl::StrCat(name, ": expert ", e, "'s rows are not aligned"));
    }
  }
  return out;
}

absl::Status DeviceBackend::load_layer(int il, DeviceLayer& l) {
  auto name = [&](std::string_view suffix) { return arch::layer_tensor(il, suffix); };
  const arch::BlockRecipe& r = hp_.recipe;
  const int64_t e = hp_.n_embd;
  const int64_t dk = hp_.head_dim_k;
  const int64_t qw = q_width(), kw = k_width(), vw = v_width();
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.attn_norm, upload_vector(name("attn_norm.weight"), e));
  if (r.fused_qkv && model_->find_tensor(name("attn_qkv.weight")) != nullptr) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.wqkv, upload_matrix(name("attn_qkv.weight"), e, qw + kw + vw));
    l.wqkv.parts = 3;
  } else {
    // One matrix, one launch, when q, k and v share a type (Q4_K_M files
    // give some layers' v another).
    STRATA_DEVICE_ASSIGN_OR_RETURN(
        l.wqkv, upload_joined({name("attn_q.weight"), name("attn_k.weight"),
                               name("attn_v.weight")},
                              e, {qw, kw, vw}));
    if (!l.wqkv.present()) {
      STRATA_DEVICE_ASSIGN_OR_RETURN(l.wq, upload_matrix(name("attn_q.weight"), e, qw));
      STRATA_DEVICE_ASSIGN_OR_RETURN(l.wk, upload_matrix(name("attn_k.weight"), e, kw));
      STRATA_DEVICE_ASSIGN_OR_RETURN(l.wv, upload_matrix(name("attn_v.weight"), e, vw));
    }
  }
  // Biases: required by qwen2's recipe, taken when present otherwise.
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.bq, upload_vector(name("attn_q.bias"), qw, !r.qkv_bias));
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.bk, upload_vector(name("attn_k.bias"), kw, !r.qkv_bias));
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.bv, upload_vector(name("attn_v.bias"), vw, !r.qkv_bias));
  if (r.qk_norm) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.q_norm, upload_vector(name("attn_q_norm.weight"), dk));
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.k_norm, upload_vector(name("attn_k_norm.weight"), dk));
  }
  if (r.qk_norm_full) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.q_norm, upload_vector(name("attn_q_norm.weight"), qw));
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.k_norm, upload_vector(name("attn_k_norm.weight"), kw));
  }
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.wo, upload_matrix(name("attn_output.weight"),
                                              int64_t{hp_.n_head} * hp_.head_dim_v, e));
  if (r.attn_out_bias) STRATA_DEVICE_ASSIGN_OR_RETURN(l.bo, upload_vector(name("attn_output.bias"), e));
  if (r.attn_sinks) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.sinks, upload_vector(name("attn_sinks.weight"), hp_.n_head));
  }
  if (r.post_attn_norm) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.post_attn_norm,
                            upload_vector(name("post_attention_norm.weight"), e));
  }
  STRATA_DEVICE_ASSIGN_OR_RETURN(l.ffn_norm, upload_vector(name(r.ffn_norm), e));
  if (hp_.moe.n_expert > 0) {
    DeviceExperts& x = l.moe;
    const int64_t n_expert = hp_.moe.n_expert, f = hp_.moe.n_ff_expert;
    STRATA_DEVICE_ASSIGN_OR_RETURN(x.router, upload_matrix(name("ffn_gate_inp.weight"), e, n_expert));
    STRATA_DEVICE_ASSIGN_OR_RETURN(x.gate, upload_experts(name("ffn_gate_exps.weight"), e, f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(x.up, upload_experts(name("ffn_up_exps.weight"), e, f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(x.down, upload_experts(name("ffn_down_exps.weight"), f, e));
    if (r.expert_bias) {
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.router_bias, upload_vector(name("ffn_gate_inp.bias"), n_expert));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.gate_bias, upload_table(name("ffn_gate_exps.bias"), f, n_expert));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.up_bias, upload_table(name("ffn_up_exps.bias"), f, n_expert));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.down_bias, upload_table(name("ffn_down_exps.bias"), e, n_expert));
    }
    if (hp_.moe.n_ff_shared > 0) {
      const int64_t fs = hp_.moe.n_ff_shared;
      // ffn_gate_inp_shexp is one row of n_embd, stored as a vector.
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.shared_router,
                              upload_matrix(name("ffn_gate_inp_shexp.weight"), e, 1, false, true));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.shared_gate, upload_matrix(name("ffn_gate_shexp.weight"), e, fs));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.shared_up, upload_matrix(name("ffn_up_shexp.weight"), e, fs));
      STRATA_DEVICE_ASSIGN_OR_RETURN(x.shared_down, upload_matrix(name("ffn_down_shexp.weight"), fs, e));
    }
  } else if (r.fused_gate_up) {
    // phi3's ffn_up: [gate | up] rows.
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.gate,
                                   upload_matrix(name("ffn_up.weight"), e, 2 * int64_t{hp_.n_ff}));
    l.gate.parts = 2;
  } else {
    STRATA_DEVICE_ASSIGN_OR_RETURN(
        l.gate, upload_joined({name("ffn_gate.weight"), name("ffn_up.weight")}, e,
                              {hp_.n_ff, hp_.n_ff}));
    if (!l.gate.present()) {
      STRATA_DEVICE_ASSIGN_OR_RETURN(l.gate, upload_matrix(name("ffn_gate.weight"), e, hp_.n_ff));
      STRATA_DEVICE_ASSIGN_OR_RETURN(l.up, upload_matrix(name("ffn_up.weight"), e, hp_.n_ff));
    }
  }
  if (hp_.moe.n_expert == 0) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.down, upload_matrix(name("ffn_down.weight"), hp_.n_ff, e));
  }
  if (r.post_ffn_norm) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(l.post_ffn_norm, upload_vector(name("post_ffw_norm.weight"), e));
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
    STRATA_DEVICE_ASSIGN_OR_RETURN(token_embd_, upload_matrix("token_embd.weight", e, n_vocab_));
  }
  if (is_last()) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(output_norm_, upload_vector("output_norm.weight", e));
    // Embeddings are normed on the host (forward(): embedding_pool.h).
    STRATA_DEVICE_ASSIGN_OR_RETURN(output_norm_host_, shard_vector(*model_, "output_norm.weight", e));
    if (has_output) {
      STRATA_DEVICE_ASSIGN_OR_RETURN(output_, upload_matrix("output.weight", e, n_vocab_));
    }
  }
  STRATA_DEVICE_ASSIGN_OR_RETURN(rope_freqs_,
                          shard_vector(*model_, "rope_freqs.weight", hp_.n_rot / 2, true));
  for (int il = range_.first; il < range_.last; ++il) {
    STRATA_DEVICE_RETURN_IF_ERROR(load_layer(il, layers_.emplace_back()));
  }

  const ck::StepSources& src = ck::step_sources();
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_rms_, kernel(src.rms_norm, ck::kRmsNormEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_add_rms_, kernel(src.rms_norm, ck::kAddRmsNormEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_rms_q_, kernel(src.rms_norm, ck::kRmsNormQuantizeEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_add_rms_q_, kernel(src.rms_norm, ck::kAddRmsNormQuantizeEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_attention_rows_, kernel(src.attention, ck::kAttentionRowsEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_argmax_rows_, kernel(src.sample, ck::kArgmaxRowsEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_top_k_rows_, kernel(src.sample, ck::kTopKRowsEntry));
  if (hp_.moe.n_expert > 0) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(k_moe_route_, kernel(src.sample, ck::kMoeRouteEntry));
  }
  if (const size_t f = ck::step_flash_index(hp_.head_dim_k);
      options_.mma_min_rows > 0 && options_.flash_attention && hp_.head_dim_k == hp_.head_dim_v &&
      f < ck::kStepFlashHeadDims.size()) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(k_flash_, kernel(src.flash[f], ck::kFlashAttentionEntry));
  }
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_attention_batch_,
                                 kernel(src.attention, ck::kAttentionBatchEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_attention_batch_q_,
                                 kernel(src.attention, ck::kAttentionBatchQuantizeEntry));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_store_kv_batch_,
                                 kernel(src.elementwise, ck::kStoreKvBatchEntry));
  splits_ = options_.attention_splits > 0
                ? options_.attention_splits
                : std::clamp(4 * std::max(api_->multiprocessors(), 1) / hp_.n_head, 1, 32);
  if (splits_ > 1) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(k_attention_split_scores_,
                                   kernel(src.attention, ck::kAttentionSplitScoresEntry));
    STRATA_DEVICE_ASSIGN_OR_RETURN(k_attention_split_weigh_,
                                   kernel(src.attention, ck::kAttentionSplitWeighEntry));
    // Rows a launch: as many as 32 MiB of chunk sums hold (at least one).
    const size_t per_row = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(splits_) *
                           static_cast<size_t>(hp_.head_dim_v + 2) * sizeof(float);
    split_rows_ = static_cast<int>(std::clamp<size_t>((size_t{32} << 20) / per_row, 1,
                                                      static_cast<size_t>(options_.max_batch)));
    const size_t heads = static_cast<size_t>(split_rows_) * static_cast<size_t>(hp_.n_head);
    STRATA_DEVICE_ASSIGN_OR_RETURN(attn_part_,
                                   space(heads * static_cast<size_t>(splits_) * 2 * sizeof(float)));
    STRATA_DEVICE_ASSIGN_OR_RETURN(
        attn_part_o_, space(heads * static_cast<size_t>(splits_) *
                            static_cast<size_t>(hp_.head_dim_v) * sizeof(float)));
    const std::vector<unsigned int> head_zeros(heads, 0u);
    STRATA_DEVICE_ASSIGN_OR_RETURN(
        attn_head_done_, upload(head_zeros.data(), head_zeros.size() * sizeof(unsigned int)));
  }
  struct Elementwise {
    KernelHandle* handle;
    const char* entry;
  };
  for (const Elementwise& k : std::initializer_list<Elementwise>{
           {&k_rope_qk_, ck::kRopeRotateQkEntry}, {&k_swiglu_, ck::kSwigluEntry},
           {&k_add_, ck::kAddEntry},             {&k_add_bias_, ck::kAddBiasEntry},
           {&k_add_bias_ids_, ck::kAddBiasIdsEntry},
           {&k_store_kv_, ck::kStoreKvEntry},    {&k_scale_, ck::kScaleEntry},
           {&k_soft_cap_, ck::kSoftCapEntry},    {&k_geglu_, ck::kGegluEntry},
           {&k_swiglu_oai_, ck::kSwigluOaiEntry},
           {&k_gather_, ck::kGatherRowsEntry},   {&k_scatter_, ck::kScatterRowsEntry},
           {&k_moe_sum_, ck::kMoeSumEntry},      {&k_add_shared_, ck::kAddSharedExpertEntry},
           {&k_round_rows_, ck::kRoundRowsEntry}, {&k_swiglu_q_, ck::kSwigluQuantizeEntry},
           {&k_rope_store_kv_batch_, ck::kRopeStoreKvBatchEntry},
           {&k_quantize_rows_, ck::kQuantizeRowsEntry}}) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(*k.handle, kernel(src.elementwise, k.entry));
  }

  const size_t b = static_cast<size_t>(options_.max_batch);
  const size_t f = sizeof(float);
  STRATA_DEVICE_ASSIGN_OR_RETURN(ids_, space(b * sizeof(int32_t)));
  STRATA_DEVICE_ASSIGN_OR_RETURN(x_, space(b * e * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(xn_, space(b * e * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(q_, space(b * q_width() * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(k_, space(b * k_width() * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(v_, space(b * v_width() * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(attn_, space(b * hp_.n_head * hp_.head_dim_v * f));
  const std::vector<unsigned int> done_zeros(b, 0u);  // strata_attention_batch_quantize's counts
  STRATA_DEVICE_ASSIGN_OR_RETURN(attn_done_,
                                 upload(done_zeros.data(), done_zeros.size() * sizeof(unsigned int)));
  STRATA_DEVICE_ASSIGN_OR_RETURN(proj_, space(b * e * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(gate_, space(b * ff_width() * f));
  STRATA_DEVICE_ASSIGN_OR_RETURN(up_, space(b * ff_width() * f));
  for (int il = range_.first; il < range_.last; ++il) {
    const arch::LayerRope& lr = hp_.rope[static_cast<size_t>(il)];
    size_t t = 0;
    while (t < rope_tables_.size() &&
           (rope_tables_[t].base != lr.freq_base || rope_tables_[t].scale != lr.freq_scale)) {
      ++t;
    }
    if (t == rope_tables_.size()) {
      RopeTable& table = rope_tables_.emplace_back();
      STRATA_DEVICE_ASSIGN_OR_RETURN(table.cs, space(b * (hp_.n_rot / 2) * 2 * f));
      table.base = lr.freq_base;
      table.scale = lr.freq_scale;
    }
    rope_of_layer_.push_back(static_cast<int>(t));
  }
  if (hp_.moe.n_expert > 0) {
    const size_t n_expert = static_cast<size_t>(hp_.moe.n_expert);
    const size_t slots = static_cast<size_t>(moe_rows()) * hp_.moe.n_expert_used;
    const size_t routed = b * hp_.moe.n_expert_used;
    STRATA_DEVICE_ASSIGN_OR_RETURN(router_logits_, space(b * n_expert * f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(slot_rows_, space(slots * sizeof(int32_t)));
    STRATA_DEVICE_ASSIGN_OR_RETURN(slot_ids_, space(slots * sizeof(int32_t)));
    STRATA_DEVICE_ASSIGN_OR_RETURN(slot_weights_, space(routed * f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(slot_experts_, space(routed * sizeof(int32_t)));
    STRATA_DEVICE_ASSIGN_OR_RETURN(moe_x_, space(b * e * f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(moe_y_, space(b * e * f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(expert_out_, space(slots * e * f));
    STRATA_DEVICE_ASSIGN_OR_RETURN(shared_gate_, space(b * f));
    route_experts_.resize(routed);
    expert_begin_.resize(n_expert + 1);
    expert_fill_.resize(n_expert);
    grouped_rows_.resize(slots);
    grouped_slots_.resize(slots);
  }
  STRATA_DEVICE_ASSIGN_OR_RETURN(picks_, space(2 * b * sizeof(int32_t)));
  picks_host_.resize(b);
  flags_host_.resize(b);
  STRATA_DEVICE_ASSIGN_OR_RETURN(top_table_, space(3 * b * sizeof(int32_t)));
  top_table_host_.resize(3 * b);
  const size_t top = b * static_cast<size_t>(std::min(kMaxTopK, n_vocab_));
  STRATA_DEVICE_ASSIGN_OR_RETURN(top_ids_, space(top * sizeof(int32_t)));
  STRATA_DEVICE_ASSIGN_OR_RETURN(top_values_, space(top * sizeof(float)));
  positions_.resize(b);
  cs_host_.resize(b * (hp_.n_rot / 2) * 2);
  decode_host_.resize(b * (sizeof(unsigned long long) + 4 * sizeof(int)));
  STRATA_DEVICE_ASSIGN_OR_RETURN(decode_table_, space(decode_host_.size()));
  {
    const auto* t = decode_table_.as<uint8_t>();
    decode_.base = reinterpret_cast<const unsigned long long*>(t);
    const auto* ints = reinterpret_cast<const int*>(t + b * sizeof(unsigned long long));
    decode_.n_ctx = ints;
    decode_.pos = ints + b;
    decode_.n_kv = ints + 2 * b;
    decode_.row = ints + 3 * b;
  }
  STRATA_DEVICE_RETURN_IF_ERROR(choose_splits());
  for (DeviceLayer& l : layers_) {
    if (!l.moe.present()) continue;
    l.moe.one_build = true;
    for (const std::vector<DeviceMatrix>* experts : {&l.moe.gate, &l.moe.up, &l.moe.down}) {
      const DeviceMatrix& first = experts->front();
      for (const DeviceMatrix& m : *experts) {
        if (m.split != first.split || m.threads != first.threads || m.int8 != first.int8) {
          l.moe.one_build = false;
        }
      }
    }
    if (!l.moe.one_build || !options_.moe_slots) continue;
    for (const std::vector<DeviceMatrix>* experts : {&l.moe.gate, &l.moe.up, &l.moe.down}) {
      STRATA_DEVICE_RETURN_IF_ERROR(load_ids_kernel(experts->front()));
    }
  }
  // Each rounding kind's rows: B rows of the widest input among its matrices.
  {
    std::vector<DeviceMatrix*> all, per_slice;
    matrices(&all, &per_slice);
    for (const DeviceMatrix* m : all) {
      if (m == &token_embd_ && !tied_output_) continue;  // get_rows only: never multiplied
      const auto kind = static_cast<size_t>(m->round);
      paired_floats_[kind] = std::max(paired_floats_[kind], int64_t{m->n_in} * static_cast<int64_t>(b));
    }
    for (size_t kind = 1; kind < paired_.size(); ++kind) {
      if (paired_floats_[kind] == 0) continue;
      STRATA_DEVICE_ASSIGN_OR_RETURN(paired_[kind],
                                     space(static_cast<size_t>(paired_floats_[kind]) * f));
    }
    // The int8 rows of the matrices with an int8 kernel (matvec or tensor
    // cores): q, then each 32-value unit's scale and sum.
    for (const DeviceMatrix* m : all) {
      if (m == &token_embd_ && !tied_output_) continue;
      if (!m->takes_int8_rows()) continue;
      const auto kind = static_cast<size_t>(m->round);
      int8_width_[kind] = std::max<int64_t>(int8_width_[kind], m->n_in);
    }
    for (size_t kind = 1; kind < int8_.size(); ++kind) {
      if (int8_width_[kind] == 0) continue;
      STRATA_DEVICE_ASSIGN_OR_RETURN(
          int8_[kind], space(int8_rows_bytes(options_.max_batch, int8_width_[kind])));
    }
  }
  if (!options_.kernel_profile_path.empty()) {  // the launches from here on
    STRATA_DEVICE_RETURN_IF_ERROR(api_->set_profiling(true));
    profiling_ = true;
  }
  return absl::OkStatus();
}

void DeviceBackend::write_kernel_profile() const {
  if (!profiling_) return;  // a load that failed leaves an earlier file as it was
  nlohmann::json kernels = nlohmann::json::array();
  double total = 0.0;
  for (const DeviceApi::KernelTime& k : api_->kernel_profile()) {
    kernels.push_back({{"program", k.program},
                       {"entry", k.entry},
                       {"launches", k.launches},
                       {"ms", k.ms},
                       {"us_per_launch", k.launches > 0 ? 1e3 * k.ms / k.launches : 0.0}});
    total += k.ms;
  }
  const nlohmann::json j = {{"device", api_->describe()}, {"kernels", kernels}, {"total_ms", total}};
  std::ofstream out(options_.kernel_profile_path);
  out << j.dump(1) << "\n";
  if (!out) {
    std::fprintf(stderr, "strata: the kernel profile could not be written to %s\n",
                 options_.kernel_profile_path.c_str());
  }
}

void DeviceBackend::matrices(std::vector<DeviceMatrix*>* all,
                             std::vector<DeviceMatrix*>* per_slice) {
  auto take = [&](DeviceMatrix& m, bool slice_rows) {
    if (!m.present()) return;
    all->push_back(&m);
    if (slice_rows) per_slice->push_back(&m);
  };
  take(token_embd_, false);
  take(output_, false);
  for (DeviceLayer& l : layers_) {
    for (DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wqkv, &l.wo, &l.gate, &l.up, &l.down,
                            &l.moe.shared_gate, &l.moe.shared_up, &l.moe.shared_down}) {
      take(*m, true);
    }
    take(l.moe.router, false);
    take(l.moe.shared_router, false);
    for (auto* experts : {&l.moe.gate, &l.moe.up, &l.moe.down}) {
      for (DeviceMatrix& m : *experts) take(m, false);
    }
  }
}

absl::Status DeviceBackend::choose_splits() {
  std::vector<DeviceMatrix*> all, per_slice;
  matrices(&all, &per_slice);
  if (options_.matvec_threads != 0 && options_.row_warps == 0) {
    return absl::InvalidArgumentError("matvec_threads is forced only with row_warps");
  }
  if (options_.row_warps != 0) {
    const MatvecChoice forced{options_.row_warps,
                              options_.matvec_threads != 0 ? options_.matvec_threads
                                                           : ck::kStepMatvecBlock};
    const std::vector<MatvecChoice> candidates = matvec_candidates();
    if (std::find(candidates.begin(), candidates.end(), forced) == candidates.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row_warps must be 0 (tuned), 1, 2 or 4, and matvec_threads 0, 64, 128 or 256 holding "
          "whole rows of it; got ",
          matvec_choice_text(forced)));
    }
    for (DeviceMatrix* m : all) {
      m->split = split_index(forced.row_warps);
      m->threads = forced.threads;
    }
    return load_chosen(all, per_slice, nullptr);
  }
  if (!options_.tune) return load_chosen(all, per_slice, nullptr);  // one warp a row
  const std::string path = options_.tuner_path.empty() ? default_tuner_path()
                           : options_.tuner_path == "-" ? ""
                                                        : options_.tuner_path;
  KernelTuner tuner(path, tuning_key(api_->tuning_key()));
  tuner.load();
  // Scratch for the measurements: zero activations of the widest row, the
  // longest output.
  int widest = 1, longest = 1;
  for (const DeviceMatrix* m : all) {
    widest = std::max(widest, m->n_in);
    longest = std::max(longest, m->n_out);
  }
  // (one row of floats, or of int8 q with zero scales and sums).
  DeviceBuffer x, y;
  const size_t x_bytes = std::max(static_cast<size_t>(widest) * sizeof(float),
                                  int8_rows_bytes(1, (widest + 31) / 32 * 32));
  STRATA_DEVICE_ASSIGN_OR_RETURN(x, space(x_bytes));
  STRATA_DEVICE_ASSIGN_OR_RETURN(y, space(static_cast<size_t>(longest) * sizeof(float)));
  STRATA_DEVICE_RETURN_IF_ERROR(api_->fill(x.get(), 0, x_bytes));
  const std::vector<MatvecChoice> candidates = matvec_candidates();
  for (DeviceMatrix* m : all) {
    const MatvecShape shape{m->type, m->n_in, m->n_out, m->int8};
    MatvecRows zero;
    if (m->int8) {
      zero.q = int8_rows_at(x.as<unsigned char>(), 1, m->n_in);
    } else {
      zero.x = x.as<float>();
    }
    std::optional<MatvecChoice> choice = tuner.find(shape);
    if (!choice) {
      std::vector<double> ms;
      for (const MatvecChoice& c : candidates) {
        m->split = split_index(c.row_warps);
        m->threads = c.threads;
        absl::StatusOr<double> t = api_->time_ms(
            [&] {
              float* out = y.as<float>();
              return launch_matvec3(*m, zero, 1, out, out, out, m->n_out, 0);
            },
            5);
        if (!t.ok()) return t.status();
        ms.push_back(*t);
      }
      choice = tuner.record(shape, ms);
    }
    m->split = split_index(choice->row_warps);
    m->threads = choice->threads;
  }
  STRATA_DEVICE_RETURN_IF_ERROR(load_chosen(all, per_slice, &tuner));
  // A tuner file that cannot be written costs the next load a measurement,
  // not this load.
  if (tuner.measured() > 0) tuner.save().IgnoreError();
  return absl::OkStatus();
}

std::vector<PrefillForm> DeviceBackend::prefill_forms(const DeviceMatrix& m) const {
  std::vector<PrefillForm> forms;
  if (options_.mma_int8 && !ck::mma3_i8_entry(m.type).empty()) forms.push_back(PrefillForm::kInt8);
  if (options_.wgmma && api_->compute_capability() == ck::kWgmmaComputeCapability &&
      !ck::wgmma3_entry(m.type).empty()) {
    forms.push_back(PrefillForm::kWgmma);
  }
  forms.push_back(PrefillForm::kF16);
  return forms;
}

absl::Status DeviceBackend::set_prefill_form(DeviceMatrix& m, PrefillForm form) {
  m.mma_i8 = KernelHandle{};
  m.mma_wg = KernelHandle{};
  const size_t t = ck::step_matvec_type_index(m.type);
  if (form == PrefillForm::kInt8) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(m.mma_i8, kernel(ck::step_sources().mma[t],
                                                    ck::mma3_i8_entry(m.type)));
  } else if (form == PrefillForm::kWgmma) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(m.mma_wg, kernel(ck::step_sources().wgmma[t],
                                                    ck::wgmma3_entry(m.type)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> DeviceBackend::time_prefill(
    DeviceMatrix& m, const std::vector<PrefillForm>& forms, int rows, DeviceBuffer& scratch,
    int64_t widest, int64_t longest) {
  // [rows][widest] floats (the f16 form's rows), int8 rows of that width,
  // [rows][longest] outputs: zeros.
  const size_t floats = static_cast<size_t>(rows * widest) * sizeof(float);
  const size_t int8 = int8_rows_bytes(rows, (widest + 31) / 32 * 32);
  const size_t out = static_cast<size_t>(rows * longest) * sizeof(float);
  if (scratch.get() == nullptr) {
    STRATA_DEVICE_ASSIGN_OR_RETURN(scratch, space(floats + int8 + out));
    STRATA_DEVICE_RETURN_IF_ERROR(api_->fill(scratch.get(), 0, floats + int8 + out));
  }
  const auto* base = scratch.as<unsigned char>();
  const float* x = reinterpret_cast<const float*>(base);
  const Int8Rows q = int8_rows_at(base + floats, rows, m.n_in);
  float* y = reinterpret_cast<float*>(const_cast<unsigned char*>(base) + floats + int8);
  std::vector<double> ms;
  for (const PrefillForm form : forms) {
    STRATA_DEVICE_RETURN_IF_ERROR(set_prefill_form(m, form));
    absl::StatusOr<double> t = api_->time_ms(
        [&] { return launch_mma(m, &q, x, rows, y, y, y, m.n_out, 0); }, 5);
    if (!t.ok()) return t.status();
    ms.push_back(*t);
  }
  return ms;
}

// Every column count of each matrix's chosen split, and the tensor-core
// kernels of each type among `per_slice` (one build a type, shared),
// compiled now (at load), not at the first step that needs it.
absl::Status DeviceBackend::load_chosen(const std::vector<DeviceMatrix*>& all,
                                        const std::vector<DeviceMatrix*>& per_slice,
                                        KernelTuner* tuner) {
  for (DeviceMatrix* m : all) {
    for (size_t i = 0; i < ck::kStepMatvecColumns.size(); ++i) {
      absl::StatusOr<KernelHandle> k = kernel_of(*m, static_cast<size_t>(m->split), i);
      if (!k.ok()) return k.status();
    }
  }
  if (options_.mma_min_rows <= 0) return absl::OkStatus();
  // The prompt chunk the forms are timed on, and the widest rows and
  // outputs among the matrices that may be timed.
  const int rows = std::max(1, std::min(options_.prefill_tune_rows, options_.max_batch));
  int64_t widest = 1, longest = 1;
  for (const DeviceMatrix* m : per_slice) {
    widest = std::max<int64_t>(widest, m->n_in);
    longest = std::max<int64_t>(longest, m->n_out);
  }
  DeviceBuffer scratch;
  bool no_room = false;  // the chunk's scratch could not be made: no more timing
  for (DeviceMatrix* m : per_slice) {
    const std::string mma = ck::mma3_entry(m->type);
    if (mma.empty()) continue;
    const KernelSource& source = ck::step_sources().mma[ck::step_matvec_type_index(m->type)];
    STRATA_DEVICE_ASSIGN_OR_RETURN(m->mma, kernel(source, mma));
    const std::vector<PrefillForm> forms = prefill_forms(*m);
    PrefillForm form = forms.front();
    if (tuner != nullptr && forms.size() > 1 && !no_room) {
      const MatvecShape shape{m->type, m->n_in, m->n_out, false};
      if (const std::optional<PrefillForm> found = tuner->find_prefill(shape, rows, forms)) {
        form = *found;
      } else {
        absl::StatusOr<std::vector<double>> ms =
            time_prefill(*m, forms, rows, scratch, widest, longest);
        // Without the memory for the chunk (ResourceExhausted): the first
        // form, untimed.
        if (ms.ok()) {
          form = tuner->record_prefill(shape, rows, forms, *ms);
        } else if (ms.status().code() == absl::StatusCode::kResourceExhausted) {
          no_room = true;
        } else {
          return ms.status();
        }
      }
    }
    STRATA_DEVICE_RETURN_IF_ERROR(set_prefill_form(*m, form));
  }
  return absl::OkStatus();
}

}  // namespace strata::worker::device
