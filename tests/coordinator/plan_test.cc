// `strata plan`'s figures (coordinator/cluster_plan.h) on header-only GGUFs
// with the real tensor tables of Llama-3.3-70B (two split files),
// Qwen2.5-72B, Mixtral-8x22B and gpt-oss-120b (tests/model/big_shapes.h says
// where each fact comes from), held to arithmetic written out here: bytes
// per tensor from the ggml block sizes (Q4_K 144 bytes per 256 weights, Q5_K
// 176, Q6_K 210; Q8_0 34 per 32, Q5_0 22, MXFP4 17; F32 4 per weight), KV
// bytes from n_head_kv x (head_dim_k + head_dim_v) x 2 (f16) per block and
// position, the split that the slowest stage's work decides by a brute force
// over every cut, and tok/s from the declared rates.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster_config.h"
#include "coordinator/cluster_plan.h"
#include "gtest/gtest.h"
#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "model/placement.h"
#include "nlohmann/json.hpp"
#include "tests/model/big_shapes.h"

namespace strata::coordinator {
namespace {

namespace fs = std::filesystem;
using strata::synth::use_more_bits;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Bytes of n weights of a type (n a multiple of its block).
constexpr uint64_t q4_k(uint64_t n) { return n / 256 * 144; }
constexpr uint64_t q5_k(uint64_t n) { return n / 256 * 176; }
constexpr uint64_t q6_k(uint64_t n) { return n / 256 * 210; }
constexpr uint64_t q8_0(uint64_t n) { return n / 32 * 34; }
constexpr uint64_t q5_0(uint64_t n) { return n / 32 * 22; }
constexpr uint64_t mxfp4(uint64_t n) { return n / 32 * 17; }
constexpr uint64_t f32(uint64_t n) { return n * 4; }

// --- Llama-3.3-70B Q4_K_M -------------------------------------------------
// A block: attn_q, attn_output 8192 x 8192 Q4_K; attn_k 8192 x 1024 Q4_K;
// attn_v 8192 x 1024 Q6_K (more bits) or Q5_K; ffn_gate, ffn_up
// 8192 x 28672 Q4_K; ffn_down Q6_K (more bits) or Q4_K; two norms of 8192.
uint64_t llama_block(int i) {
  const bool more = use_more_bits(i, 80);
  return 2 * q4_k(8192 * 8192) + q4_k(8192 * 1024) +
         (more ? q6_k(8192 * 1024) : q5_k(8192 * 1024)) +
         2 * q4_k(8192ull * 28672) +
         (more ? q6_k(8192ull * 28672) : q4_k(8192ull * 28672)) + f32(2 * 8192);
}
constexpr uint64_t kLlamaEmbd = q4_k(8192ull * 128256);  // token_embd
constexpr uint64_t kLlamaHead =
    q6_k(8192ull * 128256) + f32(8192);     // output + norm
constexpr uint64_t kLlamaShared = f32(64);  // rope_freqs
// KV: 8 heads x (128 + 128) x 2 bytes a position and block.
constexpr uint64_t kLlamaKvPerPosition = 8 * 256 * 2;

// --- Qwen2.5-72B Q4_K_M -----------------------------------------------------
// As Llama with n_ff 29568 (ffn_down Q8_0 / Q5_0: 29568 is not a multiple of
// 256) and q/k/v biases.
uint64_t qwen_block(int i) {
  const bool more = use_more_bits(i, 80);
  return 2 * q4_k(8192 * 8192) + q4_k(8192 * 1024) +
         (more ? q6_k(8192 * 1024) : q5_k(8192 * 1024)) +
         2 * q4_k(8192ull * 29568) +
         (more ? q8_0(8192ull * 29568) : q5_0(8192ull * 29568)) +
         f32(2 * 8192) + f32(8192 + 1024 + 1024);
}
constexpr uint64_t kQwenEmbd = q4_k(8192ull * 152064);
constexpr uint64_t kQwenHead = q6_k(8192ull * 152064) + f32(8192);

// --- Mixtral-8x22B Q4_K_M ---------------------------------------------------
// Dense: attn_q 6144 x 6144 Q4_K, attn_k / attn_v 6144 x 1024 Q8_0 (8
// experts), attn_output 6144 x 6144 Q5_K, two norms, the router 6144 x 8 F32.
// Experts: gate, up 6144 x 16384 x 8 Q4_K; down Q6_K (more bits) or Q4_K.
constexpr uint64_t kMixtralDense = q4_k(6144 * 6144) + 2 * q8_0(6144 * 1024) +
                                   q5_k(6144 * 6144) + f32(2 * 6144) +
                                   f32(6144 * 8);
uint64_t mixtral_experts(int i) {
  return 2 * q4_k(6144ull * 16384 * 8) + (use_more_bits(i, 56)
                                              ? q6_k(16384ull * 6144 * 8)
                                              : q4_k(16384ull * 6144 * 8));
}
constexpr uint64_t kMixtralEmbd = q4_k(6144 * 32768);
constexpr uint64_t kMixtralHead = q6_k(6144 * 32768) + f32(6144);

// --- gpt-oss-120b MXFP4 -----------------------------------------------------
// Dense: attn_q 2880 x 4096, attn_k / attn_v 2880 x 512, attn_output
// 4096 x 2880 Q8_0; q/k/v/o biases, two norms, 64 sinks, the router
// 2880 x 128 and its bias, F32. Experts: gate, up, down 2880 x 2880 x 128
// MXFP4 and their biases 2880 x 128 F32.
constexpr uint64_t kOssDense = q8_0(2880 * 4096) + 2 * q8_0(2880 * 512) +
                               q8_0(4096 * 2880) +
                               f32(4096 + 512 + 512 + 2880) + f32(2 * 2880) +
                               f32(64) + f32(2880 * 128) + f32(128);
constexpr uint64_t kOssExperts =
    3 * mxfp4(2880ull * 2880 * 128) + 3 * f32(2880 * 128);
constexpr uint64_t kOssEmbd = q8_0(2880ull * 201088);
constexpr uint64_t kOssHead = q8_0(2880ull * 201088) + f32(2880);
// KV: 8 heads x (64 + 64) x 2 bytes.
constexpr uint64_t kOssKvPerPosition = 8 * 128 * 2;

struct Opened {
  std::unique_ptr<gguf::GgufModel> model;
  arch::Hyperparameters hp;
};

class Plan : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        absl::StrCat("strata_plan_", ::getpid()));
    fs::create_directories(*dir_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static std::string path(const std::string& name) {
    return (*dir_ / name).string();
  }

  // Opens a sparse model as `strata plan` does (GgufModel::open, then the
  // architecture's hyperparameters).
  static Opened open(const std::string& file) {
    Opened o;
    auto model = gguf::GgufModel::open(file);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return o;
    o.model = *std::move(model);
    auto hp = arch::read_hyperparameters(o.model->first());
    EXPECT_TRUE(hp.ok()) << hp.status();
    if (hp.ok()) o.hp = *hp;
    return o;
  }

  static ClusterConfig config(const std::string& yaml) {
    auto c = parse_cluster_config(yaml, "plan.yaml");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : ClusterConfig{};
  }

  static std::vector<WorkerFigures> declared(const ClusterConfig& c) {
    std::vector<WorkerFigures> out;
    for (const WorkerConfig& w : c.workers) {
      out.push_back({w.name, true, w.memory_budget, w.threads, w.read_bandwidth,
                     w.flop_rate, 0, {}});
    }
    return out;
  }

  static fs::path* dir_;
};

fs::path* Plan::dir_ = nullptr;

// The cut [0, k) | [k, n) of two equally fast workers that makes the slower
// stage fastest (work: a stage's bytes a token reads; the last stage adds
// the head), the largest k among equals ("earlier workers take as many
// blocks as they can"): every cut tried.
int best_cut(const std::vector<uint64_t>& work, uint64_t head) {
  const int n = static_cast<int>(work.size());
  int best = 1;
  uint64_t best_max = UINT64_MAX;
  for (int k = 1; k < n; ++k) {
    uint64_t a = 0, b = head;
    for (int i = 0; i < k; ++i) a += work[i];
    for (int i = k; i < n; ++i) b += work[i];
    if (std::max(a, b) <= best_max) {
      best_max = std::max(a, b);
      best = k;
    }
  }
  return best;
}

TEST_F(Plan, Llama70bSplitFilesExplicitRanges) {
  auto first = strata::testing::write_sparse_split(
      path("Llama-3.3-70B-Instruct-Q4_K_M"),
      strata::synth::llama33_70b_q4_k_m(), 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(fs::path(*first).filename(),
            "Llama-3.3-70B-Instruct-Q4_K_M-00001-of-00002.gguf");
  Opened o = open(*first);
  ASSERT_NE(o.model, nullptr);
  ASSERT_EQ(o.model->parts().size(), 2u);
  // Blocks 0..39 and 40..79 each hold 20 "more bits" layers (0-9, 12, 15,
  // .., 39 and 42, .., 69, 70-79) and 20 others.
  uint64_t half = 0;
  for (int i = 0; i < 40; ++i) half += llama_block(i);
  uint64_t other = 0;
  for (int i = 40; i < 80; ++i) other += llama_block(i);
  ASSERT_EQ(half, other);
  ASSERT_EQ(half, 20 * (544079872ull + 482410496ull));  // 20 of each kind
  // The whole file: 42.5 GB, the size of the published GGUF.
  EXPECT_EQ(2 * half + kLlamaEmbd + kLlamaHead + kLlamaShared, 42512531712ull);

  ClusterConfig c = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 2
prefix_cache_blocks: 0
placement: explicit
workers:
  - {name: a, declared: true, memory_budget: 24GiB, read_bandwidth: 20GB/s, flop_rate: 1TFLOP/s, threads: 16, blocks: [0, 40]}
  - {name: b, declared: true, memory_budget: 24GiB, read_bandwidth: 10GB/s, flop_rate: 500GFLOP/s, threads: 8, blocks: [40, 80]}
)");
  auto plan = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages.size(), 2u);
  const StagePlan& a = plan->stages[0];
  const StagePlan& b = plan->stages[1];
  EXPECT_EQ(a.shard.first, 0);
  EXPECT_EQ(a.shard.last, 40);
  EXPECT_EQ(a.shard.weight_bytes, half + kLlamaEmbd + kLlamaShared);
  EXPECT_EQ(b.shard.weight_bytes, other + kLlamaHead + kLlamaShared);
  // 40 blocks x 8192 positions x 2 sequences x 4 KiB = 2.5 GiB each.
  EXPECT_EQ(a.shard.kv_bytes, 40ull * 8192 * 2 * kLlamaKvPerPosition);
  EXPECT_EQ(a.shard.kv_bytes, 2560ull << 20);
  EXPECT_EQ(b.shard.kv_bytes, a.shard.kv_bytes);
  // Decode: 20 GB/s reads a's blocks, 10 GB/s b's blocks and head.
  const double a_s = static_cast<double>(half) / 20e9;
  const double b_s = static_cast<double>(other + kLlamaHead) / 10e9;
  EXPECT_DOUBLE_EQ(a.decode_s_per_token, a_s);
  EXPECT_DOUBLE_EQ(b.decode_s_per_token, b_s);
  EXPECT_NEAR(plan->decode_tok_s, 1 / (a_s + b_s), 1e-9);
  EXPECT_NEAR(plan->decode_tok_s, 0.3159, 0.0001);  // 1.03 s + 2.14 s a token
  // Prefill: 2 FLOPs a weight. a: 40 blocks of 8192 x (2 x 8192 + 2 x 1024 +
  // 3 x 28672) weights; b: as many, and the 8192 x 128256 head.
  const double block_params = 8192.0 * (2 * 8192 + 2 * 1024 + 3 * 28672);
  EXPECT_EQ(a.params_per_token, static_cast<uint64_t>(40 * block_params));
  EXPECT_EQ(b.params_per_token,
            static_cast<uint64_t>(40 * block_params + 8192.0 * 128256));
  EXPECT_NEAR(plan->prefill_tok_s,
              500e9 / (2 * (40 * block_params + 8192.0 * 128256)), 1e-6);
  EXPECT_GT(a.scratch_bytes, 0u);
}

