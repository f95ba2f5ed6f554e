// Greedy picks (worker/greedy_pick.h): the argmax the sampler's greedy path
// takes, the split of head rows into logits and picks, and every backend's
// Logits::kArgmax slices picking what their own logits say.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/worker_test_util.h"
#include "worker/fake_backend.h"
#include "worker/greedy_pick.h"
#include "worker/sampler.h"

namespace strata::worker_test {
namespace {

using worker::first_argmax;
using worker::ForwardSlice;
using worker::Logits;

TEST(GreedyPick, FirstArgmaxTakesTheFirstOfTheLargestAndNeverANan) {
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

// Head rows of kAll (2 rows), kArgmax, kLast, kNone, kArgmax: the picks in
// slice order, the other rows moved to the front in order.
TEST(GreedyPick, TakeGreedyRowsKeepsTheLogitsRowsInOrder) {
  const int64_t v = 5;
  const std::vector<ForwardSlice> slices = {{.seq = 0, .rows = 2, .logits = Logits::kAll},
                                            {.seq = 1, .rows = 3, .logits = Logits::kArgmax},
                                            {.seq = 2, .rows = 1, .logits = Logits::kLast},
                                            {.seq = 3, .rows = 4, .logits = Logits::kNone},
                                            {.seq = 4, .rows = 1, .logits = Logits::kArgmax}};
  // Row r's values: 10 r + column; picks at column 2 (row 2) and 4 (row 4).
  std::vector<float> rows(5 * v);
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < v; ++c) rows[r * v + c] = static_cast<float>(10 * r + (c == 0 ? 0 : -c));
  }
  rows[2 * v + 2] = 100.0f;
  rows[4 * v + 4] = 100.0f;
  const std::vector<float> before = rows;
  std::vector<int32_t> picks;
  EXPECT_EQ(worker::take_greedy_rows(slices, rows.data(), v, &picks), 3);
  EXPECT_EQ(picks, (std::vector<int32_t>{2, 4}));
  for (int c = 0; c < v; ++c) {
    EXPECT_EQ(rows[0 * v + c], before[0 * v + c]);
    EXPECT_EQ(rows[1 * v + c], before[1 * v + c]);
    EXPECT_EQ(rows[2 * v + c], before[3 * v + c]);  // the kLast row moved up
  }
}

// A step with the same slices asking for logits and for picks: the picks
// are first_argmax of the logits, the other slices' rows unchanged.
void expect_picks_match_logits(worker::Backend& a, worker::Backend& b,
                               const std::vector<int32_t>& tokens) {
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(a.add_sequence(s, 64).ok());
    ASSERT_TRUE(b.add_sequence(s, 64).ok());
  }
  std::vector<ForwardSlice> logits = {{.seq = 0, .rows = 2, .logits = Logits::kLast},
                                      {.seq = 1, .rows = 3, .logits = Logits::kAll},
                                      {.seq = 2, .rows = 1, .logits = Logits::kLast}};
  std::vector<ForwardSlice> picks = logits;
  picks[0].logits = Logits::kArgmax;
  picks[2].logits = Logits::kArgmax;
  worker::ForwardRequest ra, rb;
  ra.tokens = rb.tokens = tokens;
  ra.slices = logits;
  rb.slices = picks;
  worker::ForwardResult oa, ob;
  ASSERT_TRUE(a.forward(ra, &oa).ok());
  ASSERT_TRUE(b.forward(rb, &ob).ok());
  const size_t v = static_cast<size_t>(a.n_vocab());
  ASSERT_EQ(oa.logits.size(), 5 * v);
  ASSERT_EQ(ob.logits.size(), 3 * v);
  ASSERT_EQ(ob.argmax.size(), 2u);
  EXPECT_EQ(ob.argmax[0], first_argmax(oa.logits.subspan(0, v)));
  EXPECT_EQ(ob.argmax[1], first_argmax(oa.logits.subspan(4 * v, v)));
  EXPECT_TRUE(std::equal(ob.logits.begin(), ob.logits.end(), oa.logits.begin() + v));
  EXPECT_TRUE(oa.argmax.empty());
}

TEST(GreedyPick, TheFakeBackendPicksWhatItsLogitsSay) {
  worker::FakeBackendOptions o;
  o.n_vocab = 40;
  worker::FakeBackend a(o), b(o);
  expect_picks_match_logits(a, b, {1, 2, 3, 4, 5, 6});
}

TEST(GreedyPick, TheCpuBackendPicksWhatItsLogitsSay) {
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
  expect_picks_match_logits(**a, **b, {1, 403, 1, 261, 378, 1});
}

}  // namespace
}  // namespace strata::worker_test
