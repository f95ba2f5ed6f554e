#include "worker/cpu/cpu_weights.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/ops/matmul.h"
#include "model/progress.h"
#include "worker/shard_tensors.h"

namespace strata::worker {
namespace {

class Loader {
 public:
  Loader(const gguf::GgufModel& model, ShardWeights& out)
      : model_(model), out_(out) {}

  // A matrix of n_out rows of n_in; `optional` tensors may be absent
  // (returns an empty view).
  // `one_row_as_vector`: a matrix of one row that the GGUF stores as a
  // vector [n_in] (or as [n_in, 1]).
  absl::StatusOr<WeightMatrix> matrix(const std::string& name, int64_t n_in,
                                      int64_t n_out, bool optional = false,
                                      bool one_row_as_vector = false) {
    return shard_matrix(model_, name, n_in, n_out, optional, one_row_as_vector);
  }

  // The n_expert matrices of a 3-D expert tensor (ne = [n_in, n_out,
  // n_expert]): expert e's is the view of slice e.
  absl::StatusOr<std::vector<Linear>> experts(const std::string& name, int64_t n_in,
                                              int64_t n_out, int64_t n_expert) {
    absl::StatusOr<std::vector<WeightMatrix>> views =
        shard_experts(model_, name, n_in, n_out, n_expert);
    if (!views.ok()) return views.status();
    std::vector<Linear> out(views->size());
    for (size_t e = 0; e < out.size(); ++e) out[e].w = (*views)[e];
    return out;
  }

  // A table [n1][n0] (GGUF ne = [n0, n1]) converted to f32: per-expert
  // biases.
  absl::StatusOr<const float*> table(const std::string& name, int64_t n0, int64_t n1) {
    absl::StatusOr<std::vector<float>> v = shard_table(model_, name, n0, n1);
    if (!v.ok()) return v.status();
    return out_.owned.emplace_back(*std::move(v)).data();
  }

  // A vector of n elements converted to f32; nullptr when optional and
  // absent.
  absl::StatusOr<const float*> vector(const std::string& name, int64_t n,
                                      bool optional = false) {
    absl::StatusOr<std::vector<float>> v = shard_vector(model_, name, n, optional);
    if (!v.ok()) return v.status();
    if (v->empty()) return nullptr;
    return out_.owned.emplace_back(*std::move(v)).data();
  }

