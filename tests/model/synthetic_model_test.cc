// `strata synth`'s writer (model/synthetic_model.h): the file opens, its
// tensors have the named shape's names, shapes and types, the quantized
// blocks dequantize (by the reference dequantizer) to finite weights of
// the intended spread, and the same seed gives the same bytes.
#include "model/synthetic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/reference/dequantize.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "tests/model/gguf_test_util.h"

namespace strata::synth {
namespace {

using gguf::testing::TempDir;

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// The bytes of a tensor of the plan.
uint64_t tensor_bytes(const TensorSpec& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  const GgmlTypeInfo& info = ggml_type_info(t.type);
  return n / info.block_size * info.type_size;
}

// llama.cpp's Q4_K_M mix of `shape`.
SynthOptions q4_k_m(std::string shape) {
  SynthOptions o;
  o.shape = std::move(shape);
  o.type = GgmlType::kQ4_K;
  o.mix = SynthOptions::Mix::kQ4_K_M;
  return o;
}

// The model `o` describes, written under `dir` and opened, with its
// hyperparameters (a test failure and nullptr when any step fails).
struct Written {
  std::unique_ptr<gguf::GgufModel> model;
  arch::Hyperparameters hp;
  SynthReport report;
};
Written write_and_open(const SynthOptions& o, const TempDir& dir) {
  Written w;
  const std::string path = dir.file("m.gguf");
  absl::StatusOr<SynthReport> report = write_synthetic_model(o, path);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return w;
  w.report = *report;
  auto model = gguf::GgufModel::open(path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return w;
  auto hp = arch::read_hyperparameters((*model)->first());
  EXPECT_TRUE(hp.ok()) << hp.status();
  if (!hp.ok()) return w;
  w.hp = *hp;
  w.model = *std::move(model);
  return w;
}

// The standard deviation of tensor t's dequantized weights (all finite;
// a test failure and -1 otherwise), and their mean in *mean.
double weight_spread(const gguf::TensorInfo& t, double* mean) {
  std::vector<float> w(t.n_elements);
  const absl::Status st =
      reference::dequantize_row(t.type, t.data, static_cast<int64_t>(t.n_elements), w.data());
  EXPECT_TRUE(st.ok()) << st;
  double sum = 0, sum2 = 0;
  for (float v : w) {
    if (!std::isfinite(v)) {
      ADD_FAILURE() << t.name << ": a weight is not finite";
      return -1;
    }
    sum += v;
    sum2 += double{v} * v;
  }
  const double n = static_cast<double>(w.size());
  *mean = sum / n;
  return std::sqrt(sum2 / n - *mean * *mean);
}

class SynthTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SynthTypes, OpensWithTheShapeAndFiniteWeightsOfTheIntendedSpread) {
  TempDir dir;
  SynthOptions o;
  o.shape = "tiny-llama";
  o.type = GetParam();
  const Written w = write_and_open(o, dir);
  ASSERT_NE(w.model, nullptr);
  const Shape& shape = *find_shape("tiny-llama");
  EXPECT_EQ(w.hp.n_layer, shape.n_layer);
  EXPECT_EQ(w.hp.n_embd, shape.n_embd);
  EXPECT_EQ(w.hp.n_ff, shape.n_ff);
  EXPECT_EQ(w.hp.n_head, shape.n_head);
  EXPECT_EQ(w.hp.n_head_kv, shape.n_head_kv);
  EXPECT_EQ(w.hp.n_vocab, shape.n_vocab);  // the built-in vocabulary, padded
  ASSERT_EQ(w.model->tensors().size(), w.report.n_tensors);
  for (const gguf::TensorInfo& t : w.model->tensors()) {
    SCOPED_TRACE(t.name);
    double mean = 0;
    const double sd = weight_spread(t, &mean);
    if (t.shape.size() == 1) {  // norm weights: 1 +- 0.1
      EXPECT_NEAR(mean, 1.0, 0.05);
      continue;
    }
    EXPECT_EQ(t.type, o.type);
    const double want = t.name == "token_embd.weight"
                            ? 1.0
                            : 1.0 / std::sqrt(double(t.shape[0]));
    EXPECT_GT(sd, want / 2) << ggml_type_info(t.type).name;
    EXPECT_LT(sd, want * 2) << ggml_type_info(t.type).name;
    EXPECT_LT(std::fabs(mean), want / 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, SynthTypes,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1,
                                           GgmlType::kQ5_0, GgmlType::kQ8_0,
                                           GgmlType::kQ4_K, GgmlType::kQ5_K,
                                           GgmlType::kQ6_K),
                         [](const auto& param_info) {
                           return std::string(
                               ggml_type_info(param_info.param).name);
                         });

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir dir;
  SynthOptions o;
  o.shape = "tiny-llama";
  o.type = GgmlType::kQ4_K;
  ASSERT_TRUE(write_synthetic_model(o, dir.file("a.gguf")).ok());
  ASSERT_TRUE(write_synthetic_model(o, dir.file("b.gguf")).ok());
  o.seed = 2;
  ASSERT_TRUE(write_synthetic_model(o, dir.file("c.gguf")).ok());
  EXPECT_EQ(file_bytes(dir.file("a.gguf")), file_bytes(dir.file("b.gguf")));
  EXPECT_NE(file_bytes(dir.file("a.gguf")), file_bytes(dir.file("c.gguf")));
}

// The big shapes' tensors, without writing them: Llama 3 70B's published
// shapes (config.json: hidden 8192, intermediate 28672, 64 heads, 8 KV
// heads, vocabulary 128256).
TEST(Synth, Llama3_70bShapes) {
  SynthOptions o;
  o.shape = "llama-3-70b";
  o.type = GgmlType::kQ4_K;
  o.blocks = 4;
  auto plan = tensor_plan(o, 128256);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 1u + 4 * 9 + 2);
  auto find = [&](const std::string& name) -> const TensorSpec* {
    for (const TensorSpec& t : *plan) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  ASSERT_NE(find("blk.3.ffn_down.weight"), nullptr);
  EXPECT_EQ(find("blk.4.attn_q.weight"), nullptr);
  EXPECT_EQ(find("token_embd.weight")->shape,
            (std::vector<int64_t>{8192, 128256}));
  EXPECT_EQ(find("output.weight")->shape, (std::vector<int64_t>{8192, 128256}));
  EXPECT_EQ(find("blk.0.attn_q.weight")->shape,
            (std::vector<int64_t>{8192, 8192}));
  EXPECT_EQ(find("blk.0.attn_k.weight")->shape,
            (std::vector<int64_t>{8192, 1024}));
  EXPECT_EQ(find("blk.0.attn_v.weight")->shape,
            (std::vector<int64_t>{8192, 1024}));
  EXPECT_EQ(find("blk.0.attn_output.weight")->shape,
            (std::vector<int64_t>{8192, 8192}));
  EXPECT_EQ(find("blk.0.ffn_gate.weight")->shape,
            (std::vector<int64_t>{8192, 28672}));
  EXPECT_EQ(find("blk.0.ffn_down.weight")->shape,
            (std::vector<int64_t>{28672, 8192}));
  EXPECT_EQ(find("blk.0.ffn_down.weight")->type, GgmlType::kQ4_K);
  EXPECT_EQ(find("blk.0.attn_norm.weight")->shape,
            (std::vector<int64_t>{8192}));
}

TEST(Synth, SmolLM2RowsNotAMultipleOfTheKBlockFallBackToQ8_0) {
  SynthOptions o;
  o.shape = "smollm2-135m";
  o.type = GgmlType::kQ4_K;
  auto plan = tensor_plan(o, 49152);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->size(), 1u + 30 * 9 + 1);  // tied head
  for (const TensorSpec& t : *plan) {
    if (t.shape.size() != 2) continue;
    EXPECT_EQ(t.type, t.shape[0] % 256 == 0 ? GgmlType::kQ4_K : GgmlType::kQ8_0)
        << t.name;
  }
}

// --type Q4_K_M: llama.cpp's mix on the Llama-3-8B shape (32 blocks: the
// "more bits" layers are 0-3, 28-31 and every third from 6), and its size:
// a Llama-3-8B Q4_K_M GGUF holds 4.58 GiB (../shared/FACTS.md, the GPU
// machine's reference model).
TEST(Synth, Llama3_8bQ4_K_MMixesQ4_KAndQ6_K) {
  SynthOptions o = q4_k_m("llama-3-8b");
  auto plan = tensor_plan(o, 128256);
  ASSERT_TRUE(plan.ok()) << plan.status();
  uint64_t bytes = 0;
  int q6 = 0;
  for (const TensorSpec& t : *plan) {
    bytes += tensor_bytes(t);
    if (t.type == GgmlType::kQ6_K) ++q6;
    if (t.shape.size() != 2) continue;
    const bool v = t.name.ends_with("attn_v.weight");
    const bool down = t.name.ends_with("ffn_down.weight");
    const int layer =
        t.name.starts_with("blk.") ? std::stoi(t.name.substr(4)) : -1;
    const bool more =
        layer >= 0 && (layer < 4 || layer >= 28 || (layer - 4) % 3 == 2);
    const GgmlType want = t.name == "output.weight" || ((v || down) && more)
                              ? GgmlType::kQ6_K
                              : GgmlType::kQ4_K;
    EXPECT_EQ(t.type, want) << t.name;
  }
  EXPECT_EQ(q6, 1 + 2 * 16);  // the head; attn_v and ffn_down of 16 layers
  EXPECT_NEAR(static_cast<double>(bytes) / (1u << 30), 4.58, 0.01);
  // The mix is of Q4_K only.
  o.type = GgmlType::kQ4_0;
  EXPECT_FALSE(tensor_plan(o, 10).ok());
}

// A 70B-class model's Q4_K_M (80 layers): attn_v Q5_K where it is not Q6_K,
// as llama.cpp's LLM_TYPE_70B rule; the layers' types are those of
// published_models.h's Llama 3.3 70B (the same rule, checked there against
// the published file's size).
TEST(Synth, Llama3_70bQ4_K_MHasQ5_KAttnV) {
  auto plan = tensor_plan(q4_k_m("llama-3-70b"), 128256);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int q5 = 0, q6_v = 0;
  for (const TensorSpec& t : *plan) {
    if (!t.name.ends_with("attn_v.weight")) continue;
    const int layer = std::stoi(t.name.substr(4));
    const bool more = layer < 10 || layer >= 70 || (layer - 10) % 3 == 2;
    EXPECT_EQ(t.type, more ? GgmlType::kQ6_K : GgmlType::kQ5_K) << t.name;
    (t.type == GgmlType::kQ5_K ? q5 : q6_v) += 1;
  }
  EXPECT_EQ(q5 + q6_v, 80);
  EXPECT_GT(q5, 0);
}

// Mixtral 8x7B: the experts as llama.cpp's 3-D tensors, the router F32, and
// llama.cpp's Q4_K_M with 8 experts (llama_tensor_get_type: attn_k and
// attn_v Q8_0, attn_output Q5_K, ffn_down_exps Q6_K on the "more bits"
// layers, counted a layer as there is one tensor a layer, the head Q6_K),
// from the plan, nothing written.
TEST(Synth, Mixtral8x7bQ4_K_MPlan) {
  auto plan = tensor_plan(q4_k_m("mixtral-8x7b"), 32000);
  ASSERT_TRUE(plan.ok()) << plan.status();
  uint64_t bytes = 0;
  int experts = 0;
  for (const TensorSpec& t : *plan) {
    bytes += tensor_bytes(t);
    if (!t.name.starts_with("blk.")) continue;
    const int layer = std::stoi(t.name.substr(4));
    const bool more = layer < 4 || layer >= 28 || (layer - 4) % 3 == 2;
    GgmlType want = GgmlType::kQ4_K;
    if (t.shape.size() == 1 || t.name.ends_with("ffn_gate_inp.weight")) {
      want = GgmlType::kF32;
    } else if (t.name.ends_with("attn_k.weight") || t.name.ends_with("attn_v.weight")) {
      want = GgmlType::kQ8_0;
    } else if (t.name.ends_with("attn_output.weight")) {
      want = GgmlType::kQ5_K;
    } else if (t.name.ends_with("ffn_down_exps.weight") && more) {
      want = GgmlType::kQ6_K;
    }
    EXPECT_EQ(t.type, want) << t.name;
    if (t.name.ends_with("_exps.weight")) {
      ++experts;
      const bool down = t.name.ends_with("ffn_down_exps.weight");
      EXPECT_EQ(t.shape, (std::vector<int64_t>{down ? 14336 : 4096, down ? 4096 : 14336, 8}))
          << t.name;
    }
  }
  EXPECT_EQ(experts, 3 * 32);
  // 46.7 billion weights, most at Q4_K's 4.5 bits.
  EXPECT_GT(static_cast<double>(bytes) / 1e9, 46.7 * 4.5 / 8);
  EXPECT_LT(static_cast<double>(bytes) / 1e9, 46.7 * 5.0 / 8);
}

// The tiny mixture written, opened and read as a mixture of 4 experts, 2 a
// token, its expert weights of the intended spread (each expert's rows of
// n_in 256: 1/16).
TEST(Synth, TinyMixtralOpensAsAMixture) {
  TempDir dir;
  SynthOptions o;
  o.shape = "tiny-mixtral";
  o.type = GgmlType::kQ5_K;
  const Written w = write_and_open(o, dir);
  ASSERT_NE(w.model, nullptr);
  EXPECT_EQ(w.hp.moe.n_expert, 4);
  EXPECT_EQ(w.hp.moe.n_expert_used, 2);
  int experts = 0;
  for (const gguf::TensorInfo& t : w.model->tensors()) {
    if (!t.name.ends_with("_exps.weight")) continue;
    SCOPED_TRACE(t.name);
    ++experts;
    EXPECT_EQ(t.type, GgmlType::kQ5_K);
    double mean = 0;
    const double sd = weight_spread(t, &mean);
    const double want = 1.0 / std::sqrt(double(t.shape[0]));
    EXPECT_GT(sd, want / 2);
    EXPECT_LT(sd, want * 2);
  }
  EXPECT_EQ(experts, 3 * 2);
}

TEST(Synth, RejectsBadOptionsNamingThem) {
  SynthOptions o;
  o.shape = "llama-9";
  EXPECT_NE(tensor_plan(o, 10).status().message().find(
                "--shape: 'llama-9' is not one of"),
            std::string::npos);
  o.shape = "llama-3-8b";
  o.blocks = 33;
  EXPECT_NE(tensor_plan(o, 10).status().message().find(
                "--blocks: 33 is outside [0, 32]"),
            std::string::npos);
  o.blocks = 0;
  o.type = GgmlType::kIQ2_XXS;
  EXPECT_NE(tensor_plan(o, 10).status().message().find(
                "--type: IQ2_XXS is not written"),
            std::string::npos);
}

TEST(Synth, CopiesTheTokenizerOfAnotherGguf) {
  TempDir dir;
  SynthOptions o;
  o.shape = "tiny-llama";
  ASSERT_TRUE(write_synthetic_model(o, dir.file("a.gguf")).ok());
  o.tokenizer_from = dir.file("a.gguf");
  o.shape = "smollm2-135m";
  o.blocks = 1;
  auto report = write_synthetic_model(o, dir.file("b.gguf"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->n_vocab, 512);  // tiny-llama's, not smollm2's 49152
  auto model = gguf::GgufModel::open(dir.file("b.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->find_tensor("token_embd.weight")->shape,
            (std::vector<int64_t>{576, 512}));
}

}  // namespace
}  // namespace strata::synth
