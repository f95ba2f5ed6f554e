// Mixture-of-experts weights at load: a one-block qwen3moe GGUF written
// here (F32, 4 experts of 2) loads and runs, and a 3-D expert tensor of the
// wrong shape or a missing router is refused naming the tensor.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/model/gguf_builder.h"

namespace strata::engine_test {
namespace {

using gguf::testing::GgufBuilder;

constexpr uint64_t kEmbd = 32;
constexpr uint64_t kVocab = 8;
constexpr uint64_t kExperts = 4;
constexpr uint64_t kExpertFf = 32;

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
};

std::vector<TensorSpec> qwen3moe_tensors(uint64_t up_rows) {
  return {{"token_embd.weight", {kEmbd, kVocab}},
          {"output_norm.weight", {kEmbd}},
          {"blk.0.attn_norm.weight", {kEmbd}},
          {"blk.0.attn_q.weight", {kEmbd, kEmbd}},
          {"blk.0.attn_k.weight", {kEmbd, kEmbd}},
          {"blk.0.attn_v.weight", {kEmbd, kEmbd}},
          {"blk.0.attn_output.weight", {kEmbd, kEmbd}},
          {"blk.0.attn_q_norm.weight", {kEmbd}},
          {"blk.0.attn_k_norm.weight", {kEmbd}},
          {"blk.0.ffn_norm.weight", {kEmbd}},
          {"blk.0.ffn_gate_inp.weight", {kEmbd, kExperts}},
          {"blk.0.ffn_gate_exps.weight", {kEmbd, kExpertFf, kExperts}},
          {"blk.0.ffn_up_exps.weight", {kEmbd, up_rows, kExperts}},
          {"blk.0.ffn_down_exps.weight", {kExpertFf, kEmbd, kExperts}}};
}

// Writes a qwen3moe GGUF of `tensors` (F32, values 0.01 * (i mod 7)) to
// `path`.
void write_model(const std::string& path, const std::vector<TensorSpec>& tensors) {
  GgufBuilder b;
  b.header(tensors.size(), 11);
  b.kv_string("general.architecture", "qwen3moe");
  b.kv_u32("qwen3moe.block_count", 1);
  b.kv_u32("qwen3moe.embedding_length", kEmbd);
  b.kv_u32("qwen3moe.feed_forward_length", 64);
  b.kv_u32("qwen3moe.attention.head_count", 1);
  b.kv_u32("qwen3moe.attention.key_length", kEmbd);
  b.kv_u32("qwen3moe.vocab_size", kVocab);
  b.key("qwen3moe.attention.layer_norm_rms_epsilon", gguf::ValueType::kFloat32).f32(1e-6f);
  b.kv_u32("qwen3moe.expert_count", kExperts);
  b.kv_u32("qwen3moe.expert_used_count", 2);
  b.kv_u32("qwen3moe.expert_feed_forward_length", kExpertFf);
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const TensorSpec& t : tensors) {
    uint64_t n = 1;
    for (uint64_t e : t.ne) n *= e;
    b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t e : t.ne) b.u64(e);
    b.u32(static_cast<uint32_t>(GgmlType::kF32)).u64(offset);
    sizes.push_back(n);
    offset += (n * 4 + 31) / 32 * 32;
  }
  b.pad(32);
  for (uint64_t n : sizes) {
    for (uint64_t i = 0; i < n; ++i) b.f32(0.01f * static_cast<float>(i % 7));
    b.pad(32);
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.bytes().data()),
            static_cast<std::streamsize>(b.bytes().size()));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

TEST(MoeWeights, ExpertTensorsLoadAndRun) {
  const std::string path = temp_path("moe-ok");
  write_model(path, qwen3moe_tensors(kExpertFf));
  auto l = load(path, 16, 1);
  std::filesystem::remove(path);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->hp.moe.n_expert, 4);
  worker::Backend& b = *l->backend;
  ASSERT_TRUE(b.add_sequence(1, 16).ok());
  const std::vector<worker::ForwardSlice> slices = {{1, 3, worker::Logits::kLast}};
  const std::vector<int32_t> tokens = {1, 5, 7};
  worker::ForwardRequest req;
  req.slices = slices;
  req.tokens = tokens;
  worker::ForwardResult result;
  ASSERT_TRUE(b.forward(req, &result).ok());
  EXPECT_EQ(result.logits.size(), kVocab);
}

TEST(MoeWeights, WrongExpertShapeIsNamed) {
  const std::string path = temp_path("moe-bad-shape");
  write_model(path, qwen3moe_tensors(16));
  auto l = load(path, 16, 1);
  std::filesystem::remove(path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(
                "blk.0.ffn_up_exps.weight: shape [32, 16, 4], expected [32, 32, 4]"),
            std::string::npos)
      << l.status();
}

TEST(MoeWeights, MissingRouterIsNamed) {
  std::vector<TensorSpec> tensors = qwen3moe_tensors(kExpertFf);
  std::erase_if(tensors, [](const TensorSpec& t) { return t.name == "blk.0.ffn_gate_inp.weight"; });
  const std::string path = temp_path("moe-no-router");
  write_model(path, tensors);
  auto l = load(path, 16, 1);
  std::filesystem::remove(path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("blk.0.ffn_gate_inp.weight: missing"), std::string::npos)
      << l.status();
}

}  // namespace
}  // namespace strata::engine_test