 private:
  const gguf::GgufModel& model_;
  ShardWeights& out_;
};

#define ASSIGN_OR_RETURN_W(lhs, expr)              \
  do {                                             \
    auto value_or = (expr);                        \
    if (!value_or.ok()) return value_or.status();  \
    lhs = *value_or;                               \
  } while (0)

// The router, the experts and (qwen2moe) the shared expert of block il.
absl::Status load_experts(Loader& load, const arch::Hyperparameters& hp, int il,
                          ExpertWeights& x) {
  auto name = [&](const char* suffix) { return arch::layer_tensor(il, suffix); };
  const int64_t e = hp.n_embd;
  const int64_t n_expert = hp.moe.n_expert;
  const int64_t f = hp.moe.n_ff_expert;
  ASSIGN_OR_RETURN_W(x.router.w, load.matrix(name("ffn_gate_inp.weight"), e, n_expert));
  ASSIGN_OR_RETURN_W(x.gate, load.experts(name("ffn_gate_exps.weight"), e, f, n_expert));
  ASSIGN_OR_RETURN_W(x.up, load.experts(name("ffn_up_exps.weight"), e, f, n_expert));
  ASSIGN_OR_RETURN_W(x.down, load.experts(name("ffn_down_exps.weight"), f, e, n_expert));
  x.gate_up.resize(x.gate.size());
  if (hp.recipe.expert_bias) {
    ASSIGN_OR_RETURN_W(x.router_bias, load.vector(name("ffn_gate_inp.bias"), n_expert));
    ASSIGN_OR_RETURN_W(x.gate_bias, load.table(name("ffn_gate_exps.bias"), f, n_expert));
    ASSIGN_OR_RETURN_W(x.up_bias, load.table(name("ffn_up_exps.bias"), f, n_expert));
    ASSIGN_OR_RETURN_W(x.down_bias, load.table(name("ffn_down_exps.bias"), e, n_expert));
  }
  if (hp.moe.n_ff_shared > 0) {
    const int64_t fs = hp.moe.n_ff_shared;
    // ffn_gate_inp_shexp is one row of n_embd, stored as a vector ([n_embd]).
    ASSIGN_OR_RETURN_W(x.shared_router.w,
                       load.matrix(name("ffn_gate_inp_shexp.weight"), e, 1, false, true));
    ASSIGN_OR_RETURN_W(x.shared_gate.w, load.matrix(name("ffn_gate_shexp.weight"), e, fs));
    ASSIGN_OR_RETURN_W(x.shared_up.w, load.matrix(name("ffn_up_shexp.weight"), e, fs));
    ASSIGN_OR_RETURN_W(x.shared_down.w, load.matrix(name("ffn_down_shexp.weight"), fs, e));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardWeights>> load_shard_weights(
    const gguf::GgufModel& model, const arch::Hyperparameters& hp,
    BlockRange range) {
  if (range.first < 0 || range.last > hp.n_layer || range.first > range.last) {
    return absl::InvalidArgumentError(
        absl::StrCat("block range [", range.first, ", ", range.last,
                     ") is not within the model's ", hp.n_layer, " blocks"));
  }
  // Refused rather than run fewer blocks than the file holds.
  if (absl::Status st = arch::check_block_tensors(model.tensors(), hp.n_layer); !st.ok()) {
    return st;
  }
  auto w = std::make_unique<ShardWeights>();
  w->source = &model;
  Loader load(model, *w);
  const int64_t e = hp.n_embd;
  const int64_t dk = hp.head_dim_k;
  const int64_t dv = hp.head_dim_v;
  const int64_t q_rows = hp.n_head * dk;
  const int64_t k_rows = hp.n_head_kv * dk;
  const int64_t v_rows = hp.n_head_kv * dv;
  const arch::BlockRecipe& r = hp.recipe;

  // The vocabulary size comes from the embedding (every GGUF has it).
  const gguf::TensorInfo* emb = model.find_tensor("token_embd.weight");
  const bool first = range.first == 0;
  const bool last = range.last == hp.n_layer;
  // A middle stage of a split model whose embedding lies in a part absent
  // from this disk takes the vocabulary size from the metadata.
  if (emb == nullptr && !first && !last && !model.absent_parts().empty() &&
      hp.n_vocab > 0) {
    w->n_vocab = hp.n_vocab;
  } else if (emb == nullptr) {
    return model.missing_tensor("token_embd.weight");
  } else if (emb->shape.size() != 2 || emb->shape[0] != e || emb->shape[1] < 1 ||
      emb->shape[1] > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_embd.weight: shape ", shape_text(emb->shape), ", expected [",
        e, ", n_vocab]"));
  } else {
    w->n_vocab = static_cast<int>(emb->shape[1]);
  }
  // The tokenizer's ids must be the embedding's rows, as llama.cpp requires
  // (its token_embd is created [n_embd, n_vocab] from the vocabulary):
  // otherwise the model samples ids the tokenizer cannot decode, or the
  // tokenizer gives ids the model has no row for.
  if (hp.n_vocab > 0 && hp.n_vocab != w->n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token_embd.weight: ", w->n_vocab, " rows, but the vocabulary has ", hp.n_vocab,
        " tokens (", hp.architecture, ".vocab_size or tokenizer.ggml.tokens)"));
  }
  const bool has_output = model.find_tensor("output.weight") != nullptr;
  if (first || (last && !has_output)) {
    ASSIGN_OR_RETURN_W(w->token_embd,
                       load.matrix("token_embd.weight", e, w->n_vocab));
  }
  if (last) {
    ASSIGN_OR_RETURN_W(w->output_norm, load.vector("output_norm.weight", e));
    if (has_output) {
      ASSIGN_OR_RETURN_W(w->output.w, load.matrix("output.weight", e, w->n_vocab));
    } else {
      w->output.w = w->token_embd;  // tied embeddings
    }
  }
  ASSIGN_OR_RETURN_W(w->rope_freqs,
                     load.vector("rope_freqs.weight", hp.n_rot / 2, true));

