#include "model/published_models.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/gguf_writer.h"

namespace strata::synth {
namespace {

gguf::KeyValue kv(std::string key, gguf::Value value) {
  gguf::KeyValue k;
  k.key = std::move(key);
  k.value = std::move(value);
  return k;
}

gguf::KeyValue u32(const std::string& key, uint32_t v) {
  return kv(key, gguf::value_u32(v));
}
gguf::KeyValue f32(const std::string& key, float v) {
  return kv(key, gguf::value_f32(v));
}
gguf::KeyValue str(const std::string& key, std::string v) {
  return kv(key, gguf::value_string(std::move(v)));
}

std::string blk(int i, const char* suffix) {
  return absl::StrCat("blk.", i, ".", suffix);
}

// The keys llama.cpp's converter writes that placement and the
// architecture reader use.
struct Dims {
  std::string arch;
  std::string name;
  uint32_t n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, vocab;
  float rope_base;
  float rms_eps;
};

std::vector<gguf::KeyValue> common_keys(const Dims& d) {
  const std::string a = d.arch;
  return {str("general.architecture", a),
          str("general.name", d.name),
          u32(a + ".block_count", d.n_layer),
          u32(a + ".context_length", d.n_ctx),
          u32(a + ".embedding_length", d.n_embd),
          u32(a + ".feed_forward_length", d.n_ff),
          u32(a + ".attention.head_count", d.n_head),
          u32(a + ".attention.head_count_kv", d.n_head_kv),
          f32(a + ".rope.freq_base", d.rope_base),
          f32(a + ".attention.layer_norm_rms_epsilon", d.rms_eps),
          u32(a + ".vocab_size", d.vocab)};
}

}  // namespace

bool use_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 ||
         (layer - n_layer / 8) % 3 == 2;
}

PublishedModel llama33_70b_q4_k_m() {
  PublishedModel m;
  m.name = "llama-3.3-70b-q4_k_m";
  // config.json: hidden_size 8192, intermediate_size 28672, 80 layers, 64
  // heads, 8 KV heads, vocab 128256, max_position_embeddings 131072,
  // rope_theta 500000, rms_norm_eps 1e-5, untied embeddings; Llama 3.1+
  // GGUFs carry rope_freqs.weight (64 = head_dim / 2 factors).
  const Dims d{"llama", "Llama 3.3 70B Instruct",
               80,      131072,
               8192,    28672,
               64,      8,
               128256,  500000.0f,
               1e-5f};
  m.metadata = common_keys(d);
  m.metadata.push_back(u32("llama.rope.dimension_count", 128));
  const GgmlType q4 = GgmlType::kQ4_K, q5 = GgmlType::kQ5_K,
                 q6 = GgmlType::kQ6_K;
  m.tensors.push_back({"rope_freqs.weight", GgmlType::kF32, {64}});
  m.tensors.push_back({"token_embd.weight", q4, {8192, 128256}});
  for (int i = 0; i < 80; ++i) {
    const bool more = use_more_bits(i, 80);
    m.tensors.push_back({blk(i, "attn_norm.weight"), GgmlType::kF32, {8192}});
    m.tensors.push_back({blk(i, "attn_q.weight"), q4, {8192, 8192}});
    m.tensors.push_back({blk(i, "attn_k.weight"), q4, {8192, 1024}});
    m.tensors.push_back(
        {blk(i, "attn_v.weight"), more ? q6 : q5, {8192, 1024}});
    m.tensors.push_back({blk(i, "attn_output.weight"), q4, {8192, 8192}});
    m.tensors.push_back({blk(i, "ffn_norm.weight"), GgmlType::kF32, {8192}});
    m.tensors.push_back({blk(i, "ffn_gate.weight"), q4, {8192, 28672}});
    m.tensors.push_back({blk(i, "ffn_up.weight"), q4, {8192, 28672}});
    m.tensors.push_back(
        {blk(i, "ffn_down.weight"), more ? q6 : q4, {28672, 8192}});
  }
  m.tensors.push_back({"output_norm.weight", GgmlType::kF32, {8192}});
  m.tensors.push_back({"output.weight", q6, {8192, 128256}});
  return m;
}