TEST_F(Plan, Llama70bAutoSplitFollowsTheSlowestStage) {
  auto first = strata::testing::write_sparse_split(
      path("Llama-auto"), strata::synth::llama33_70b_q4_k_m(), 2);
  ASSERT_TRUE(first.ok()) << first.status();
  Opened o = open(*first);
  ASSERT_NE(o.model, nullptr);
  ClusterConfig c = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 1
workers:
  - {name: a, declared: true, memory_budget: 32GiB, read_bandwidth: 20GB/s}
  - {name: b, declared: true, memory_budget: 32GiB, read_bandwidth: 20GB/s}
)");
  auto plan = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<uint64_t> work;
  for (int i = 0; i < 80; ++i) work.push_back(llama_block(i));
  const int k = best_cut(work, kLlamaHead);
  EXPECT_EQ(k, 41);
  EXPECT_EQ(plan->stages[0].shard.last, k);
  EXPECT_EQ(plan->stages[1].shard.first, k);
  // Prefix cache on by default: one context's worth (8192 positions) more.
  EXPECT_EQ(plan->kv.prefix_positions, 8192);
  EXPECT_EQ(plan->stages[1].shard.kv_bytes,
            39ull * (8192 + 8192) * kLlamaKvPerPosition);
  // Speed from threads when a worker has no bandwidth: placement's rule.
  ClusterConfig t = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 1
