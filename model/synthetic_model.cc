// Random-weight GGUFs of named llama-family shapes (synthetic_model.h).
// Block layouts: ggml/src/ggml-common.h of llama.cpp (block_q4_0 ...
// block_q6_K); tensor names and keys: llama.cpp's llama architecture.
#include "model/synthetic_model.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>

#include "model/gguf_reader.h"
#include "model/gguf_text.h"
#include "model/gguf_writer.h"
#include "model/published_models.h"

namespace strata::synth {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): fast, and every seed gives a
// different stream.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() {
    return static_cast<float>(static_cast<int64_t>(next()) >> 40) * 0x1p-23f;
  }
  void fill(std::span<uint8_t> out) {
    size_t i = 0;
    for (; i + 8 <= out.size(); i += 8) {
      const uint64_t v = next();
      std::memcpy(out.data() + i, &v, 8);
    }
    if (i < out.size()) {
      const uint64_t v = next();
      std::memcpy(out.data() + i, &v, out.size() - i);
    }
  }
};

// IEEE binary16 of a finite float, rounded toward zero; subnormals kept,
// magnitudes above 65504 saturated (never infinity or NaN).
uint16_t to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (!(a < 65504.0f)) return sign | 0x7bffu;
  if (a < 0x1p-14f) {  // subnormal: a / 2^-24 units
    return sign | static_cast<uint16_t>(a * 0x1p24f);
  }
  const uint32_t ax = std::bit_cast<uint32_t>(a);
  const uint32_t exp = (ax >> 23) - 127 + 15;
  return sign | static_cast<uint16_t>((exp << 10) | ((ax >> 13) & 0x3ffu));
}

void put_f16(uint8_t* p, float f) {
  const uint16_t h = to_f16(f);
  std::memcpy(p, &h, 2);
}

// Fills `out` (whole blocks of `type`) with random blocks whose
// weights have a standard deviation of about sigma. The quants are random
// bytes; the f16 scales are set per block (the spread of a uniform quant
// gives the divisor).
void fill_matrix(GgmlType type, float sigma, Random& rng,
                 std::span<uint8_t> out) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  const size_t block = static_cast<size_t>(info.type_size);
  if (type == GgmlType::kF32) {
    for (size_t i = 0; i + 4 <= out.size(); i += 4) {
      const float v = rng.symmetric() * sigma * 1.7320508f;
      std::memcpy(out.data() + i, &v, 4);
    }
    return;
  }
  if (type == GgmlType::kF16) {
    for (size_t i = 0; i + 2 <= out.size(); i += 2) {
      put_f16(out.data() + i, rng.symmetric() * sigma * 1.7320508f);
    }
    return;
  }
  rng.fill(out);
  const size_t n_blocks = out.size() / block;
  // The divisor: the standard deviation of the type's unscaled weight.
  // Small jitter per block (x 0.75 .. 1.25) so scales are not all equal.
  for (size_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = out.data() + b * block;
    const float jitter = 1.0f + 0.25f * rng.symmetric();
    switch (type) {
      case GgmlType::kQ4_0:  // d, qs[16]: d * (q - 8)
        put_f16(p, sigma * jitter / 4.61f);
        break;
      case GgmlType::kQ4_1: {  // d, m, qs[16]: d * q + m
        const float d = sigma * jitter / 4.61f;
        put_f16(p, d);
        put_f16(p + 2, -7.5f * d);
        break;
      }
      case GgmlType::kQ5_0:  // d, qh[4], qs[16]: d * (q - 16)
        put_f16(p, sigma * jitter / 9.23f);
        break;
      case GgmlType::kQ8_0:  // d, qs[32] (int8): d * q
        put_f16(p, sigma * jitter / 73.9f);
        break;
      case GgmlType::kQ4_K: {  // d, dmin, scales[12], qs[128]
        // d * sc * q - dmin * m with sc, m 6-bit, q 4-bit: about 300 d.
        const float d = sigma * jitter / 300.0f;
        put_f16(p, d);
        put_f16(p + 2, 7.5f * d);
        break;
      }
      case GgmlType::kQ5_K: {  // d, dmin, scales[12], qh[32], qs[128]
        // Q4_K's with a 5-bit q: about 600 d.
        const float d = sigma * jitter / 600.0f;
        put_f16(p, d);
        put_f16(p + 2, 15.5f * d);
        break;
      }
      case GgmlType::kQ6_K:  // ql[128], qh[64], scales[16] (int8), d
        put_f16(p + 208, sigma * jitter / 1369.0f);
        break;
      default:
        break;  // can_synthesize() keeps other types out
    }
  }
}