PublishedModel qwen25_72b_q4_k_m() {
  PublishedModel m;
  m.name = "qwen2.5-72b-q4_k_m";
  // config.json: hidden_size 8192, intermediate_size 29568, 80 layers, 64
  // heads, 8 KV heads, vocab 152064, max_position_embeddings 32768,
  // rope_theta 1e6, rms_norm_eps 1e-6, q/k/v biases, untied embeddings.
  const Dims d{"qwen2", "Qwen2.5 72B Instruct",
               80,      32768,
               8192,    29568,
               64,      8,
               152064,  1e6f,
               1e-6f};
  m.metadata = common_keys(d);
  const GgmlType q4 = GgmlType::kQ4_K, q5 = GgmlType::kQ5_K,
                 q6 = GgmlType::kQ6_K;
  m.tensors.push_back({"token_embd.weight", q4, {8192, 152064}});
  for (int i = 0; i < 80; ++i) {
    const bool more = use_more_bits(i, 80);
    m.tensors.push_back({blk(i, "attn_norm.weight"), GgmlType::kF32, {8192}});
    m.tensors.push_back({blk(i, "attn_q.weight"), q4, {8192, 8192}});
    m.tensors.push_back({blk(i, "attn_q.bias"), GgmlType::kF32, {8192}});
    m.tensors.push_back({blk(i, "attn_k.weight"), q4, {8192, 1024}});
    m.tensors.push_back({blk(i, "attn_k.bias"), GgmlType::kF32, {1024}});
    m.tensors.push_back(
        {blk(i, "attn_v.weight"), more ? q6 : q5, {8192, 1024}});
    m.tensors.push_back({blk(i, "attn_v.bias"), GgmlType::kF32, {1024}});
    m.tensors.push_back({blk(i, "attn_output.weight"), q4, {8192, 8192}});
    m.tensors.push_back({blk(i, "ffn_norm.weight"), GgmlType::kF32, {8192}});
    m.tensors.push_back({blk(i, "ffn_gate.weight"), q4, {8192, 29568}});
    m.tensors.push_back({blk(i, "ffn_up.weight"), q4, {8192, 29568}});
    // 29568 is not a multiple of 256: Q6_K falls back to Q8_0, Q4_K to Q5_0.
    m.tensors.push_back({blk(i, "ffn_down.weight"),
                         more ? GgmlType::kQ8_0 : GgmlType::kQ5_0,
                         {29568, 8192}});
  }
  m.tensors.push_back({"output_norm.weight", GgmlType::kF32, {8192}});
  m.tensors.push_back({"output.weight", q6, {8192, 152064}});
  return m;
}

PublishedModel mixtral_8x22b_q4_k_m() {
  PublishedModel m;
  m.name = "mixtral-8x22b-q4_k_m";
  // config.json: hidden_size 6144, intermediate_size 16384, 56 layers, 48
  // heads, 8 KV heads (head_dim 128), vocab 32768, max_position_embeddings
  // 65536, rope_theta 1e6, rms_norm_eps 1e-5, num_local_experts 8,
  // num_experts_per_tok 2. llama.cpp converts it as `llama` with experts.
  const Dims d{"llama", "Mixtral 8x22B Instruct v0.1",
               56,      65536,
               6144,    16384,
               48,      8,
               32768,   1e6f,
               1e-5f};
  m.metadata = common_keys(d);
  m.metadata.push_back(u32("llama.rope.dimension_count", 128));
  m.metadata.push_back(u32("llama.expert_count", 8));
  m.metadata.push_back(u32("llama.expert_used_count", 2));
  const GgmlType q4 = GgmlType::kQ4_K, q6 = GgmlType::kQ6_K,
                 q8 = GgmlType::kQ8_0;
  m.tensors.push_back({"token_embd.weight", q4, {6144, 32768}});
  for (int i = 0; i < 56; ++i) {
    const bool more = use_more_bits(i, 56);
    m.tensors.push_back({blk(i, "attn_norm.weight"), GgmlType::kF32, {6144}});
    m.tensors.push_back({blk(i, "attn_q.weight"), q4, {6144, 6144}});
    m.tensors.push_back({blk(i, "attn_k.weight"), q8, {6144, 1024}});
    m.tensors.push_back({blk(i, "attn_v.weight"), q8, {6144, 1024}});
    m.tensors.push_back(
        {blk(i, "attn_output.weight"), GgmlType::kQ5_K, {6144, 6144}});
    m.tensors.push_back({blk(i, "ffn_norm.weight"), GgmlType::kF32, {6144}});
    m.tensors.push_back(
        {blk(i, "ffn_gate_inp.weight"), GgmlType::kF32, {6144, 8}});
    m.tensors.push_back({blk(i, "ffn_gate_exps.weight"), q4, {6144, 16384, 8}});
    m.tensors.push_back({blk(i, "ffn_up_exps.weight"), q4, {6144, 16384, 8}});
    m.tensors.push_back(
        {blk(i, "ffn_down_exps.weight"), more ? q6 : q4, {16384, 6144, 8}});
  }
  m.tensors.push_back({"output_norm.weight", GgmlType::kF32, {6144}});
  m.tensors.push_back({"output.weight", q6, {6144, 32768}});
  return m;
}

