// Picks from head rows (worker/head_picks.h): the argmax the sampler's
// greedy path takes, the top-k candidates its top-k step keeps (and the
// sampler's draw from them: Sampler::sample_top), the split of head rows
// into logits and picks, and every backend's Logits::kArgmax and kTopK
// slices picking what their own logits say.
#include <algorithm>
#include <cmath>
#include <random>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "worker/fake_backend.h"
#include "worker/head_picks.h"
#include "worker/sampler.h"

namespace strata::worker_test {
namespace {

using worker::first_argmax;
using worker::ForwardSlice;
using worker::Logits;

TEST(HeadPicks, FirstArgmaxTakesTheFirstOfTheLargestAndNeverANan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Past 16 values, so the vector passes run too; ties at 3 and 40.
  std::vector<float> x(50, -1.0f);
  x[3] = 2.5f;
  x[40] = 2.5f;
  x[7] = nan;
  EXPECT_EQ(first_argmax(x), 3);
  x[45] = inf;
  EXPECT_EQ(first_argmax(x), 45);
  EXPECT_EQ(first_argmax(std::vector<float>{nan, nan, nan}), -1);
  EXPECT_EQ(first_argmax(std::vector<float>{nan, -inf}), 1);
  // The sampler's greedy pick is the same.
  worker::Sampler greedy(worker::SamplingParams{}, 50);
  x[45] = -1.0f;
  EXPECT_EQ(greedy.sample(x), first_argmax(x));
}

// top_candidates: the k largest, largest first, equal values by lower
// index (-0 equals +0), against a full sort of (value, index) pairs.
TEST(HeadPicks, TopCandidatesAreTheLargestInTheSamplersOrder) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(-6, 6);  // many ties
  for (const int n : {1, 7, 300}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = 0.25f * static_cast<float>(level(rng));
    if (n > 2) {
      x[1] = -0.0f;
      x[2] = 0.0f;
    }
    std::vector<int32_t> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
    for (const int k : {1, std::min(n, 5), n}) {
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> values(static_cast<size_t>(k));
      worker::top_candidates(x, k, ids.data(), values.data());
      EXPECT_EQ(ids, std::vector<int32_t>(order.begin(), order.begin() + k)) << n << " " << k;
      for (int i = 0; i < k; ++i) EXPECT_EQ(values[i], x[ids[i]]);
    }
  }
}

// Sampler::sample_top over a row's top_candidates draws what sample() draws
// from the whole row, step after step (the same generator), for top_k
// below, at and above the vocabulary, with top-p, min-p and temperatures,
// on rows with ties.
TEST(HeadPicks, SamplingFromTheTopCandidatesIsSamplingTheRow) {
  const int n_vocab = 97;
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int top_k : {1, 3, 40, 97, 500}) {
    for (const float top_p : {1.0f, 0.9f, 0.3f}) {
      for (const float min_p : {0.0f, 0.05f}) {
        worker::SamplingParams p;
        p.temperature = top_p == 0.3f ? 0.5f : 1.0f;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.seed = 1000u + static_cast<uint64_t>(top_k);
        worker::Sampler whole(p, n_vocab), top(p, n_vocab);
        const int k = std::min(top_k, n_vocab);
        std::vector<int32_t> ids(static_cast<size_t>(k));
        std::vector<float> values(static_cast<size_t>(k));
        for (int step = 0; step < 60; ++step) {
          std::vector<float> row(static_cast<size_t>(n_vocab));
          for (float& v : row) v = std::round(normal(rng) * 4.0f) / 4.0f;  // ties
          worker::top_candidates(row, k, ids.data(), values.data());
          ASSERT_EQ(top.sample_top(ids, values), whole.sample(row))
              << "top_k " << top_k << ", top_p " << top_p << ", min_p " << min_p << ", step "
              << step;
        }
      }
    }
  }
}

// Head rows of kAll (2 rows), kArgmax, kLast, kNone, kArgmax, kTopK (3):
// the picks and candidates in slice order, the other rows moved to the
// front in order.
TEST(HeadPicks, TakePickedRowsKeepsTheLogitsRowsInOrder) {
  const int64_t v = 5;
  const std::vector<ForwardSlice> slices = {
      {.seq = 0, .rows = 2, .logits = Logits::kAll},
      {.seq = 1, .rows = 3, .logits = Logits::kArgmax},
      {.seq = 2, .rows = 1, .logits = Logits::kLast},
      {.seq = 3, .rows = 4, .logits = Logits::kNone},
      {.seq = 4, .rows = 1, .logits = Logits::kArgmax},
      {.seq = 5, .rows = 2, .logits = Logits::kTopK, .top_k = 3}};
  // Row r's values: 10 r + column; picks at column 2 (row 2) and 4 (row 4).
  std::vector<float> rows(6 * v);
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < v; ++c) rows[r * v + c] = static_cast<float>(10 * r + (c == 0 ? 0 : -c));
  }
  rows[2 * v + 2] = 100.0f;
  rows[4 * v + 4] = 100.0f;
  rows[5 * v + 3] = 100.0f;  // row 5: 100, 50, 49, ...: columns 3, 0, 1
  const std::vector<float> before = rows;
  worker::HeadPicks picks;
  EXPECT_EQ(worker::take_picked_rows(slices, rows.data(), v, &picks), 3);
  EXPECT_EQ(picks.argmax, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(picks.top_ids, (std::vector<int32_t>{3, 0, 1}));
  EXPECT_EQ(picks.top_logits, (std::vector<float>{100.0f, 50.0f, 49.0f}));
  for (int c = 0; c < v; ++c) {
    EXPECT_EQ(rows[0 * v + c], before[0 * v + c]);
    EXPECT_EQ(rows[1 * v + c], before[1 * v + c]);
    EXPECT_EQ(rows[2 * v + c], before[3 * v + c]);  // the kLast row moved up
  }
}