workers:
  - {name: a, declared: true, memory_budget: 64GiB, threads: 3}
  - {name: b, declared: true, memory_budget: 64GiB, threads: 1}
)");
  auto by_threads = plan_cluster(t, *o.model, o.hp, declared(t));
  ASSERT_TRUE(by_threads.ok()) << by_threads.status();
  EXPECT_GT(by_threads->stages[0].shard.last,
            55);                           // about 3/4 of the work on a
  EXPECT_EQ(by_threads->decode_tok_s, 0);  // no bandwidth: unknown
}

TEST_F(Plan, Llama70bRefusedWithTheNumbers) {
  auto first = strata::testing::write_sparse_split(
      path("Llama-small"), strata::synth::llama33_70b_q4_k_m(), 2);
  ASSERT_TRUE(first.ok()) << first.status();
  Opened o = open(*first);
  ASSERT_NE(o.model, nullptr);
  ClusterConfig c = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 1
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 20GiB}
  - {name: b, declared: true, memory_budget: 20GiB}
)");
  auto plan = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  // Weights 42512531712 bytes = 39.6 GiB; KV 80 x 8192 x 4 KiB = 2.5 GiB;
  // 42.1 GiB in all against 40 GiB of budgets.
  const std::string m(plan.status().message());
  EXPECT_NE(m.find("the model needs 42.1 GiB (weights 39.6 GiB + KV 2.5 GiB "
                   "for 1 sequences x "
                   "8192 positions), the budgets hold 40.0 GiB"),
            std::string::npos)
      << m;
}

