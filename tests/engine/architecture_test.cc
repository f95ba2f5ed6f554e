// Hyperparameters from GGUF metadata: errors name the key or the
// architecture; the families' hard-coded facts are applied.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "tests/model/gguf_builder.h"

namespace strata::arch {
namespace {

using gguf::testing::GgufBuilder;

struct Kv {
  std::string key;
  enum { kU32, kF32, kStr, kBools } kind;  // kBools: str of '0'/'1', one per item
  double num = 0;
  std::string str;
};

absl::StatusOr<Hyperparameters> read(const std::vector<Kv>& kvs,
                                     std::vector<uint8_t>* storage) {
  GgufBuilder b;
  b.header(0, kvs.size());
  for (const Kv& kv : kvs) {
    if (kv.kind == Kv::kU32) b.kv_u32(kv.key, static_cast<uint32_t>(kv.num));
    if (kv.kind == Kv::kF32) b.key(kv.key, gguf::ValueType::kFloat32).f32(static_cast<float>(kv.num));
    if (kv.kind == Kv::kStr) b.kv_string(kv.key, kv.str);
    if (kv.kind == Kv::kBools) {
      b.kv_array(kv.key, gguf::ValueType::kBool, kv.str.size());
      for (char c : kv.str) b.u8(c == '1' ? 1 : 0);
    }
  }
  b.pad(32);
  *storage = b.bytes();
  auto file = gguf::GgufFile::parse(storage->data(), storage->size());
  if (!file.ok()) return file.status();
  return read_hyperparameters(**file);
}

std::vector<Kv> minimal(const std::string& arch) {
  return {{"general.architecture", Kv::kStr, 0, arch},
          {arch + ".block_count", Kv::kU32, 12, ""},
          {arch + ".embedding_length", Kv::kU32, 640, ""},
          {arch + ".feed_forward_length", Kv::kU32, 2048, ""},
          {arch + ".attention.head_count", Kv::kU32, 4, ""},
          {arch + ".attention.head_count_kv", Kv::kU32, 1, ""},
          {arch + ".attention.key_length", Kv::kU32, 256, ""},
          {arch + ".attention.value_length", Kv::kU32, 256, ""},
          {arch + ".attention.sliding_window", Kv::kU32, 512, ""},
          {arch + ".rope.freq_base", Kv::kF32, 1e6, ""},
          {arch + ".attention.layer_norm_rms_epsilon", Kv::kF32, 1e-6, ""}};
}

TEST(Architecture, UnknownArchitectureIsNamed) {
  std::vector<uint8_t> s;
  auto hp = read(minimal("mamba9"), &s);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("unknown architecture 'mamba9'"), std::string::npos)
      << hp.status();
  EXPECT_NE(hp.status().message().find("llama"), std::string::npos);
}

TEST(Architecture, MissingKeyIsNamed) {
  std::vector<Kv> kvs = minimal("llama");
  kvs.erase(kvs.begin() + 4);  // head_count
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("llama.attention.head_count: missing"), std::string::npos)
      << hp.status();
}

TEST(Architecture, OutOfRangeValueIsNamed) {
  std::vector<Kv> kvs = minimal("llama");
  kvs[5].num = 3;  // head_count_kv 3 does not divide head_count 4
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find("head_count_kv"), std::string::npos) << hp.status();
}

// Without key_length / value_length the head size is n_embd / n_head, so a
// head count that does not divide the width is refused naming both keys;
// with them given (as Gemma's files do), the width need not divide.
TEST(Architecture, HeadCountMustDivideTheWidthUnlessHeadSizesAreGiven) {
  std::vector<Kv> kvs = minimal("llama");
  kvs[2].num = 7;   // embedding_length
  kvs[4].num = 9;   // head_count
  kvs[5].num = 9;   // head_count_kv
  std::vector<uint8_t> s;
  auto given = read(kvs, &s);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->head_dim_k, 256);
  kvs.erase(kvs.begin() + 6, kvs.begin() + 8);  // key_length, value_length
  auto hp = read(kvs, &s);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.status().message().find(
                "llama.embedding_length = 7 is not a multiple of llama.attention.head_count = 9"),
            std::string::npos)
      << hp.status();
}

