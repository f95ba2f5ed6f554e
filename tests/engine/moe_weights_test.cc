// Mixture-of-experts weights at load: a one-block qwen3moe GGUF written
// here (F32, 4 experts of 2) loads and runs, and a 3-D expert tensor of the
// wrong shape or a missing router is refused naming the tensor; the tiny
// MoE models give the same bits when the step runs its experts over
// blocks of rows (CpuBackendOptions::moe_max_slots).
#include <cstdio>
#include <cstring>
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


// Every row's logits of a 40-token prompt, with the experts of the step run
// over all 40 rows at once (the default) or over blocks of 1 and 3 rows:
// bit for bit the same (a row's arithmetic does not depend on the rows
// that share its expert matmuls).
std::vector<float> all_logits(const std::string& path, int max_slots) {
  auto model = gguf::GgufModel::open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  std::shared_ptr<const gguf::GgufModel> shared(std::move(*model));
  auto hp = arch::read_hyperparameters(shared->first());
  EXPECT_TRUE(hp.ok()) << hp.status();
  if (!hp.ok()) return {};
  worker::CpuBackendOptions options;
  options.n_threads = 2;
  options.max_batch = 64;
  options.moe_max_slots = max_slots;
  auto backend = worker::make_cpu_backend(shared, *hp, {0, hp->n_layer}, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  EXPECT_TRUE((*backend)->add_sequence(1, 64).ok());
  std::vector<int32_t> tokens(40);
  for (int i = 0; i < 40; ++i) tokens[i] = (i * 37 + 11) % 400;
  const std::vector<worker::ForwardSlice> slices = {{1, 40, worker::Logits::kAll}};
  worker::ForwardRequest req;
  req.slices = slices;
  req.tokens = tokens;
  worker::ForwardResult result;
  absl::Status st = (*backend)->forward(req, &result);
  EXPECT_TRUE(st.ok()) << st;
  return std::vector<float>(result.logits.begin(), result.logits.end());
}

TEST(MoeWeights, BlocksOfRowsGiveTheSameBits) {
  for (const char* family : {"qwen3moe", "qwen2moe", "gpt-oss"}) {
    const std::string path = real_model(std::string("tiny/tiny-") + family + ".gguf");
    if (!exists(path)) GTEST_SKIP() << path << " is absent (scripts/make-test-models.sh)";
    // k = 2 slots a row: all 40 rows at once, then 1 and 3 rows a block.
    const std::vector<float> whole = all_logits(path, 8192);
    ASSERT_FALSE(whole.empty());
    for (int slots : {2, 6}) {
      const std::vector<float> blocked = all_logits(path, slots);
      ASSERT_EQ(blocked.size(), whole.size()) << family;
      EXPECT_EQ(std::memcmp(blocked.data(), whole.data(), whole.size() * sizeof(float)), 0)
          << family << ": " << slots << " slots a block";
    }
  }
}

}  // namespace
}  // namespace strata::engine_test