TEST_F(Plan, Qwen72bOnThreeWorkers) {
  const std::string file = path("Qwen2.5-72B-Instruct-Q4_K_M.gguf");
  ASSERT_TRUE(strata::synth::write_header_only(strata::synth::qwen25_72b_q4_k_m(), file)
                  .ok());
  Opened o = open(file);
  ASSERT_NE(o.model, nullptr);
  uint64_t blocks = 0;
  for (int i = 0; i < 80; ++i) blocks += qwen_block(i);
  // 47.4 GB, the size of the published GGUF.
  EXPECT_EQ(blocks + kQwenEmbd + kQwenHead, 47409725440ull);
  ClusterConfig c = config(R"(
model: m.gguf
max_sequences: 1
prefix_cache_blocks: 0
placement: explicit
workers:
  - {name: a, declared: true, memory_budget: 24GiB, blocks: [0, 30]}
  - {name: b, declared: true, memory_budget: 24GiB, blocks: [30, 60]}
  - {name: c, declared: true, memory_budget: 24GiB, blocks: [60, 80]}
)");
  auto plan = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The model's context: 32768 positions; 8 KV heads x 256 x 2 bytes.
  EXPECT_EQ(plan->kv.n_ctx, 32768);
  uint64_t a = 0, b = 0, last = 0;
  for (int i = 0; i < 30; ++i) a += qwen_block(i);
  for (int i = 30; i < 60; ++i) b += qwen_block(i);
  for (int i = 60; i < 80; ++i) last += qwen_block(i);
  EXPECT_EQ(plan->stages[0].shard.weight_bytes, a + kQwenEmbd);
  EXPECT_EQ(plan->stages[1].shard.weight_bytes, b);
  EXPECT_EQ(plan->stages[2].shard.weight_bytes, last + kQwenHead);
  EXPECT_EQ(plan->stages[0].shard.kv_bytes, 30ull * 32768 * 4096);  // 3.75 GiB
  EXPECT_EQ(plan->stages[2].shard.kv_bytes, 20ull * 32768 * 4096);
  // 30 blocks + embedding (16.7 GiB) + 3.75 GiB of KV do not fit 20 GiB.
  c.workers[0].memory_budget = 20 * kGiB;
  auto refused = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("worker a: blocks [0, 30) need"),
            std::string::npos)
      << refused.status();
}