TEST(Architecture, Gemma3LayersAndRope) {
  std::vector<uint8_t> s;
  auto hp = read(minimal("gemma3"), &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->family, Family::kGemma3);
  EXPECT_EQ(hp->sliding_window, 512);
  for (int il = 0; il < hp->n_layer; ++il) {
    const bool global = il % 6 == 5;
    EXPECT_EQ(hp->sliding[il], !global) << il;
    EXPECT_EQ(hp->rope[il].freq_base, global ? 1e6f : 10000.0f) << il;
  }
  EXPECT_TRUE(hp->recipe.qk_norm && hp->recipe.post_attn_norm && hp->recipe.post_ffn_norm);
  EXPECT_EQ(hp->recipe.activation, FfnActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(hp->recipe.embedding_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(hp->attention_scale, 1.0f / 16.0f);
  EXPECT_EQ(hp->n_rot, 256);
}

TEST(Architecture, Gemma2SoftCapsDefaultAndEvenLayersSlide) {
  std::vector<uint8_t> s;
  auto hp = read(minimal("gemma2"), &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->attn_softcap, 50.0f);
  EXPECT_EQ(hp->final_softcap, 30.0f);
  EXPECT_TRUE(hp->sliding[0]);
  EXPECT_FALSE(hp->sliding[1]);
}

TEST(Architecture, LinearRopeScaling) {
  std::vector<Kv> kvs = minimal("llama");
  kvs.push_back({"llama.rope.scaling.type", Kv::kStr, 0, "linear"});
  kvs.push_back({"llama.rope.scaling.factor", Kv::kF32, 4.0, ""});
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_FLOAT_EQ(hp->rope[0].freq_scale, 0.25f);
  kvs.pop_back();
  kvs.back() = {"llama.rope.scaling.type", Kv::kStr, 0, "longrope"};
  auto bad = read(kvs, &s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rope.scaling.type"), std::string::npos);
}

// A rope.scaling.type of another type than STRING is refused naming the
// key, not read as absent (which would apply the factor as linear scaling).
TEST(Architecture, RopeScalingTypeOfTheWrongTypeIsRefused) {
  std::vector<Kv> kvs = minimal("llama");
  kvs.push_back({"llama.rope.scaling.type", Kv::kU32, 3, ""});
  kvs.push_back({"llama.rope.scaling.factor", Kv::kF32, 4.0, ""});
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_FALSE(hp.ok()) << "freq_scale " << hp->rope[0].freq_scale;
  EXPECT_NE(hp.status().message().find("llama.rope.scaling.type"),
            std::string::npos)
      << hp.status();
}

// The factor q and k are rotated with: llama.cpp's YaRN attention factor
// (mscale(s) / (1 + 0.1 ln s), mscale(s) = 0.1 ln s + 1) times
// rope.scaling.attn_factor; the latter alone without YaRN.
TEST(Architecture, RopeAttentionFactor) {
  std::vector<uint8_t> s;
  std::vector<Kv> kvs = minimal("llama");
  auto plain = read(kvs, &s);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->yarn_attn_factor, 1.0f);

  kvs.push_back({"llama.rope.scaling.type", Kv::kStr, 0, "linear"});
  kvs.push_back({"llama.rope.scaling.factor", Kv::kF32, 4.0, ""});
  kvs.push_back({"llama.rope.scaling.attn_factor", Kv::kF32, 0.5, ""});
  auto linear = read(kvs, &s);
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->yarn_attn_factor, 0.5f);
  EXPECT_EQ(linear->yarn_ext_factor, 0.0f);

  kvs[kvs.size() - 3] = {"llama.rope.scaling.type", Kv::kStr, 0, "yarn"};
  kvs[kvs.size() - 2] = {"llama.rope.scaling.factor", Kv::kF32, 40.0, ""};
  auto yarn = read(kvs, &s);
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  const double ln40 = std::log(40.0);
  EXPECT_NEAR(yarn->yarn_attn_factor, 0.5 * (0.1 * ln40 + 1) / (1 + 0.1 * ln40), 1e-6);
  EXPECT_EQ(yarn->yarn_ext_factor, 1.0f);

  kvs.back() = {"llama.rope.scaling.attn_factor", Kv::kF32, -1.0, ""};
  auto bad = read(kvs, &s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama.rope.scaling.attn_factor"), std::string::npos)
      << bad.status();
}

// gpt-oss's keys: minimal() and its experts (expert_feed_forward_length is
// required, as llama.cpp's openai-moe loader requires it).
std::vector<Kv> gpt_oss() {
  std::vector<Kv> kvs = minimal("gpt-oss");
  kvs.push_back({"gpt-oss.expert_count", Kv::kU32, 32, ""});
  kvs.push_back({"gpt-oss.expert_used_count", Kv::kU32, 4, ""});
  kvs.push_back({"gpt-oss.expert_feed_forward_length", Kv::kU32, 2880, ""});
  return kvs;
}

// gpt-oss (llama.cpp's openai-moe): even layers slide, odd ones are
// global; the sliding layers take rope.freq_base_swa when given; biases,
// sinks, the FFN norm's name, NeoX RoPE and the clamped SwiGLU; routing by
// softmax over the top-k logits, not renormalised.
TEST(Architecture, GptOssLayersAndRecipe) {
  std::vector<Kv> kvs = gpt_oss();
  kvs.push_back({"gpt-oss.rope.freq_base_swa", Kv::kF32, 5e4, ""});
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->family, Family::kGptOss);
  EXPECT_EQ(hp->sliding_window, 512);
  for (int il = 0; il < hp->n_layer; ++il) {
    EXPECT_EQ(hp->sliding[il], il % 2 == 0) << il;
    EXPECT_EQ(hp->rope[il].freq_base, il % 2 == 0 ? 5e4f : 1e6f) << il;
  }
  const BlockRecipe& r = hp->recipe;
  EXPECT_TRUE(r.qkv_bias && r.attn_out_bias && r.attn_sinks && r.expert_bias);
  EXPECT_FALSE(r.post_attn_norm || r.post_ffn_norm || r.qk_norm || r.scale_query);
  EXPECT_EQ(r.ffn_norm, "post_attention_norm.weight");
  EXPECT_EQ(r.activation, FfnActivation::kSwigluOai);
  EXPECT_EQ(r.rope, RopeStyle::kNeox);
  EXPECT_EQ(hp->moe.n_expert, 32);
  EXPECT_EQ(hp->moe.n_expert_used, 4);
  EXPECT_EQ(hp->moe.n_ff_expert, 2880);
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSoftmaxWeight);
  EXPECT_FALSE(hp->moe.norm_weights);
  EXPECT_EQ(hp->moe.weights_scale, 1.0f);

  // The window is required; the pattern may be a period or per-layer flags.
  std::vector<Kv> no_window = gpt_oss();
  no_window.erase(no_window.begin() + 8);
  auto missing = read(no_window, &s);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gpt-oss.attention.sliding_window: missing"),
            std::string::npos)
      << missing.status();
  kvs = gpt_oss();
  kvs.push_back({"gpt-oss.attention.sliding_window_pattern", Kv::kU32, 3, ""});
  auto period = read(kvs, &s);
  ASSERT_TRUE(period.ok()) << period.status();
  for (int il = 0; il < period->n_layer; ++il) EXPECT_EQ(period->sliding[il], il % 3 != 2) << il;
  kvs.back() = {"gpt-oss.attention.sliding_window_pattern", Kv::kBools, 0, "110000000001"};
  auto flags = read(kvs, &s);
  ASSERT_TRUE(flags.ok()) << flags.status();
  for (int il = 0; il < flags->n_layer; ++il) {
    EXPECT_EQ(flags->sliding[il], il < 2 || il == 11) << il;
  }
  kvs.back().str = "1100";  // 4 flags for 12 layers
  auto short_flags = read(kvs, &s);
  ASSERT_FALSE(short_flags.ok());
  EXPECT_NE(short_flags.status().message().find(
                "gpt-oss.attention.sliding_window_pattern: 4 flags for 12 layers"),
            std::string::npos)
      << short_flags.status();
  // Without expert_feed_forward_length: refused naming it.
  kvs = gpt_oss();
  kvs.pop_back();
  auto no_ff = read(kvs, &s);
  ASSERT_FALSE(no_ff.ok());
  EXPECT_NE(no_ff.status().message().find("gpt-oss.expert_feed_forward_length: missing"),
            std::string::npos)
      << no_ff.status();
}