absl::Status copy_tokenizer(const std::string& path, gguf::GgufWriter& w,
                            int& n_vocab) {
  auto model = gguf::GgufModel::open(path);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        gguf::text::cat("--tokenizer-from: ",
                                        std::string(model.status().message())));
  }
  const gguf::GgufFile& f = (*model)->first();
  auto tokens = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::kString);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(gguf::text::cat(
        "--tokenizer-from: ", path,
        ": tokenizer.ggml.tokens: ", std::string(tokens.status().message())));
  }
  n_vocab = static_cast<int>((*tokens)->items.size());
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    if (absl::Status s = w.set_metadata(kv.key, kv.value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// SentencePiece-style byte vocabulary: <unk> <s> </s>, <0x00> .. <0xFF>,
// then <unused_N> up to n_vocab. Token types as llama.cpp's
// (llama_token_type: 2 unknown, 3 control, 5 unused, 6 byte).
absl::Status builtin_tokenizer(gguf::GgufWriter& w, int n_vocab) {
  using gguf::Value;
  using gguf::ValueType;
  std::vector<Value> tokens, scores, types;
  tokens.reserve(n_vocab);
  auto add = [&](std::string text, int32_t type) {
    tokens.push_back(gguf::value_string(std::move(text)));
    scores.push_back(gguf::value_f32(0.0f));
    types.push_back(gguf::value_i32(type));
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 6);
  }
  for (int i = static_cast<int>(tokens.size()); i < n_vocab; ++i) {
    add(gguf::text::cat("<unused_", i, ">"), 5);
  }
  for (auto& [key, value] : std::vector<std::pair<std::string, Value>>{
           {"tokenizer.ggml.model", gguf::value_string("llama")},
           {"tokenizer.ggml.tokens",
            gguf::value_array(ValueType::kString, std::move(tokens))},
           {"tokenizer.ggml.scores",
            gguf::value_array(ValueType::kFloat32, std::move(scores))},
           {"tokenizer.ggml.token_type",
            gguf::value_array(ValueType::kInt32, std::move(types))},
           {"tokenizer.ggml.unknown_token_id", gguf::value_u32(0)},
           {"tokenizer.ggml.bos_token_id", gguf::value_u32(1)},
           {"tokenizer.ggml.eos_token_id", gguf::value_u32(2)},
           {"tokenizer.ggml.add_bos_token", gguf::value_bool(true)},
       }) {
    if (absl::Status s = w.set_metadata(key, std::move(value)); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<Shape>& shapes() {
  // name, n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx, rope
  // base, rms eps, tied: the models' config.json.
  static const std::vector<Shape> kShapes = {
      {"tiny-llama", 2, 256, 512, 4, 2, 512, 2048, 10000.0f, 1e-5f, true},
      {"smollm2-135m", 30, 576, 1536, 9, 3, 49152, 8192, 100000.0f, 1e-5f,
       true},
      {"llama-3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, 500000.0f, 1e-5f,
       false},
      {"llama-3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, 500000.0f, 1e-5f,
       false},
      // Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1: hidden 4096, intermediate
      // 14336 an expert, 32 layers, 32 heads, 8 KV heads, vocab 32000,
      // max_position_embeddings 32768, rope_theta 1e6, 8 experts, 2 a token).
      {"tiny-mixtral", 2, 256, 512, 4, 2, 512, 2048, 10000.0f, 1e-5f, true, 4,
       2},
      {"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000, 32768, 1e6f, 1e-5f, false,
       8, 2},
  };
  return kShapes;
}

const Shape* find_shape(std::string_view name) {
  for (const Shape& s : shapes()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool can_synthesize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

namespace {

// The shape of the options, or why not.
absl::StatusOr<const Shape*> checked_shape(const SynthOptions& o) {
  const Shape* shape = find_shape(o.shape);
  if (shape == nullptr) {
    std::string names;
    for (const Shape& s : shapes())
      names += gguf::text::cat(names.empty() ? "" : ", ", s.name);
    return absl::InvalidArgumentError(
        gguf::text::cat("--shape: '", o.shape, "' is not one of ", names));
  }
  if (!can_synthesize(o.type)) {
    return absl::InvalidArgumentError(gguf::text::cat(
        "--type: ", ggml_type_info(o.type).name,
        " is not written (F32, F16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)"));
  }
  if (o.mix == SynthOptions::Mix::kQ4_K_M) {
    if (o.type != GgmlType::kQ4_K) {
      return absl::InvalidArgumentError(gguf::text::cat(
          "--type: the Q4_K_M mix is made of Q4_K and Q6_K, not ",
          ggml_type_info(o.type).name));
    }
  }
  if (o.blocks < 0 || o.blocks > shape->n_layer) {
    return absl::InvalidArgumentError(
        gguf::text::cat("--blocks: ", o.blocks, " is outside [0, ",
                        shape->n_layer, "] (", shape->name, ")"));
  }
  return shape;
}

}  // namespace

GgmlType intended_type(const SynthOptions& o, std::string_view name,
                       int n_layer) {
  if (o.mix != SynthOptions::Mix::kQ4_K_M) return o.type;
  if (name == "output.weight") return GgmlType::kQ6_K;
  // With 8 experts llama.cpp bumps attn_k and attn_v to Q8_0 and
  // attn_output to Q5_K.
  const Shape* shape = find_shape(o.shape);
  if (shape != nullptr && shape->n_expert == 8) {
    if (name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight")) {
      return GgmlType::kQ8_0;
    }
    if (name.ends_with(".attn_output.weight")) return GgmlType::kQ5_K;
  }
  // "blk.N.attn_v.weight" / "blk.N.ffn_down.weight" (or _exps): Q6_K on the
  // layers llama.cpp gives more bits; a 70B-class model's (80 layers) other
  // attn_v Q5_K.
  const bool v = name.ends_with(".attn_v.weight");
  const bool down = name.ends_with(".ffn_down.weight") || name.ends_with(".ffn_down_exps.weight");
  if ((v || down) && name.starts_with("blk.")) {
    int layer = 0;
    for (size_t i = 4; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
      layer = layer * 10 + (name[i] - '0');
    if (use_more_bits(layer, n_layer)) return GgmlType::kQ6_K;
    if (v && shape != nullptr && shape->n_layer >= 80) return GgmlType::kQ5_K;
  }
  return o.type;
}

absl::StatusOr<std::vector<TensorSpec>> tensor_plan(const SynthOptions& o,
                                                    int n_vocab) {
  absl::StatusOr<const Shape*> checked = checked_shape(o);
  if (!checked.ok()) return checked.status();
  const Shape& shape = **checked;
  const int n_layer = o.blocks > 0 ? o.blocks : shape.n_layer;
  const int64_t head_dim = shape.n_embd / shape.n_head;
  std::vector<TensorSpec> plan;
  auto matrix = [&](std::string name, int64_t n_in, int64_t n_out) {
    // Rows that are not a multiple of the type's block: Q8_0 (32).
    const GgmlType want = intended_type(o, name, n_layer);
    const GgmlType type =
        n_in % ggml_type_info(want).block_size == 0 ? want : GgmlType::kQ8_0;
    plan.push_back({std::move(name), type, {n_in, n_out}});
  };
  // n_expert matrices [n_out][n_in] as one 3-D tensor.
  auto experts = [&](std::string name, int64_t n_in, int64_t n_out, int64_t n_expert) {
    matrix(std::move(name), n_in, n_out);
    plan.back().shape.push_back(n_expert);
  };
  auto vector = [&](std::string name, int64_t n) {
    plan.push_back({std::move(name), GgmlType::kF32, {n}});
  };
  const int64_t e = shape.n_embd;
  matrix("token_embd.weight", e, n_vocab);
  for (int il = 0; il < n_layer; ++il) {
    const std::string p = gguf::text::cat("blk.", il, ".");
    vector(p + "attn_norm.weight", e);
    matrix(p + "attn_q.weight", e, shape.n_head * head_dim);
    matrix(p + "attn_k.weight", e, shape.n_head_kv * head_dim);
    matrix(p + "attn_v.weight", e, shape.n_head_kv * head_dim);
    matrix(p + "attn_output.weight", shape.n_head * head_dim, e);
    vector(p + "ffn_norm.weight", e);
    if (shape.n_expert > 0) {
      const int64_t x = shape.n_expert;
      plan.push_back({p + "ffn_gate_inp.weight", GgmlType::kF32, {e, x}});
      experts(p + "ffn_gate_exps.weight", e, shape.n_ff, x);
      experts(p + "ffn_up_exps.weight", e, shape.n_ff, x);
      experts(p + "ffn_down_exps.weight", shape.n_ff, e, x);
      continue;
    }
    matrix(p + "ffn_gate.weight", e, shape.n_ff);
    matrix(p + "ffn_up.weight", e, shape.n_ff);
    matrix(p + "ffn_down.weight", shape.n_ff, e);
  }
  vector("output_norm.weight", e);
  if (!shape.tied_output) matrix("output.weight", e, n_vocab);
  return plan;
}

absl::StatusOr<SynthReport> write_synthetic_model(const SynthOptions& o,
                                                  const std::string& path) {
  absl::StatusOr<const Shape*> checked = checked_shape(o);
  if (!checked.ok()) return checked.status();
  const Shape* shape = *checked;
  SynthReport report;
  report.n_layer = o.blocks > 0 ? o.blocks : shape->n_layer;
  const int head_dim = shape->n_embd / shape->n_head;

  gguf::GgufWriter w;
  const std::string arch = "llama";
  auto key = [&](std::string_view suffix) {
    return gguf::text::cat(arch, ".", suffix);
  };
  std::vector<std::pair<std::string, gguf::Value>> meta = {
      {"general.architecture", gguf::value_string(arch)},
      {"general.name",
       gguf::value_string(gguf::text::cat(
           "synthetic ", shape->name, " ",
           o.mix == SynthOptions::Mix::kQ4_K_M
               ? std::string("Q4_K_M")
               : std::string(ggml_type_info(o.type).name),
           o.blocks > 0 ? gguf::text::cat(" (", o.blocks, " blocks)")
                        : std::string()))},
      {key("block_count"),
       gguf::value_u32(static_cast<uint32_t>(report.n_layer))},
      {key("context_length"),
       gguf::value_u32(static_cast<uint32_t>(shape->n_ctx))},
      {key("embedding_length"),
       gguf::value_u32(static_cast<uint32_t>(shape->n_embd))},
      {key("feed_forward_length"),
       gguf::value_u32(static_cast<uint32_t>(shape->n_ff))},
      {key("attention.head_count"),
       gguf::value_u32(static_cast<uint32_t>(shape->n_head))},
      {key("attention.head_count_kv"),
       gguf::value_u32(static_cast<uint32_t>(shape->n_head_kv))},
      {key("attention.layer_norm_rms_epsilon"),
       gguf::value_f32(shape->rms_eps)},
      {key("rope.freq_base"), gguf::value_f32(shape->rope_freq_base)},
      {key("rope.dimension_count"),
       gguf::value_u32(static_cast<uint32_t>(head_dim))},
  };
  if (shape->n_expert > 0) {
    meta.emplace_back(key("expert_count"),
                      gguf::value_u32(static_cast<uint32_t>(shape->n_expert)));
    meta.emplace_back(key("expert_used_count"),
                      gguf::value_u32(static_cast<uint32_t>(shape->n_expert_used)));
  }
  for (auto& [k, v] : meta) {
    if (absl::Status s = w.set_metadata(k, std::move(v)); !s.ok()) return s;
  }
  int n_vocab = shape->n_vocab;
  if (!o.tokenizer_from.empty()) {
    if (absl::Status s = copy_tokenizer(o.tokenizer_from, w, n_vocab); !s.ok())
      return s;
  } else if (absl::Status s = builtin_tokenizer(w, n_vocab); !s.ok()) {
    return s;
  }
  report.n_vocab = n_vocab;

  absl::StatusOr<std::vector<TensorSpec>> plan = tensor_plan(o, n_vocab);
  if (!plan.ok()) return plan.status();
  for (const TensorSpec& t : *plan) {
    if (t.shape.size() >= 2 && t.type != GgmlType::kF32 &&
        t.type != intended_type(o, t.name, report.n_layer))
      ++report.fallback_tensors;
    if (absl::Status s = w.add_tensor(t.name, t.type, t.shape); !s.ok())
      return s;
  }
  for (const gguf::TensorInfo& t : w.tensors())
    report.tensor_bytes += t.n_bytes;
  report.n_tensors = plan->size();

  absl::Status written = w.write(
      path, [&](size_t index, const gguf::TensorInfo&, std::span<uint8_t> out) {
        const TensorSpec& t = (*plan)[index];
        Random rng{o.seed * 0x100000001b3ull + index};
        if (t.shape.size() == 1) {  // norm weights near 1
          for (size_t i = 0; i + 4 <= out.size(); i += 4) {
            const float v = 1.0f + 0.1f * rng.symmetric();
            std::memcpy(out.data() + i, &v, 4);
          }
          return absl::OkStatus();
        }
        // The embedding is read as rows (not multiplied): unit spread.
        const float sigma =
            t.name == "token_embd.weight"
                ? 1.0f
                : 1.0f / std::sqrt(static_cast<float>(t.shape[0]));
        fill_matrix(t.type, sigma, rng, out);
        return absl::OkStatus();
      });
  if (!written.ok()) return written;
  return report;
}

}  // namespace strata::synth