TEST_F(Plan, Mixtral8x22bReadsTwoOfEightExperts) {
  const std::string file = path("Mixtral-8x22B-Instruct-v0.1-Q4_K_M.gguf");
  ASSERT_TRUE(strata::synth::write_header_only(strata::synth::mixtral_8x22b_q4_k_m(), file)
                  .ok());
  Opened o = open(file);
  ASSERT_NE(o.model, nullptr);
  auto sizes = placement::model_sizes(*o.model, o.hp);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->n_expert, 8);
  EXPECT_EQ(sizes->n_expert_used, 2);
  uint64_t total = kMixtralEmbd + kMixtralHead;
  std::vector<uint64_t> active;
  for (int i = 0; i < 56; ++i) {
    EXPECT_EQ(sizes->block_bytes[i], kMixtralDense + mixtral_experts(i)) << i;
    EXPECT_EQ(sizes->active_bytes[i],
              kMixtralDense + mixtral_experts(i) / 8 * 2)
        << i;
    active.push_back(kMixtralDense + mixtral_experts(i) / 4);
    total += kMixtralDense + mixtral_experts(i);
  }
  EXPECT_EQ(total, 85598035968ull);  // 85.6 GB, the published GGUF's size
  // Params a token multiplies: dense matrices + 2 of 8 experts'.
  EXPECT_EQ(sizes->active_params[0], 6144ull * 6144 * 2 + 6144ull * 1024 * 2 +
                                         6144 * 8 + 3 * 6144ull * 16384 * 2);

  ClusterConfig c = config(R"(
model: m.gguf
context_length: 16384
max_sequences: 4
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 48GiB, read_bandwidth: 40GB/s}
  - {name: b, declared: true, memory_budget: 48GiB, read_bandwidth: 40GB/s}
)");
  auto plan = plan_cluster(c, *o.model, o.hp, declared(c));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int k = best_cut(active, kMixtralHead);
  EXPECT_EQ(k, 28);
  EXPECT_EQ(plan->stages[0].shard.last, k);
  uint64_t a = 0, b = 0, a_active = 0, b_active = 0;
  for (int i = 0; i < 56; ++i) {
    (i < k ? a : b) += kMixtralDense + mixtral_experts(i);
    (i < k ? a_active : b_active) += active[i];
  }
  EXPECT_EQ(plan->stages[0].shard.weight_bytes, a + kMixtralEmbd);
  EXPECT_EQ(plan->stages[1].shard.weight_bytes, b + kMixtralHead);
  // 28 blocks x 16384 x 4 sequences x 4 KiB = 7 GiB.
  EXPECT_EQ(plan->stages[0].shard.kv_bytes, 7 * kGiB);
  EXPECT_EQ(plan->stages[0].read_bytes_per_token, a_active);
  EXPECT_EQ(plan->stages[1].read_bytes_per_token, b_active + kMixtralHead);
  EXPECT_NEAR(plan->decode_tok_s,
              40e9 / static_cast<double>(a_active + b_active + kMixtralHead),
              1e-9);
  EXPECT_NEAR(plan->decode_tok_s, 1.663, 0.001);  // 24.0 GB a token at 40 GB/s
}