TEST(Architecture, BlockIndexInvertsLayerTensor) {
  EXPECT_EQ(block_index(layer_tensor(12, "attn_q.weight")), 12);
  EXPECT_EQ(block_index("blk.0.ffn_up.weight"), 0);
  for (const char* name : {"output.weight", "blk.12", "blk..attn_q.weight", "blk.-1.x",
                           "blk.+1.x", "blk.1a.x", "blk.99999999999999999999.x", "xblk.1.x"}) {
    EXPECT_EQ(block_index(name), -1) << name;
  }
}

// Every block tensor must lie below the block count; the first one past it
// is named. Other tensors, and names that only look like blocks, pass.
TEST(Architecture, BlockTensorsPastTheCountAreNamed) {
  std::vector<gguf::TensorInfo> tensors(5);
  tensors[0].name = "token_embd.weight";
  tensors[1].name = "blk.0.attn_q.weight";
  tensors[2].name = "blk.1.ffn_up.weight";
  tensors[3].name = "blk.x.weight";
  tensors[4].name = "output.weight";
  EXPECT_TRUE(check_block_tensors(tensors, 2).ok());
  const absl::Status st = check_block_tensors(tensors, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "blk.1.ffn_up.weight: block 1 but the metadata says 1 blocks");
}


// Mixture-of-experts keys: each family's hard-coded routing, its defaults
// (llama.cpp's load_hparams), and errors that name the key.
TEST(Architecture, MixtralIsLlamaWithExperts) {
  std::vector<Kv> kvs = minimal("llama");
  std::vector<uint8_t> s;
  auto dense = read(kvs, &s);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->moe.n_expert, 0);
  kvs.push_back({"llama.expert_count", Kv::kU32, 8, ""});
  kvs.push_back({"llama.expert_used_count", Kv::kU32, 2, ""});
  auto hp = read(kvs, &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->family, Family::kLlama);
  EXPECT_EQ(hp->moe.n_expert, 8);
  EXPECT_EQ(hp->moe.n_expert_used, 2);
  EXPECT_EQ(hp->moe.n_ff_expert, 2048);  // feed_forward_length
  EXPECT_EQ(hp->moe.n_ff_shared, 0);
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSoftmax);
  EXPECT_TRUE(hp->moe.norm_weights);
  EXPECT_EQ(hp->moe.weights_scale, 1.0f);
}

