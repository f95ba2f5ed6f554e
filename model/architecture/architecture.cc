#include "model/architecture/architecture.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata::arch {
namespace {

struct FamilyName {
  Family family;
  std::string_view name;
};
constexpr FamilyName kFamilies[] = {
    {Family::kLlama, "llama"},   {Family::kQwen2, "qwen2"},
    {Family::kQwen3, "qwen3"},   {Family::kGemma2, "gemma2"},
    {Family::kGemma3, "gemma3"}, {Family::kPhi3, "phi3"},
    {Family::kQwen2Moe, "qwen2moe"}, {Family::kQwen3Moe, "qwen3moe"},
    {Family::kOlmoe, "olmoe"},       {Family::kGptOss, "gpt-oss"},
};

// Reads ARCH.* keys with errors that name the key.
class KeyReader {
 public:
  KeyReader(const gguf::GgufFile& file, std::string arch)
      : file_(file), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const {
    return absl::StrCat(arch_, ".", std::string(suffix));
  }

  bool has(std::string_view suffix) const { return file_.find(key(suffix)) != nullptr; }

  // An integer key in [lo, hi]; `fallback` when absent (nullopt: required).
  absl::StatusOr<int> integer(std::string_view suffix, int64_t lo, int64_t hi,
                              std::optional<int> fallback) const {
    const std::string k = key(suffix);
    if (file_.find(k) == nullptr) {
      if (fallback) return *fallback;
      return missing(k);
    }
    absl::StatusOr<uint64_t> v = file_.get_u64(k);
    if (!v.ok()) return v.status();
    if (static_cast<int64_t>(*v) < lo || *v > static_cast<uint64_t>(hi)) {
      return absl::InvalidArgumentError(absl::StrCat(
          k, ": ", *v, " is out of range [", lo, ", ", hi, "]"));
    }
    return static_cast<int>(*v);
  }

  // A float key that must be finite and positive (or >= 0 when
  // `allow_zero`); `fallback` when absent (nullopt: required).
  absl::StatusOr<float> real(std::string_view suffix,
                             std::optional<float> fallback,
                             bool allow_zero = false) const {
    const std::string k = key(suffix);
    if (file_.find(k) == nullptr) {
      if (fallback) return *fallback;
      return missing(k);
    }
    absl::StatusOr<float> v = file_.get_f32(k);
    if (!v.ok()) return v.status();
    if (!std::isfinite(*v) || *v < 0.0f || (*v == 0.0f && !allow_zero)) {
      return absl::InvalidArgumentError(
          absl::StrCat(k, ": ", *v, " is not a positive finite number"));
    }
    return *v;
  }

  // A string key; nullopt when absent, an error naming the key when it
  // holds another type (a UINT32 rope.scaling.type must not read as absent).
  absl::StatusOr<std::optional<std::string>> text(
      std::string_view suffix) const {
    const std::string k = key(suffix);
    if (file_.find(k) == nullptr) return std::optional<std::string>();
    absl::StatusOr<std::string> v = file_.get_string(k);
    if (!v.ok()) return v.status();
    return std::optional<std::string>(*v);
  }

 private:
  absl::Status missing(const std::string& k) const {
    return absl::InvalidArgumentError(absl::StrCat(
        k, ": missing (required by architecture ", arch_, ")"));
  }