TEST_F(Plan, GptOss120bReadsFourOf128Experts) {
  const std::string file = path("gpt-oss-120b-mxfp4.gguf");
  ASSERT_TRUE(strata::synth::write_header_only(strata::synth::gpt_oss_120b_mxfp4(), file)
                  .ok());
  Opened o = open(file);
  ASSERT_NE(o.model, nullptr);
  const gguf::GgufModel* model = o.model.get();
  const arch::Hyperparameters& hp = o.hp;
  EXPECT_EQ(hp.moe.n_expert, 128);
  auto sizes = placement::model_sizes(*model, hp);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->n_expert, 128);
  EXPECT_EQ(sizes->n_expert_used, 4);
  EXPECT_EQ(sizes->block_bytes[0], kOssDense + kOssExperts);
  EXPECT_EQ(sizes->active_bytes[0], kOssDense + kOssExperts / 128 * 4);
  // 63.4 GB, the published GGUF's size.
  EXPECT_EQ(36 * (kOssDense + kOssExperts) + kOssEmbd + kOssHead,
            63374323968ull);

  ClusterConfig c = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 1
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 40GiB, read_bandwidth: 50GB/s, flop_rate: 2TFLOP/s}
  - {name: b, declared: true, memory_budget: 40GiB, read_bandwidth: 50GB/s, flop_rate: 2TFLOP/s}
)");
  auto plan = plan_cluster(c, *model, hp, declared(c));
  ASSERT_TRUE(plan.ok()) << plan.status();
  const uint64_t active = kOssDense + kOssExperts / 32;
  // The head (201088 x 2880 Q8_0, 0.6 GB) outweighs 12 blocks' reads (51 MB
  // each): the last stage gets 14 blocks.
  const int k = best_cut(std::vector<uint64_t>(36, active), kOssHead);
  EXPECT_EQ(k, 22);
  EXPECT_EQ(plan->stages[0].shard.last, 22);
  EXPECT_EQ(plan->stages[0].shard.weight_bytes,
            22 * (kOssDense + kOssExperts) + kOssEmbd);
  EXPECT_EQ(plan->stages[1].shard.weight_bytes,
            14 * (kOssDense + kOssExperts) + kOssHead);
  EXPECT_EQ(plan->stages[0].shard.kv_bytes,
            22ull * 8192 * kOssKvPerPosition);  // 352 MiB
  EXPECT_NEAR(plan->decode_tok_s,
              50e9 / static_cast<double>(36 * active + kOssHead), 1e-9);
  EXPECT_NEAR(plan->decode_tok_s, 13.91, 0.01);  // 3.6 GB a token at 50 GB/s
  // Prefill: blocks of 2880 x (4096 + 512 + 512 + 128) + 4096 x 2880 dense
  // weights and 4 experts of 3 x 2880 x 2880 (126.4 M weights); a's 22
  // blocks multiply more than b's 14 and the 2880 x 201088 head (2.78 G
  // against 2.35 G): a is the slower stage.
  const double block_params =
      2880.0 * (4096 + 512 + 512 + 128) + 4096.0 * 2880 + 4 * 3 * 2880.0 * 2880;
  EXPECT_EQ(plan->stages[0].params_per_token,
            static_cast<uint64_t>(22 * block_params));
  EXPECT_EQ(plan->stages[1].params_per_token,
            static_cast<uint64_t>(14 * block_params + 2880.0 * 201088));
  EXPECT_NEAR(plan->prefill_tok_s, 2e12 / (2 * 22 * block_params), 1e-6);
}

// A worker that reports its read rate by working-set size (Describe's
// read_rates): each stage's decode time uses the rate at its own bytes a
// token; placement still balances the large-working-set figure.
TEST_F(Plan, ReadRatesByWorkingSetSize) {
  const std::string file = path("gpt-oss-120b-points.gguf");
  ASSERT_TRUE(strata::synth::write_header_only(strata::synth::gpt_oss_120b_mxfp4(), file)
                  .ok());
  Opened o = open(file);
  ASSERT_NE(o.model, nullptr);
  ClusterConfig c = config(R"(
model: m.gguf
context_length: 8192
max_sequences: 1
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 40GiB, read_bandwidth: 50GB/s}
  - {name: b, declared: true, memory_budget: 40GiB, read_bandwidth: 50GB/s}
)");
  std::vector<WorkerFigures> figures = declared(c);
  auto flat = plan_cluster(c, *o.model, o.hp, figures);
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_EQ(flat->stages.size(), 2u);
  const uint64_t bytes_a = flat->stages[0].read_bytes_per_token;
  const uint64_t bytes_b = flat->stages[1].read_bytes_per_token;
  EXPECT_DOUBLE_EQ(flat->stages[0].read_bytes_per_s, 50e9);

  // a's stage lies on its smallest point, b's on its largest.
  figures[0].read_points = {{bytes_a, 80e9}, {4 * bytes_a, 40e9}};
  figures[1].read_points = {{bytes_b / 4, 90e9}, {bytes_b, 60e9}};
  auto plan = plan_cluster(c, *o.model, o.hp, figures);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->stages[0].shard.last, flat->stages[0].shard.last);
  EXPECT_DOUBLE_EQ(plan->stages[0].read_bytes_per_s, 80e9);
  EXPECT_DOUBLE_EQ(plan->stages[1].read_bytes_per_s, 60e9);
  EXPECT_NEAR(plan->decode_tok_s,
              1.0 / (static_cast<double>(bytes_a) / 80e9 +
                     static_cast<double>(bytes_b) / 60e9),
              1e-9);
  EXPECT_GT(plan->decode_tok_s, flat->decode_tok_s);
}

