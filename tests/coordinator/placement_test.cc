// Placement math: auto splits by memory budget, explicit ranges checked and
// refused with numbers.
#include "model/placement.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata::placement {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// n blocks of `block` bytes, embedding and head of `edge` bytes, 1 KV
// element per block per position.
ModelSizes uniform(int n, uint64_t block, uint64_t edge = 0) {
  ModelSizes s;
  s.n_layer = n;
  s.block_bytes.assign(n, block);
  s.embedding_bytes = edge;
  s.head_bytes = edge;
  s.kv_elements_per_position = 1;
  return s;
}

KvShape no_kv() { return KvShape{0, 1, GgmlType::kF16}; }

std::vector<std::pair<int, int>> ranges_of(const std::vector<ShardPlan>& p) {
  std::vector<std::pair<int, int>> r;
  for (const ShardPlan& s : p) r.emplace_back(s.first, s.last);
  return r;
}

TEST(Placement, KvBytesScaleWithContextSequencesAndType) {
  ModelSizes s = uniform(4, 0);
  s.kv_elements_per_position = 2 * 64;  // n_head_kv x (dk + dv)
  EXPECT_EQ(kv_bytes(s, {1024, 2, GgmlType::kF16}, 0, 4),
            4ull * 1024 * 2 * 128 * 2);
  EXPECT_EQ(kv_bytes(s, {1024, 2, GgmlType::kF32}, 1, 3),
            2ull * 1024 * 2 * 128 * 4);
  EXPECT_EQ(kv_bytes(s, {1024, 2, GgmlType::kF32}, 3, 3), 0u);
  // The prefix cache's block store counts as more positions.
  EXPECT_EQ(kv_bytes(s, {1024, 2, GgmlType::kF16, /*prefix_positions=*/512}, 0, 4),
            4ull * (1024 * 2 + 512) * 128 * 2);
}

TEST(Placement, ShardPlanCountsEmbeddingHeadAndSharedTensors) {
  ModelSizes s = uniform(4, 10, 100);
  s.shared_bytes = 1;
  ShardPlan first = shard_plan(s, no_kv(), 0, 2);
  EXPECT_TRUE(first.embedding);
  EXPECT_FALSE(first.head);
  EXPECT_EQ(first.weight_bytes, 10u + 10 + 100 + 1);
  ShardPlan whole = shard_plan(s, no_kv(), 0, 4);
  EXPECT_TRUE(whole.head);
  EXPECT_EQ(whole.weight_bytes, 40u + 200 + 1);
}

TEST(Placement, AutoSplitsEqualBudgetsEvenly) {
  const ModelSizes s = uniform(30, 10 * kMiB);
  std::vector<WorkerBudget> w = {{"w0", 1024 * kMiB}, {"w1", 1024 * kMiB}};
  auto p = plan_auto(s, no_kv(), w);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p), (std::vector<std::pair<int, int>>{{0, 15}, {15, 30}}));
  auto three = plan_auto(s, no_kv(),
                         std::vector<WorkerBudget>{{"a", 0}, {"b", 0}, {"c", 0}});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(ranges_of(*three),
            (std::vector<std::pair<int, int>>{{0, 10}, {10, 20}, {20, 30}}));
}

TEST(Placement, AutoBalancesWorkWithinTheBudgets) {
  // Equal work while the budgets allow it: w1's larger memory does not
  // make it faster.
  const ModelSizes s = uniform(40, 10 * kMiB);
  std::vector<WorkerBudget> w = {{"w0", 200 * kMiB}, {"w1", 600 * kMiB}};
  auto p = plan_auto(s, no_kv(), w);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p), (std::vector<std::pair<int, int>>{{0, 20}, {20, 40}}));
  // w0 holds only 10 blocks: memory decides.
  w[0].bytes = 105 * kMiB;
  p = plan_auto(s, no_kv(), w);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p), (std::vector<std::pair<int, int>>{{0, 10}, {10, 40}}));
  // Twice the threads, twice the blocks.
  w = {{"w0", 0, 1}, {"w1", 0, 2}, {"w2", 0, 1}};
  p = plan_auto(s, no_kv(), w);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p), (std::vector<std::pair<int, int>>{{0, 10}, {10, 30}, {30, 40}}));
}

TEST(Placement, TheEmbeddingWeighsOnMemoryNotOnWork) {
  // Tied embeddings (SmolLM2's shape): token_embd is both the first
  // stage's lookup (one row a token) and the last stage's head (a matmul):
  // equal bytes, unequal work; the first stage takes more blocks.
  ModelSizes s = uniform(30, 10 * kMiB, 120 * kMiB);
  auto p = plan_auto(s, no_kv(), std::vector<WorkerBudget>{{"a", 0}, {"b", 0}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p), (std::vector<std::pair<int, int>>{{0, 21}, {21, 30}}));
  EXPECT_EQ(stage_work(s, 0, 21), 210 * kMiB);
  EXPECT_EQ(stage_work(s, 21, 30), 210 * kMiB);
  // By bytes the halves would be [0, 15) and [15, 30): 270 MiB of work on
  // the last stage against 150 on the first.
  EXPECT_EQ(stage_work(s, 15, 30), 270 * kMiB);
}