  const gguf::GgufFile& file_;
  std::string arch_;
};

#define ASSIGN_OR_RETURN_ARCH(lhs, expr) \
  do {                                   \
    auto value_or = (expr);              \
    if (!value_or.ok()) return value_or.status(); \
    lhs = *value_or;                     \
  } while (0)

// The block recipe of each family (llama.cpp src/models/*.cpp build
// functions are the source of which steps each takes).
BlockRecipe recipe_for(Family family, int n_embd) {
  BlockRecipe r;
  switch (family) {
    case Family::kLlama:
      break;
    case Family::kQwen2:
    case Family::kQwen2Moe:
      r.qkv_bias = true;
      r.rope = RopeStyle::kNeox;
      break;
    case Family::kQwen3:
    case Family::kQwen3Moe:
      r.qk_norm = true;
      r.rope = RopeStyle::kNeox;
      break;
    case Family::kOlmoe:
      r.qk_norm_full = true;
      r.rope = RopeStyle::kNeox;
      break;
    case Family::kGemma2:
    case Family::kGemma3:
      r.qk_norm = family == Family::kGemma3;
      r.post_attn_norm = true;
      r.post_ffn_norm = true;
      r.activation = FfnActivation::kGeluTanh;
      r.rope = RopeStyle::kNeox;
      r.scale_query = true;
      r.embedding_scale = std::sqrt(static_cast<float>(n_embd));
      break;
    case Family::kPhi3:
      r.fused_qkv = true;
      r.fused_gate_up = true;
      r.rope = RopeStyle::kNeox;
      r.scale_query = true;
      break;
    case Family::kGptOss:  // llama.cpp src/models/openai-moe.cpp
      r.qkv_bias = true;
      r.attn_out_bias = true;
      r.attn_sinks = true;
      r.expert_bias = true;
      r.ffn_norm = "post_attention_norm.weight";
      r.activation = FfnActivation::kSwigluOai;
      r.rope = RopeStyle::kNeox;
      break;
  }
  return r;
}

// Which layers use the sliding window, as llama.cpp's load_swa_pattern:
// ARCH.attention.sliding_window_pattern as one bool per layer, or as a
// period p (layer il slides unless il % p == p - 1; 0: every layer
// slides), or `period` when the key is absent.
absl::Status read_sliding_pattern(const gguf::GgufFile& file, const KeyReader& keys,
                                  int period, std::vector<bool>* sliding) {
  const std::string key = keys.key("attention.sliding_window_pattern");
  const gguf::Value* value = file.find(key);
  const int n_layer = static_cast<int>(sliding->size());
  if (value != nullptr && value->type == gguf::ValueType::kArray) {
    absl::StatusOr<const gguf::Array*> flags = file.get_array(key, gguf::ValueType::kBool);
    if (!flags.ok()) return flags.status();
    if (static_cast<int>((*flags)->items.size()) != n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ": ", (*flags)->items.size(), " flags for ", n_layer, " layers"));
    }
    for (int il = 0; il < n_layer; ++il) {
      (*sliding)[il] = std::get<bool>((*flags)->items[il].data);
    }
    return absl::OkStatus();
  }
  if (value != nullptr) {
    ASSIGN_OR_RETURN_ARCH(period,
                          keys.integer("attention.sliding_window_pattern", 0, 4096, {}));
  }
  for (int il = 0; il < n_layer; ++il) {
    (*sliding)[il] = period == 0 || il % period < period - 1;
  }
  return absl::OkStatus();
}