// Runs `strata plan --config FILE --json`; its exit status and stdout.
std::pair<int, std::string> run_plan_json(const std::string& config_path) {
  const std::string command = absl::StrCat(STRATA_CLI, " plan --config ",
                                           config_path, " --json 2>/dev/null");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST_F(Plan, CommandLineJsonAndExitStatus) {
  const std::string file = path("Mixtral-cli.gguf");
  ASSERT_TRUE(strata::synth::write_header_only(strata::synth::mixtral_8x22b_q4_k_m(), file)
                  .ok());
  const std::string fits = path("fits.yaml");
  std::ofstream(fits) << "model: " << file << R"(
context_length: 16384
max_sequences: 4
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 48GiB, read_bandwidth: 40GB/s}
  - {name: b, declared: true, memory_budget: 48GiB, read_bandwidth: 40GB/s}
)";
  auto [rc, out] = run_plan_json(fits);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["n_expert"], 8);
  EXPECT_EQ(j["workers"][0]["last"], 28);
  EXPECT_EQ(j["workers"][1]["first"], 28);
  EXPECT_EQ(j["workers"][0]["kv_bytes"].get<uint64_t>(), 7 * kGiB);
  uint64_t b = 0;
  for (int i = 28; i < 56; ++i) b += kMixtralDense + mixtral_experts(i);
  EXPECT_EQ(j["workers"][1]["weight_bytes"].get<uint64_t>(), b + kMixtralHead);
  EXPECT_NEAR(j["decode_tok_s"].get<double>(), 1.663, 0.001);

  // 79.7 GiB of weights and 14 GiB of KV on 2 x 40 GiB: refused, exit 1.
  const std::string small = path("small.yaml");
  std::ofstream(small) << "model: " << file << R"(
context_length: 16384
max_sequences: 4
prefix_cache_blocks: 0
workers:
  - {name: a, declared: true, memory_budget: 40GiB}
  - {name: b, declared: true, memory_budget: 40GiB}
)";
  auto [refused_rc, refused] = run_plan_json(small);
  EXPECT_EQ(refused_rc, 1);
  const nlohmann::json r = nlohmann::json::parse(refused);
  EXPECT_FALSE(r["fits"].get<bool>());
  EXPECT_NE(r["error"].get<std::string>().find(
                "the model needs 93.7 GiB (weights 79.7 GiB + KV 14.0 GiB for "
                "4 sequences x 16384 "
                "positions), the budgets hold 80.0 GiB"),
            std::string::npos)
      << r.dump();
}

TEST(PlanConfig, SpeedIsBandwidthWhenEveryWorkerHasOne) {
  const std::vector<WorkerFigures> all = {{"a", false, 0, 4, 20e9, 0, 0, {}},
                                          {"b", false, 0, 2, 12e9, 0, 0, {}}};
  std::vector<placement::WorkerBudget> b = worker_budgets(all);
  EXPECT_DOUBLE_EQ(b[0].speed, 20e9);
  EXPECT_DOUBLE_EQ(b[1].speed, 12e9);
  // One without a bandwidth (an older worker): threads for all, in one unit.
  const std::vector<WorkerFigures> mixed = {{"a", false, 0, 4, 20e9, 0, 0, {}},
                                            {"b", false, 0, 2, 0, 0, 0, {}}};
  b = worker_budgets(mixed);
  EXPECT_DOUBLE_EQ(b[0].speed, 4);
  EXPECT_DOUBLE_EQ(b[1].speed, 2);
  // What a broken or hostile worker might report counts as unknown.
  for (double bad : {std::nan(""), -1.0, HUGE_VAL, 1e30}) {
    const std::vector<WorkerFigures> odd = {{"a", false, 0, 4, 20e9, 0, 0, {}},
                                            {"b", false, 0, 2, bad, bad, 0, {}}};
    b = worker_budgets(odd);
    EXPECT_DOUBLE_EQ(b[1].speed, 2) << bad;
  }
}