TEST(Placement, AutoFollowsEdges) {
  // A big head (vocabulary) on the last stage moves blocks to the first.
  ModelSizes h = uniform(10, 10 * kMiB);
  h.head_bytes = 40 * kMiB;
  auto q = plan_auto(h, no_kv(), std::vector<WorkerBudget>{{"a", 0}, {"b", 0}});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(ranges_of(*q), (std::vector<std::pair<int, int>>{{0, 7}, {7, 10}}));
}

TEST(Placement, EveryWorkerGetsABlock) {
  ModelSizes s = uniform(3, 10);
  s.block_bytes[0] = 1000;  // the first block outweighs the rest
  auto p = plan_auto(s, no_kv(),
                     std::vector<WorkerBudget>{{"a", 0}, {"b", 0}, {"c", 0}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(ranges_of(*p),
            (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}}));
  auto too_many = plan_auto(uniform(2, 10), no_kv(),
                            std::vector<WorkerBudget>{{"a", 0}, {"b", 0}, {"c", 0}});
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("3 workers for 2 blocks"),
            std::string::npos);
}

TEST(Placement, AutoRefusesWithNumbersWhenNothingFits) {
  const ModelSizes s = uniform(30, 100 * kMiB);  // 2.9 GiB
  std::vector<WorkerBudget> w = {{"w0", 1024 * kMiB}, {"w1", 1024 * kMiB}};
  auto p = plan_auto(s, no_kv(), w);
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string m(p.status().message());
  EXPECT_NE(m.find("the model needs 2.9 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("the budgets hold 2.0 GiB"), std::string::npos) << m;
  EXPECT_NE(m.find("budget 1.0 GiB"), std::string::npos) << m;
}

TEST(Placement, KvCountsTowardTheBudget) {
  ModelSizes s = uniform(20, 50 * kMiB);
  s.kv_elements_per_position = 512;
  // 20 blocks x 512 MiB of KV do not fit two 4 GiB workers.
  const KvShape kv{1 << 16, 8, GgmlType::kF16};
  EXPECT_EQ(kv_bytes(s, kv, 0, 1), 512ull * kMiB);
  auto p = plan_auto(s, kv,
                     std::vector<WorkerBudget>{{"a", 4096 * kMiB}, {"b", 4096 * kMiB}});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Placement, ExplicitRangesAreChecked) {
  const ModelSizes s = uniform(30, 10 * kMiB);
  std::vector<WorkerBudget> w = {{"w0", 0}, {"w1", 0}};
  auto ok = check_explicit(s, no_kv(), w, std::vector<Range>{{0, 7}, {7, 30}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE((*ok)[0].embedding);
  EXPECT_TRUE((*ok)[1].head);

  struct Case {
    std::vector<Range> ranges;
    const char* message;
  };
  const Case cases[] = {
      {{{1, 7}, {7, 30}}, "worker w0: blocks [1, 7): must start at block 0"},
      {{{0, 7}, {8, 30}}, "worker w1: blocks [8, 30): must start at block 7"},
      {{{0, 7}, {7, 7}}, "worker w1: blocks [7, 7): empty range"},
      {{{0, 7}, {7, 31}}, "past the model's 30 blocks"},
      {{{0, 7}, {7, 29}}, "the ranges cover blocks [0, 29)"},
      {{{0, 30}}, "1 ranges for 2 workers"},
  };
  for (const Case& c : cases) {
    auto p = check_explicit(s, no_kv(), w, c.ranges);
    ASSERT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << p.status().message();
  }
}

TEST(Placement, ExplicitRangeOverBudgetIsRefusedWithNumbers) {
  ModelSizes s = uniform(30, 75 * kMiB);
  s.kv_elements_per_position = 1024;
  const KvShape kv{4096, 5, GgmlType::kF16};  // 40 MiB of KV per block
  std::vector<WorkerBudget> w = {{"w0", 0}, {"w1", 1024 * kMiB}};
  auto p = check_explicit(s, kv, w, std::vector<Range>{{0, 10}, {10, 30}});
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.status().message(),
            "worker w1: blocks [10, 30) need 2.2 GiB (weights 1.5 GiB + KV "
            "800.0 MiB), budget 1.0 GiB");
}

TEST(Placement, FormatBytes) {
  EXPECT_EQ(format_bytes(800), "800 B");
  EXPECT_EQ(format_bytes(12800), "12.5 KiB");
  EXPECT_EQ(format_bytes(312 * kMiB), "312.0 MiB");
  EXPECT_EQ(format_bytes(1946ull * kMiB), "1.9 GiB");
}

}  // namespace
}  // namespace strata::placement