PublishedModel gpt_oss_120b_mxfp4() {
  PublishedModel m;
  m.name = "gpt-oss-120b-mxfp4";
  // config.json: hidden_size 2880, intermediate_size 2880 (per expert), 36
  // layers, 64 heads of head_dim 64, 8 KV heads, vocab 201088,
  // max_position_embeddings 131072, rope_theta 150000 with YaRN (factor
  // 32, original 4096), sliding_window 128, num_local_experts 128,
  // num_experts_per_tok 4, rms_norm_eps 1e-5; attention q/k/v/o biases,
  // per-head sinks, expert biases.
  const Dims d{"gpt-oss", "gpt-oss 120b", 36,        131072, 2880, 2880, 64,
               8,         201088,         150000.0f, 1e-5f};
  m.metadata = common_keys(d);
  for (const gguf::KeyValue& k :
       {u32("gpt-oss.attention.key_length", 64),
        u32("gpt-oss.attention.value_length", 64),
        u32("gpt-oss.attention.sliding_window", 128),
        u32("gpt-oss.expert_count", 128), u32("gpt-oss.expert_used_count", 4),
        u32("gpt-oss.expert_feed_forward_length", 2880),
        str("gpt-oss.rope.scaling.type", "yarn"),
        f32("gpt-oss.rope.scaling.factor", 32.0f),
        u32("gpt-oss.rope.scaling.original_context_length", 4096)}) {
    m.metadata.push_back(k);
  }
  const GgmlType q8 = GgmlType::kQ8_0, mx = GgmlType::kMXFP4,
                 f = GgmlType::kF32;
  m.tensors.push_back({"token_embd.weight", q8, {2880, 201088}});
  for (int i = 0; i < 36; ++i) {
    m.tensors.push_back({blk(i, "attn_norm.weight"), f, {2880}});
    m.tensors.push_back({blk(i, "post_attention_norm.weight"), f, {2880}});
    m.tensors.push_back({blk(i, "attn_q.weight"), q8, {2880, 4096}});
    m.tensors.push_back({blk(i, "attn_q.bias"), f, {4096}});
    m.tensors.push_back({blk(i, "attn_k.weight"), q8, {2880, 512}});
    m.tensors.push_back({blk(i, "attn_k.bias"), f, {512}});
    m.tensors.push_back({blk(i, "attn_v.weight"), q8, {2880, 512}});
    m.tensors.push_back({blk(i, "attn_v.bias"), f, {512}});
    m.tensors.push_back({blk(i, "attn_output.weight"), q8, {4096, 2880}});
    m.tensors.push_back({blk(i, "attn_output.bias"), f, {2880}});
    m.tensors.push_back({blk(i, "attn_sinks.weight"), f, {64}});
    m.tensors.push_back({blk(i, "ffn_gate_inp.weight"), f, {2880, 128}});
    m.tensors.push_back({blk(i, "ffn_gate_inp.bias"), f, {128}});
    m.tensors.push_back(
        {blk(i, "ffn_gate_exps.weight"), mx, {2880, 2880, 128}});
    m.tensors.push_back({blk(i, "ffn_gate_exps.bias"), f, {2880, 128}});
    m.tensors.push_back({blk(i, "ffn_up_exps.weight"), mx, {2880, 2880, 128}});
    m.tensors.push_back({blk(i, "ffn_up_exps.bias"), f, {2880, 128}});
    m.tensors.push_back(
        {blk(i, "ffn_down_exps.weight"), mx, {2880, 2880, 128}});
    m.tensors.push_back({blk(i, "ffn_down_exps.bias"), f, {2880, 128}});
  }
  m.tensors.push_back({"output_norm.weight", f, {2880}});
  m.tensors.push_back({"output.weight", q8, {2880, 201088}});
  return m;
}

std::vector<std::string> published_model_names() {
  return {"llama-3.3-70b-q4_k_m", "qwen2.5-72b-q4_k_m", "mixtral-8x22b-q4_k_m",
          "gpt-oss-120b-mxfp4"};
}

absl::StatusOr<PublishedModel> published_model(std::string_view name) {
  if (name == "llama-3.3-70b-q4_k_m") return llama33_70b_q4_k_m();
  if (name == "qwen2.5-72b-q4_k_m") return qwen25_72b_q4_k_m();
  if (name == "mixtral-8x22b-q4_k_m") return mixtral_8x22b_q4_k_m();
  if (name == "gpt-oss-120b-mxfp4") return gpt_oss_120b_mxfp4();
  return absl::NotFoundError(absl::StrCat(
      "no published model '", std::string(name),
      "' (known: ", absl::StrJoin(published_model_names(), ", "), ")"));
}

absl::StatusOr<uint64_t> write_header_only(const PublishedModel& model,
                                           const std::string& path) {
  gguf::GgufWriter writer;
  for (const gguf::KeyValue& k : model.metadata) {
    if (absl::Status s = writer.set_metadata(k.key, k.value); !s.ok()) return s;
  }
  for (const TensorSpec& t : model.tensors) {
    if (absl::Status s = writer.add_tensor(t.name, t.type, t.shape); !s.ok())
      return s;
  }
  if (absl::Status s = writer.write_sparse(path); !s.ok()) return s;
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : writer.tensors()) bytes += t.n_bytes;
  return bytes;
}

}  // namespace strata::synth