// The mixture-of-experts keys (see the header); llama.cpp's load_hparams
// (src/llama-model.cpp and src/models/<family>.cpp) for the defaults and
// the facts each family hard-codes.
absl::StatusOr<MoeParams> read_moe(const KeyReader& keys, Family family, int n_ff) {
  constexpr int kMaxExperts = 256;  // llama.cpp's LLAMA_MAX_EXPERTS (512) is
                                    // looser; no model here routes more
  const bool moe_family = family == Family::kQwen2Moe || family == Family::kQwen3Moe ||
                          family == Family::kOlmoe || family == Family::kGptOss;
  MoeParams moe;
  // A dense model (no expert_count, or 0): an expert_used_count other than
  // 0 contradicts it.
  auto dense = [&](const char* count) -> absl::StatusOr<MoeParams> {
    absl::StatusOr<int> used = keys.integer("expert_used_count", 0, kMaxExperts, 0);
    if (!used.ok()) return used.status();
    if (*used != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.key("expert_used_count"), ": ", *used, " but ", keys.key("expert_count"), " ",
          count, " (a dense model routes to no expert)"));
    }
    return MoeParams{};
  };
  if (!moe_family && !keys.has("expert_count")) return dense("is missing");
  ASSIGN_OR_RETURN_ARCH(moe.n_expert,
                        keys.integer("expert_count", moe_family ? 1 : 0, kMaxExperts,
                                     moe_family ? std::nullopt : std::optional<int>(0)));
  if (moe.n_expert == 0) return dense("is 0");
  if (family != Family::kLlama && !moe_family) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("expert_count"), ": ", moe.n_expert,
        ", but this architecture has no mixture-of-experts form"));
  }
  ASSIGN_OR_RETURN_ARCH(moe.n_expert_used,
                        keys.integer("expert_used_count", 0, kMaxExperts, {}));
  if (moe.n_expert_used == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("expert_used_count"), ": 0, but ", keys.key("expert_count"), " = ",
        moe.n_expert, " (a token must use at least one expert)"));
  }
  if (moe.n_expert_used > moe.n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("expert_used_count"), ": ", moe.n_expert_used, " is more than ",
        keys.key("expert_count"), " = ", moe.n_expert));
  }
  constexpr int kMaxDim = 1 << 20;
  moe.n_ff_expert = n_ff;
  if (family == Family::kQwen2Moe || family == Family::kQwen3Moe) {
    ASSIGN_OR_RETURN_ARCH(moe.n_ff_expert,
                          keys.integer("expert_feed_forward_length", 1, kMaxDim,
                                       n_ff / moe.n_expert_used));
    if (moe.n_ff_expert == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          keys.key("expert_feed_forward_length"), ": missing, and the default ",
          keys.key("feed_forward_length"), " / ", keys.key("expert_used_count"), " is 0"));
    }
  }
  if (family == Family::kGptOss) {  // required (llama.cpp's openai-moe loader)
    ASSIGN_OR_RETURN_ARCH(moe.n_ff_expert,
                          keys.integer("expert_feed_forward_length", 1, kMaxDim, {}));
  }
  if (family == Family::kQwen2Moe) {
    ASSIGN_OR_RETURN_ARCH(moe.n_ff_shared,
                          keys.integer("expert_shared_feed_forward_length", 1, kMaxDim, n_ff));
  }
  // gpt-oss: top-k of the (biased) router logits, softmax over the k
  // (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT in its graph).
  moe.gating = family == Family::kGptOss ? ExpertGating::kSoftmaxWeight : ExpertGating::kSoftmax;
  moe.norm_weights = family == Family::kLlama || family == Family::kQwen3Moe;
  moe.weights_scale = 1.0f;
  return moe;
}

}  // namespace

std::vector<std::string_view> supported_architectures() {
  std::vector<std::string_view> names;
  for (const FamilyName& f : kFamilies) names.push_back(f.name);
  return names;
}

std::string layer_tensor(int layer, std::string_view suffix) {
  return absl::StrCat("blk.", layer, ".", std::string(suffix));
}

int64_t block_index(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || name[0] < '0' || name[0] > '9') return -1;
  int64_t n = -1;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, n);
  if (ec != std::errc() || ptr != name.data() + dot) return -1;
  return n;
}