// A step with the same slices asking for logits and for picks: the picks
// are first_argmax of the logits, the candidates their top_candidates, the
// other slices' rows unchanged.
void expect_picks_match_logits(worker::Backend& a, worker::Backend& b,
                               const std::vector<int32_t>& tokens) {
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(a.add_sequence(s, 64).ok());
    ASSERT_TRUE(b.add_sequence(s, 64).ok());
  }
  std::vector<ForwardSlice> logits = {{.seq = 0, .rows = 2, .logits = Logits::kLast},
                                      {.seq = 1, .rows = 3, .logits = Logits::kAll},
                                      {.seq = 2, .rows = 1, .logits = Logits::kLast},
                                      {.seq = 3, .rows = 1, .logits = Logits::kLast}};
  std::vector<ForwardSlice> picks = logits;
  picks[0].logits = Logits::kArgmax;
  picks[2].logits = Logits::kArgmax;
  picks[3].logits = Logits::kTopK;
  picks[3].top_k = 7;
  worker::ForwardRequest ra, rb;
  ra.tokens = rb.tokens = tokens;
  ra.slices = logits;
  rb.slices = picks;
  worker::ForwardResult oa, ob;
  ASSERT_TRUE(a.forward(ra, &oa).ok());
  ASSERT_TRUE(b.forward(rb, &ob).ok());
  const size_t v = static_cast<size_t>(a.n_vocab());
  ASSERT_EQ(oa.logits.size(), 6 * v);
  ASSERT_EQ(ob.logits.size(), 3 * v);
  ASSERT_EQ(ob.argmax.size(), 2u);
  EXPECT_EQ(ob.argmax[0], first_argmax(oa.logits.subspan(0, v)));
  EXPECT_EQ(ob.argmax[1], first_argmax(oa.logits.subspan(4 * v, v)));
  EXPECT_TRUE(std::equal(ob.logits.begin(), ob.logits.end(), oa.logits.begin() + v));
  std::vector<int32_t> ids(7);
  std::vector<float> values(7);
  worker::top_candidates(oa.logits.subspan(5 * v, v), 7, ids.data(), values.data());
  EXPECT_EQ(std::vector<int32_t>(ob.top_ids.begin(), ob.top_ids.end()), ids);
  EXPECT_EQ(std::vector<float>(ob.top_logits.begin(), ob.top_logits.end()), values);
  EXPECT_TRUE(oa.argmax.empty());
  EXPECT_TRUE(oa.top_ids.empty());
}

// kTopK asks for 1 to min(kMaxTopK, n_vocab) candidates; other counts are
// refused before the step runs.
TEST(HeadPicks, TopKOutsideItsRangeIsRefused) {
  worker::FakeBackendOptions o;
  o.n_vocab = 40;
  worker::FakeBackend b(o);
  ASSERT_TRUE(b.add_sequence(0, 8).ok());
  for (const int k : {0, 41, -1}) {
    const ForwardSlice slice{.seq = 0, .rows = 1, .logits = Logits::kTopK, .top_k = k};
    const std::vector<int32_t> tokens = {1};
    worker::ForwardRequest req;
    req.tokens = tokens;
    req.slices = std::span<const ForwardSlice>(&slice, 1);
    worker::ForwardResult r;
    const absl::Status st = b.forward(req, &r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_NE(st.message().find("top_k"), std::string::npos) << st;
    EXPECT_EQ(*b.sequence_length(0), 0);
  }
}

// A logit bias changes the row before any pick, so neither the backend's
// argmax nor its top-k candidates are the sampler's: the row leaves.
TEST(HeadPicks, ALogitBiasTakesTheRow) {
  worker::SamplingParams greedy;
  int top_k = -1;
  EXPECT_EQ(worker::head_pick(greedy, false, 100, &top_k), Logits::kArgmax);
  worker::SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.top_k = 8;
  EXPECT_EQ(worker::head_pick(sampled, false, 100, &top_k), Logits::kTopK);
  EXPECT_EQ(top_k, 8);
  for (worker::SamplingParams p : {greedy, sampled}) {
    p.logit_bias = {{3, -1.0f}};
    EXPECT_EQ(worker::head_pick(p, false, 100, &top_k), Logits::kLast);
    EXPECT_EQ(top_k, 0);
  }
}

TEST(HeadPicks, TheFakeBackendPicksWhatItsLogitsSay) {
  worker::FakeBackendOptions o;
  o.n_vocab = 40;
  worker::FakeBackend a(o), b(o);
  expect_picks_match_logits(a, b, {1, 2, 3, 4, 5, 6, 7});
}

TEST(HeadPicks, TheCpuBackendPicksWhatItsLogitsSay) {
  if (!exists(stories_path())) GTEST_SKIP() << stories_path() << " absent (../shared/models)";
  auto opened = gguf::GgufModel::open(stories_path());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const gguf::GgufModel> model(std::move(*opened));
  auto hp = arch::read_hyperparameters(model->first());
  ASSERT_TRUE(hp.ok());
  worker::CpuBackendOptions options;
  auto a = worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options);
  auto b = worker::make_cpu_backend(model, *hp, {0, hp->n_layer}, options);
  ASSERT_TRUE(a.ok() && b.ok());
  expect_picks_match_logits(**a, **b, {1, 403, 1, 261, 378, 1, 40});
}

}  // namespace
}  // namespace strata::worker_test