TEST(Architecture, MoeFamiliesRouteAsLlamaCppHardCodes) {
  struct Want {
    const char* arch;
    Family family;
    bool norm;
    int n_ff_expert;  // feed_forward_length 2048 / 2 used, or 2048
    int n_ff_shared;
  };
  for (const Want& w : {Want{"qwen2moe", Family::kQwen2Moe, false, 1024, 2048},
                        Want{"qwen3moe", Family::kQwen3Moe, true, 1024, 0},
                        Want{"olmoe", Family::kOlmoe, false, 2048, 0}}) {
    std::vector<Kv> kvs = minimal(w.arch);
    kvs.push_back({std::string(w.arch) + ".expert_count", Kv::kU32, 8, ""});
    kvs.push_back({std::string(w.arch) + ".expert_used_count", Kv::kU32, 2, ""});
    std::vector<uint8_t> s;
    auto hp = read(kvs, &s);
    ASSERT_TRUE(hp.ok()) << w.arch << ": " << hp.status();
    EXPECT_EQ(hp->family, w.family) << w.arch;
    EXPECT_EQ(hp->moe.norm_weights, w.norm) << w.arch;
    EXPECT_EQ(hp->moe.n_ff_expert, w.n_ff_expert) << w.arch;
    EXPECT_EQ(hp->moe.n_ff_shared, w.n_ff_shared) << w.arch;
    EXPECT_EQ(hp->recipe.rope, RopeStyle::kNeox) << w.arch;
  }
  std::vector<Kv> kvs = minimal("qwen2moe");
  kvs.push_back({"qwen2moe.expert_count", Kv::kU32, 60, ""});
  kvs.push_back({"qwen2moe.expert_used_count", Kv::kU32, 4, ""});
  kvs.push_back({"qwen2moe.expert_feed_forward_length", Kv::kU32, 1408, ""});
  kvs.push_back({"qwen2moe.expert_shared_feed_forward_length", Kv::kU32, 5632, ""});
  std::vector<uint8_t> s;
  auto hp = read(kvs, &s);
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->moe.n_ff_expert, 1408);
  EXPECT_EQ(hp->moe.n_ff_shared, 5632);
  EXPECT_TRUE(hp->recipe.qkv_bias);
  auto olmoe = read(minimal("olmoe"), &s);
  ASSERT_FALSE(olmoe.ok());
  EXPECT_NE(olmoe.status().message().find("olmoe.expert_count: missing"), std::string::npos)
      << olmoe.status();
}