TEST(PlanConfig, ReadRateAtInterpolatesInLogSize) {
  constexpr uint64_t kMiB = 1 << 20;
  WorkerFigures w;
  w.read_bytes_per_s = 20e9;
  // No points: the single figure at every size.
  EXPECT_DOUBLE_EQ(read_rate_at(w, 16 * kMiB), 20e9);
  // Given out of order.
  w.read_points = {{256 * kMiB, 20e9}, {16 * kMiB, 40e9}, {64 * kMiB, 30e9}};
  EXPECT_DOUBLE_EQ(read_rate_at(w, 16 * kMiB), 40e9);
  EXPECT_DOUBLE_EQ(read_rate_at(w, 64 * kMiB), 30e9);
  // 32 MiB lies halfway between 16 and 64 MiB in log size; 128 between
  // 64 and 256.
  EXPECT_NEAR(read_rate_at(w, 32 * kMiB), 35e9, 1);
  EXPECT_NEAR(read_rate_at(w, 128 * kMiB), 25e9, 1);
  // A quarter of the way from 16 to 64 MiB in log size: 16 * 2^0.5 MiB.
  EXPECT_NEAR(read_rate_at(w, static_cast<uint64_t>(16 * kMiB * std::sqrt(2.0))),
              37.5e9, 1e3);
  // Below the smallest point its rate; past the largest the largest's.
  EXPECT_DOUBLE_EQ(read_rate_at(w, 1 * kMiB), 40e9);
  EXPECT_DOUBLE_EQ(read_rate_at(w, 0), 40e9);
  EXPECT_DOUBLE_EQ(read_rate_at(w, 4096 * kMiB), 20e9);
  // Points a broken worker might report are skipped.
  w.read_points.push_back({32 * kMiB, std::nan("")});
  w.read_points.push_back({0, 90e9});
  w.read_points.push_back({512 * kMiB, -1});
  EXPECT_NEAR(read_rate_at(w, 32 * kMiB), 35e9, 1);
  EXPECT_DOUBLE_EQ(read_rate_at(w, 4096 * kMiB), 20e9);
  // Only broken points: the single figure.
  w.read_points = {{16 * kMiB, HUGE_VAL}};
  EXPECT_DOUBLE_EQ(read_rate_at(w, 16 * kMiB), 20e9);
}

TEST(PlanConfig, DeclaredWorkers) {
  auto c = parse_cluster_config(R"(
model: m.gguf
workers:
  - address: 127.0.0.1:6001
  - {name: big, declared: true, memory_budget: 64GiB, read_bandwidth: 18.5GiB/s, flop_rate: 1.5TFLOP/s, threads: 32}
)",
                                "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->workers[0].declared);
  EXPECT_TRUE(c->workers[1].declared);
  EXPECT_EQ(c->workers[1].address, "");
  EXPECT_EQ(c->workers[1].memory_budget, 64 * kGiB);
  EXPECT_DOUBLE_EQ(c->workers[1].read_bandwidth, 18.5 * kGiB);
  EXPECT_DOUBLE_EQ(c->workers[1].flop_rate, 1.5e12);
  EXPECT_EQ(c->workers[1].threads, 32);
  EXPECT_EQ(worker_label(c->workers[1]), "worker big");
  absl::Status running = check_workers_running(*c);
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(running.message().find("workers[1]: worker big is declared"),
            std::string::npos)
      << running;

  const auto error = [](const std::string& workers) {
    auto r =
        parse_cluster_config("model: m.gguf\nworkers:\n" + workers, "c.yaml");
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  EXPECT_NE(error("  - {name: x, declared: true}\n")
                .find("workers[0].memory_budget: missing"),
            std::string::npos);
  EXPECT_NE(error("  - {declared: true, memory_budget: 1GiB}\n")
                .find("workers[0].name: missing"),
            std::string::npos);
  EXPECT_NE(error("  - {address: '127.0.0.1:6001', read_bandwidth: 1GB/s}\n")
                .find("workers[0].read_bandwidth: only for a declared worker"),
            std::string::npos);
  EXPECT_NE(error("  - {name: x, declared: true, memory_budget: 1GiB, "
                  "read_bandwidth: 20GB}\n")
                .find("workers[0].read_bandwidth: \"20GB\" is not a rate"),
            std::string::npos);
  EXPECT_NE(
      error(
          "  - {name: x, declared: true, memory_budget: 1GiB, flop_rate: 2T}\n")
          .find("workers[0].flop_rate: \"2T\" is not a FLOP rate"),
      std::string::npos);
  EXPECT_NE(error("  - {name: x}\n").find("workers[0].address: missing"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::coordinator
