#include "tests/model/big_shapes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/gguf_writer.h"
#include "tests/model/gguf_builder.h"

namespace strata::testing {
namespace {

using gguf::ValueType;
using gguf::testing::GgufBuilder;

constexpr uint64_t kAlignment = 32;

uint64_t tensor_bytes(const SparseTensor& t) {
  uint64_t rows = 1;
  for (size_t d = 1; d < t.shape.size(); ++d)
    rows *= static_cast<uint64_t>(t.shape[d]);
  return static_cast<uint64_t>(*ggml_row_bytes(t.type, t.shape[0])) * rows;
}

void put_value(GgufBuilder& b, const gguf::Value& v) {
  switch (v.type) {
    case ValueType::kUint16:
      b.u16(std::get<uint16_t>(v.data));
      break;
    case ValueType::kUint32:
      b.u32(std::get<uint32_t>(v.data));
      break;
    case ValueType::kInt32:
      b.i32(std::get<int32_t>(v.data));
      break;
    case ValueType::kFloat32:
      b.f32(std::get<float>(v.data));
      break;
    case ValueType::kString:
      b.str(std::get<std::string>(v.data));
      break;
    default:
      b.u64(std::get<uint64_t>(v.data));
      break;  // kUint64 only
  }
}

// Writes the header, metadata and tensor infos of `tensors`, then extends
// the file to the end of the last tensor's data.
absl::Status write_part(const std::string& path,
                        const std::vector<gguf::KeyValue>& kv,
                        const std::vector<SparseTensor>& tensors) {
  GgufBuilder b;
  b.header(tensors.size(), kv.size());
  for (const gguf::KeyValue& k : kv) {
    b.key(k.key, k.value.type);
    put_value(b, k.value);
  }
  uint64_t offset = 0;
  for (const SparseTensor& t : tensors) {
    b.str(t.name).u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t extent : t.shape) b.u64(static_cast<uint64_t>(extent));
    b.u32(static_cast<uint32_t>(t.type)).u64(offset);
    offset += (tensor_bytes(t) + kAlignment - 1) / kAlignment * kAlignment;
  }
  b.pad(kAlignment);
  const uint64_t size = b.pos() + offset;
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": cannot create"));
  const auto& bytes = b.bytes();
  const bool ok = ::write(fd, bytes.data(), bytes.size()) ==
                      static_cast<ssize_t>(bytes.size()) &&
                  ::ftruncate(fd, static_cast<off_t>(size)) == 0;
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

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

absl::Status write_sparse_gguf(const std::string& path,
                               const SparseModel& model) {
  return write_part(path, model.metadata, model.tensors);
}

absl::StatusOr<std::string> write_sparse_split(const std::string& prefix,
                                               const SparseModel& model,
                                               int parts) {
  const size_t n = model.tensors.size();
  std::string first;
  for (int p = 0; p < parts; ++p) {
    const size_t begin = n * p / parts;
    const size_t end = n * (p + 1) / parts;
    std::vector<gguf::KeyValue> keys;
    if (p == 0) keys = model.metadata;
    keys.push_back(kv("split.no", gguf::value_u16(static_cast<uint16_t>(p))));
    keys.push_back(
        kv("split.count", gguf::value_u16(static_cast<uint16_t>(parts))));
    keys.push_back(
        kv("split.tensors.count", gguf::value_i32(static_cast<int32_t>(n))));
    const std::string path =
        absl::StrFormat("%s-%05d-of-%05d.gguf", prefix, p + 1, parts);
    std::vector<SparseTensor> run(model.tensors.begin() + begin,
                                  model.tensors.begin() + end);
    if (absl::Status st = write_part(path, keys, run); !st.ok()) return st;
    if (p == 0) first = path;
  }
  return first;
}

SparseModel llama33_70b_q4_k_m() {
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
  SparseModel m;
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

SparseModel qwen25_72b_q4_k_m() {
  // config.json: hidden_size 8192, intermediate_size 29568, 80 layers, 64
  // heads, 8 KV heads, vocab 152064, max_position_embeddings 32768,
  // rope_theta 1e6, rms_norm_eps 1e-6, q/k/v biases, untied embeddings.
  const Dims d{"qwen2", "Qwen2.5 72B Instruct",
               80,      32768,
               8192,    29568,
               64,      8,
               152064,  1e6f,
               1e-6f};
  SparseModel m;
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

SparseModel mixtral_8x22b_q4_k_m() {
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
  SparseModel m;
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

SparseModel gpt_oss_120b_mxfp4() {
  // config.json: hidden_size 2880, intermediate_size 2880 (per expert), 36
  // layers, 64 heads of head_dim 64, 8 KV heads, vocab 201088,
  // max_position_embeddings 131072, rope_theta 150000 with YaRN (factor
  // 32, original 4096), sliding_window 128, num_local_experts 128,
  // num_experts_per_tok 4, rms_norm_eps 1e-5; attention q/k/v/o biases,
  // per-head sinks, expert biases.
  const Dims d{"gpt-oss", "gpt-oss 120b", 36,        131072, 2880, 2880, 64,
               8,         201088,         150000.0f, 1e-5f};
  SparseModel m;
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

}  // namespace strata::testing