TEST(Architecture, BadExpertCountsAreNamed) {
  auto with = [](uint32_t count, uint32_t used) {
    std::vector<Kv> kvs = minimal("qwen3moe");
    kvs.push_back({"qwen3moe.expert_count", Kv::kU32, static_cast<double>(count), ""});
    kvs.push_back({"qwen3moe.expert_used_count", Kv::kU32, static_cast<double>(used), ""});
    return kvs;
  };
  std::vector<uint8_t> s;
  auto more = read(with(4, 6), &s);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find(
                "qwen3moe.expert_used_count: 6 is more than qwen3moe.expert_count = 4"),
            std::string::npos)
      << more.status();
  auto none = read(with(4, 0), &s);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("qwen3moe.expert_used_count: 0"), std::string::npos)
      << none.status();
  auto huge = read(with(100000, 2), &s);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("qwen3moe.expert_count: 100000 is out of range"),
            std::string::npos)
      << huge.status();
  std::vector<Kv> kvs = minimal("llama");
  kvs.push_back({"llama.expert_used_count", Kv::kU32, 2, ""});
  auto orphan = read(kvs, &s);
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("llama.expert_count is missing"), std::string::npos)
      << orphan.status();
  kvs.push_back({"llama.expert_count", Kv::kU32, 0, ""});
  auto zero = read(kvs, &s);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find(
                "llama.expert_used_count: 2 but llama.expert_count is 0"),
            std::string::npos)
      << zero.status();
  kvs = minimal("gemma2");
  kvs.push_back({"gemma2.expert_count", Kv::kU32, 0, ""});
  auto zero_dense = read(kvs, &s);  // a converter's explicit 0 on a dense family
  ASSERT_TRUE(zero_dense.ok()) << zero_dense.status();
  EXPECT_EQ(zero_dense->moe.n_expert, 0);
  kvs.back().num = 8;
  auto dense_family = read(kvs, &s);
  ASSERT_FALSE(dense_family.ok());
  EXPECT_NE(dense_family.status().message().find("gemma2.expert_count"), std::string::npos)
      << dense_family.status();
}

}  // namespace
}  // namespace strata::arch