absl::Status check_block_tensors(const std::vector<gguf::TensorInfo>& tensors, int n_layer) {
  for (const gguf::TensorInfo& t : tensors) {
    if (const int64_t block = block_index(t.name); block >= n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.name, ": block ", block, " but the metadata says ", n_layer, " blocks"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Hyperparameters> read_hyperparameters(
    const gguf::GgufFile& file) {
  absl::StatusOr<std::string> arch = file.get_string("general.architecture");
  if (!arch.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "general.architecture: ", arch.status().message()));
  }
  Hyperparameters hp;
  hp.architecture = *arch;
  bool known = false;
  for (const FamilyName& f : kFamilies) {
    if (f.name == *arch) {
      hp.family = f.family;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown architecture '", *arch,
        "' (general.architecture); supported: ",
        absl::StrJoin(supported_architectures(), ", ",
                       [](std::string* out, std::string_view name) {
                         out->append(name);
                       })));
  }
  const KeyReader keys(file, *arch);
  constexpr int kMaxDim = 1 << 20;
  ASSIGN_OR_RETURN_ARCH(hp.n_layer, keys.integer("block_count", 1, 4096, {}));
  ASSIGN_OR_RETURN_ARCH(hp.n_embd,
                        keys.integer("embedding_length", 1, kMaxDim, {}));
  ASSIGN_OR_RETURN_ARCH(hp.n_ff,
                        keys.integer("feed_forward_length", 1, kMaxDim, {}));
  ASSIGN_OR_RETURN_ARCH(hp.n_head,
                        keys.integer("attention.head_count", 1, 4096, {}));
  ASSIGN_OR_RETURN_ARCH(
      hp.n_head_kv,
      keys.integer("attention.head_count_kv", 1, hp.n_head, hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("attention.head_count_kv"), ": ", hp.n_head_kv,
        " does not divide ", keys.key("attention.head_count"), " = ",
        hp.n_head));
  }
  ASSIGN_OR_RETURN_ARCH(hp.n_ctx_train,
                        keys.integer("context_length", 1, 1 << 24, 2048));
  // The head size defaults to n_embd / n_head (llama.cpp's n_embd_head_k),
  // which needs the head count to divide the embedding width.
  if (hp.n_embd % hp.n_head != 0 &&
      !(keys.has("attention.key_length") && keys.has("attention.value_length"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("embedding_length"), " = ", hp.n_embd, " is not a multiple of ",
        keys.key("attention.head_count"), " = ", hp.n_head, ", and ",
        keys.key("attention.key_length"), " / ", keys.key("attention.value_length"),
        " do not give the head size"));
  }
  const int default_head_dim = hp.n_embd / hp.n_head;
  ASSIGN_OR_RETURN_ARCH(hp.head_dim_k, keys.integer("attention.key_length", 1,
                                                    kMaxDim, default_head_dim));
  ASSIGN_OR_RETURN_ARCH(
      hp.head_dim_v,
      keys.integer("attention.value_length", 1, kMaxDim, default_head_dim));
  ASSIGN_OR_RETURN_ARCH(hp.n_rot, keys.integer("rope.dimension_count", 2,
                                               hp.head_dim_k, hp.head_dim_k));
  if (hp.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("rope.dimension_count"), ": ", hp.n_rot, " is odd"));
  }
  ASSIGN_OR_RETURN_ARCH(hp.rms_eps,
                        keys.real("attention.layer_norm_rms_epsilon", {}));
  ASSIGN_OR_RETURN_ARCH(hp.n_vocab,
                        keys.integer("vocab_size", 1, 1 << 24, 0));
  if (hp.n_vocab == 0) {
    absl::StatusOr<const gguf::Array*> tokens = file.get_array(
        "tokenizer.ggml.tokens", gguf::ValueType::kString);
    if (tokens.ok()) hp.n_vocab = static_cast<int>((*tokens)->items.size());
  }

  float freq_base = 0.0f;
  ASSIGN_OR_RETURN_ARCH(freq_base, keys.real("rope.freq_base", 10000.0f));
  float freq_scale = 1.0f;
  std::optional<std::string> scaling;
  ASSIGN_OR_RETURN_ARCH(scaling, keys.text("rope.scaling.type"));
  if (scaling && *scaling != "none" && *scaling != "linear" &&
      *scaling != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(
        keys.key("rope.scaling.type"), ": '", *scaling,
        "' is not supported (none, linear, yarn)"));
  }
  if (!scaling || *scaling != "none") {
    float factor = 0.0f;
    ASSIGN_OR_RETURN_ARCH(factor, keys.real("rope.scaling.factor", 0.0f, true));
    if (factor == 0.0f) {
      ASSIGN_OR_RETURN_ARCH(factor, keys.real("rope.scale_linear", 0.0f, true));
    }
    if (factor != 0.0f) freq_scale = 1.0f / factor;
  }
  ASSIGN_OR_RETURN_ARCH(hp.n_ctx_orig,
                        keys.integer("rope.scaling.original_context_length", 1,
                                     1 << 24, hp.n_ctx_train));
  if (scaling && *scaling == "yarn") {
    hp.yarn_ext_factor = 1.0f;
    // The attention factor llama.cpp's context derives for YaRN:
    // mscale(s) = 0.1 ln s + 1 for s > 1 (Peng et al. 2023, sec. 3.4),
    // divided by the 1 + 0.1 ln s that the rotation itself multiplies in
    // again (ggml's rope_yarn), so that the product is mscale(s) once.
    const float s = 1.0f / freq_scale;
    const float mscale = s <= 1.0f ? 1.0f : 0.1f * std::log(s) + 1.0f;
    hp.yarn_attn_factor = mscale * (1.0f / (1.0f + 0.1f * std::log(s)));
  }
  // rope.scaling.attn_factor multiplies the rotated q and k of every
  // layer (cos and sin scaled alike), with or without YaRN.
  float attn_factor = 1.0f;
  ASSIGN_OR_RETURN_ARCH(attn_factor, keys.real("rope.scaling.attn_factor", 1.0f));
  hp.yarn_attn_factor *= attn_factor;

  hp.recipe = recipe_for(hp.family, hp.n_embd);
  ASSIGN_OR_RETURN_ARCH(hp.moe, read_moe(keys, hp.family, hp.n_ff));
  hp.attention_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim_k));
  hp.sliding.assign(hp.n_layer, false);
  hp.rope.assign(hp.n_layer, LayerRope{freq_base, freq_scale});

  switch (hp.family) {
    case Family::kGemma2: {
      ASSIGN_OR_RETURN_ARCH(hp.sliding_window,
                            keys.integer("attention.sliding_window", 1,
                                         1 << 24, 4096));
      ASSIGN_OR_RETURN_ARCH(hp.attn_softcap,
                            keys.real("attn_logit_softcapping", 50.0f));
      ASSIGN_OR_RETURN_ARCH(hp.final_softcap,
                            keys.real("final_logit_softcapping", 30.0f));
      for (int il = 0; il < hp.n_layer; ++il) hp.sliding[il] = il % 2 == 0;
      if (hp.n_layer == 46) {  // Gemma 2 27B scales by the model width
        hp.attention_scale =
            1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
      }
      break;
    }
    case Family::kGemma3: {
      ASSIGN_OR_RETURN_ARCH(
          hp.sliding_window,
          keys.integer("attention.sliding_window", 1, 1 << 24, {}));
      constexpr int kPattern = 6;  // 5 local layers, then 1 global
      for (int il = 0; il < hp.n_layer; ++il) {
        hp.sliding[il] = il % kPattern < kPattern - 1;
        if (hp.sliding[il]) hp.rope[il] = LayerRope{10000.0f, 1.0f};
      }
      if (hp.n_layer == 62) {  // Gemma 3 27B
        hp.attention_scale =
            1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
      }
      break;
    }
    case Family::kGptOss: {
      ASSIGN_OR_RETURN_ARCH(
          hp.sliding_window,
          keys.integer("attention.sliding_window", 1, 1 << 24, {}));
      absl::Status pattern = read_sliding_pattern(file, keys, /*period=*/2, &hp.sliding);
      if (!pattern.ok()) return pattern;
      // The sliding layers' RoPE: their own base when the file gives one,
      // the same scaling (llama.cpp: rope_freq_{base,scale}_train_swa).
      float base_swa = freq_base;
      ASSIGN_OR_RETURN_ARCH(base_swa, keys.real("rope.freq_base_swa", freq_base));
      for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.sliding[il]) hp.rope[il].freq_base = base_swa;
      }
      break;
    }
    default:
      break;
  }
  return hp;
}

}  // namespace strata::arch