  for (int il = range.first; il < range.last; ++il) {
    auto name = [&](const char* suffix) { return arch::layer_tensor(il, suffix); };
    LayerWeights& l = w->layers.emplace_back();
    ASSIGN_OR_RETURN_W(l.attn_norm, load.vector(name("attn_norm.weight"), e));
    if (r.fused_qkv && model.find_tensor(name("attn_qkv.weight")) != nullptr) {
      ASSIGN_OR_RETURN_W(l.wqkv.w, load.matrix(name("attn_qkv.weight"), e,
                                             q_rows + k_rows + v_rows));
    } else {
      ASSIGN_OR_RETURN_W(l.wq.w, load.matrix(name("attn_q.weight"), e, q_rows));
      ASSIGN_OR_RETURN_W(l.wk.w, load.matrix(name("attn_k.weight"), e, k_rows));
      ASSIGN_OR_RETURN_W(l.wv.w, load.matrix(name("attn_v.weight"), e, v_rows));
    }
    // Biases: required by qwen2's recipe, taken when present otherwise.
    ASSIGN_OR_RETURN_W(l.bq, load.vector(name("attn_q.bias"), q_rows, !r.qkv_bias));
    ASSIGN_OR_RETURN_W(l.bk, load.vector(name("attn_k.bias"), k_rows, !r.qkv_bias));
    ASSIGN_OR_RETURN_W(l.bv, load.vector(name("attn_v.bias"), v_rows, !r.qkv_bias));
    if (r.qk_norm) {
      ASSIGN_OR_RETURN_W(l.q_norm, load.vector(name("attn_q_norm.weight"), dk));
      ASSIGN_OR_RETURN_W(l.k_norm, load.vector(name("attn_k_norm.weight"), dk));
    }
    if (r.qk_norm_full) {
      ASSIGN_OR_RETURN_W(l.q_norm, load.vector(name("attn_q_norm.weight"), q_rows));
      ASSIGN_OR_RETURN_W(l.k_norm, load.vector(name("attn_k_norm.weight"), k_rows));
    }
    ASSIGN_OR_RETURN_W(l.wo.w, load.matrix(name("attn_output.weight"),
                                         hp.n_head * dv, e));
    if (r.attn_out_bias) {
      ASSIGN_OR_RETURN_W(l.bo, load.vector(name("attn_output.bias"), e));
    }
    if (r.attn_sinks) {
      ASSIGN_OR_RETURN_W(l.attn_sinks, load.vector(name("attn_sinks.weight"), hp.n_head));
    }
    if (r.post_attn_norm) {
      ASSIGN_OR_RETURN_W(l.post_attn_norm,
                         load.vector(name("post_attention_norm.weight"), e));
    }
    ASSIGN_OR_RETURN_W(l.ffn_norm, load.vector(arch::layer_tensor(il, r.ffn_norm), e));
    if (hp.moe.n_expert > 0) {
      absl::Status st = load_experts(load, hp, il, l.experts);
      if (!st.ok()) return st;
    } else if (r.fused_gate_up) {
      ASSIGN_OR_RETURN_W(l.w_up.w, load.matrix(name("ffn_up.weight"), e,
                                             2 * int64_t{hp.n_ff}));
    } else {
      ASSIGN_OR_RETURN_W(l.w_gate.w, load.matrix(name("ffn_gate.weight"), e, hp.n_ff));
      ASSIGN_OR_RETURN_W(l.w_up.w, load.matrix(name("ffn_up.weight"), e, hp.n_ff));
    }
    if (hp.moe.n_expert == 0) {
      ASSIGN_OR_RETURN_W(l.w_down.w, load.matrix(name("ffn_down.weight"), hp.n_ff, e));
    }
    if (r.post_ffn_norm) {
      ASSIGN_OR_RETURN_W(l.post_ffn_norm,
                         load.vector(name("post_ffw_norm.weight"), e));
    }
  }
  return w;
}

absl::Status attach_jit_kernels(ShardWeights& w, kernels::IsaTier tier,
                                kernels::jit::KernelCache& cache,
                                kernels::jit::Tuner* tuner,
                                kernels::jit::JitScratch& scratch,
                                ThreadPool& pool, Progress* progress) {
  ProgressPhase phase(progress,
                      tuner != nullptr ? "repacking and tuning weights"
                                       : "repacking weights",
                      static_cast<int64_t>(w.layers.size()));
  // The matmul each Linear got, writable (Linear holds it const).
  std::map<const Linear*, kernels::jit::JitMatmul*> attached;
  auto attach = [&](Linear& l, const std::string& name) -> absl::Status {
    if (l.w.data == nullptr || l.jit != nullptr || !kernels::jit::can_pack(l.w.type)) {
      return absl::OkStatus();
    }
    auto m = kernels::jit::JitMatmul::create(
        l.w, tier, kernels::jit::default_params(l.w.type, tier), &cache, pool);
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat(name, ": ", m.status().message()));
    }
    if (tuner != nullptr) {
      absl::Status st = tuner->tune(**m, l.w, scratch, pool);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat(name, ": ", st.message()));
      }
    }
    attached[&l] = m->get();
    l.jit = std::move(*m);
    // A packed copy: the source's file pages are not read again.
    const uint8_t* values = l.jit->packed().values();
    const uint64_t n_bytes = static_cast<uint64_t>(l.w.n_out) * l.w.row_bytes;
    if (w.source != nullptr && (values < l.w.data || values >= l.w.data + n_bytes)) {
      w.released_bytes += w.source->release_pages(l.w.data, n_bytes);
    }
    return absl::OkStatus();
  };
  // Rows of `parts` one after the other as one matrix with its generated
  // matmul in `fused`, when all parts are present, packable and alike.
  auto fuse = [&](std::initializer_list<Linear*> parts, Linear& fused,
                  const std::string& name) -> absl::Status {
    const WeightMatrix& first = (*parts.begin())->w;
    int64_t n_out = 0;
    for (const Linear* p : parts) {
      if (p->w.data == nullptr || p->w.type != first.type || p->w.n_in != first.n_in ||
          p->w.row_bytes != first.row_bytes || !kernels::jit::can_pack(first.type)) {
        return absl::OkStatus();
      }
      n_out += p->w.n_out;
    }
    std::vector<uint8_t> rows;
    rows.reserve(static_cast<size_t>(n_out * first.row_bytes));
    for (const Linear* p : parts) {
      rows.insert(rows.end(), p->w.data, p->w.data + p->w.n_out * p->w.row_bytes);
    }
    fused.w = first;
    fused.w.data = rows.data();
    fused.w.n_out = n_out;
    absl::Status st = attach(fused, name);
    if (!st.ok()) return st;
    const uint8_t* values = fused.jit->packed().values();
    if (values < rows.data() || values >= rows.data() + rows.size()) {
      fused.w.data = nullptr;  // packed: the concatenated rows are not read again
      for (const Linear* p : parts) {  // nor the parts' file pages
        if (w.source != nullptr) {
          w.released_bytes += w.source->release_pages(
              p->w.data, static_cast<uint64_t>(p->w.n_out) * p->w.row_bytes);
        }
      }
    } else {
      w.owned_bytes.push_back(std::move(rows));  // the matmul views them
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < w.layers.size(); ++i) {
    LayerWeights& l = w.layers[i];
    const std::string layer = absl::StrCat("layer ", i, " of the shard: ");
    absl::Status fused = fuse({&l.wq, &l.wk, &l.wv}, l.wqkv, layer + "attn_q|k|v");
    if (!fused.ok()) return fused;
    if (l.wqkv.jit == nullptr) {  // v unlike q and k: fuse those two
      fused = fuse({&l.wq, &l.wk}, l.wqk, layer + "attn_q|k");
      if (!fused.ok()) return fused;
    }
    fused = fuse({&l.w_gate, &l.w_up}, l.w_gate_up, layer + "ffn_gate|up");
    if (!fused.ok()) return fused;
    if (l.wqkv.jit != nullptr) l.wq = l.wk = l.wv = Linear{};
    if (l.wqk.jit != nullptr) l.wq = l.wk = Linear{};
    if (l.w_gate_up.jit != nullptr) l.w_gate = l.w_up = Linear{};
    for (auto [lin, name] : {std::pair{&l.wq, "attn_q"}, {&l.wk, "attn_k"},
                             {&l.wv, "attn_v"}, {&l.wqkv, "attn_qkv"},
                             {&l.wo, "attn_output"}, {&l.w_gate, "ffn_gate"},
                             {&l.w_up, "ffn_up"}, {&l.w_down, "ffn_down"}}) {
      absl::Status st = attach(*lin, absl::StrCat(layer, name, ".weight"));
      if (!st.ok()) return st;
    }
    // Experts: each its own matmul (gate and up fused), the tuner sharing
    // one measurement per shape. The router and the shared expert as the
    // dense matrices.
    ExpertWeights& x = l.experts;
    if (!x.present()) {
      phase.advance();
      continue;
    }
    for (size_t e = 0; e < x.gate.size(); ++e) {
      const std::string expert = absl::StrCat(layer, "expert ", e, ": ");
      fused = fuse({&x.gate[e], &x.up[e]}, x.gate_up[e], expert + "ffn_gate|up_exps");
      if (!fused.ok()) return fused;
      if (x.gate_up[e].jit != nullptr) x.gate[e] = x.up[e] = Linear{};
      for (auto [lin, name] : {std::pair{&x.gate[e], "ffn_gate_exps"}, {&x.up[e], "ffn_up_exps"},
                               {&x.down[e], "ffn_down_exps"}}) {
        absl::Status st = attach(*lin, absl::StrCat(expert, name, ".weight"));
        if (!st.ok()) return st;
      }
    }
    if (x.shared_gate.present()) {
      fused = fuse({&x.shared_gate, &x.shared_up}, x.shared_gate_up,
                   layer + "ffn_gate|up_shexp");
      if (!fused.ok()) return fused;
      if (x.shared_gate_up.jit != nullptr) x.shared_gate = x.shared_up = Linear{};
    }
    // (ffn_gate_inp_shexp, one row, keeps the reference matmul.)
    for (auto [lin, name] : {std::pair{&x.router, "ffn_gate_inp"},
                             {&x.shared_gate, "ffn_gate_shexp"}, {&x.shared_up, "ffn_up_shexp"},
                             {&x.shared_down, "ffn_down_shexp"}}) {
      absl::Status st = attach(*lin, absl::StrCat(layer, name, ".weight"));
      if (!st.ok()) return st;
    }
    phase.advance();
  }
  absl::Status st = attach(w.output, "output");
  if (!st.ok()) return st;
  // Each matmul learns the one a decode step runs next (forward.cc's
  // order), so its threads prefetch that one's first bytes as they finish;
  // the last one's successor is the first one of the next step.
  std::vector<kernels::jit::JitMatmul*> order;
  auto add = [&](const Linear& l) {
    if (auto it = attached.find(&l); it != attached.end() && l.jit != nullptr) {
      order.push_back(it->second);
    }
  };
  for (const LayerWeights& l : w.layers) {
    // (An MoE block's experts depend on the routing: only the router and
    // the shared expert are in the chain.)
    const ExpertWeights& x = l.experts;
    for (const Linear* lin : {&l.wqkv, &l.wqk, &l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate_up,
                              &l.w_gate, &l.w_up, &l.w_down, &x.router, &x.shared_gate_up,
                              &x.shared_gate, &x.shared_up, &x.shared_down}) {
      add(*lin);
    }
  }
  add(w.output);
  for (size_t i = 0; i < order.size(); ++i) {
    order[i]->set_decode_successor(order[(i + 1) % order.size()]);
  }
  return absl::OkStatus();
}

}  // namespace strata::worker
