// ResultJoin (worker/result_join.h): whatever order the chain's answers and
// the last stage's direct results come in, the callback gets exactly one
// result per micro-batch: the direct one, or the chain's error or whole
// result, or the link's error for what is left.
#include "worker/result_join.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata::worker_test {
namespace {

v1::MicroBatchResult ack(uint64_t id) {
  v1::MicroBatchResult r;
  r.set_batch_id(id);
  r.set_delivered(true);
  return r;
}

v1::MicroBatchResult tokens(uint64_t id, int32_t token) {
  v1::MicroBatchResult r;
  r.set_batch_id(id);
  r.add_tokens()->set_id(token);
  return r;
}

v1::MicroBatchResult error(uint64_t id) {
  v1::MicroBatchResult r;
  r.set_batch_id(id);
  r.set_error_code(3);
  r.set_error_message("slices[0]: bad");
  return r;
}

TEST(ResultJoin, OneResultPerMicroBatchInEveryOrder) {
  std::vector<v1::MicroBatchResult> got;
  worker::ResultJoin join([&](v1::MicroBatchResult r) { got.push_back(std::move(r)); });
  for (uint64_t id = 1; id <= 6; ++id) join.sent(id);
  // 1: acknowledged, then its tokens. 2: tokens before the acknowledgement.
  EXPECT_TRUE(join.from_chain(ack(1)));
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(join.from_last_stage(tokens(1, 11)));
  EXPECT_TRUE(join.from_last_stage(tokens(2, 22)));
  EXPECT_TRUE(join.from_chain(ack(2)));
  // 3: an error of an earlier stage; 4: a whole result through the chain.
  EXPECT_TRUE(join.from_chain(error(3)));
  EXPECT_TRUE(join.from_chain(tokens(4, 44)));
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].tokens(0).id(), 11);
  EXPECT_EQ(got[1].tokens(0).id(), 22);
  EXPECT_EQ(got[2].error_code(), 3);
  EXPECT_EQ(got[3].tokens(0).id(), 44);
  // Not sent, or answered twice: refused, nothing delivered.
  EXPECT_FALSE(join.from_last_stage(tokens(9, 1)));
  EXPECT_FALSE(join.from_last_stage(tokens(1, 1)));
  EXPECT_FALSE(join.from_chain(ack(4)));
  EXPECT_EQ(got.size(), 4u);
  // 5 acknowledged and 6 not answered when the link breaks: both fail;
  // 7's tokens came first, so its failure is not delivered twice.
  join.sent(7);
  EXPECT_TRUE(join.from_last_stage(tokens(7, 77)));
  EXPECT_TRUE(join.from_chain(ack(5)));
  EXPECT_EQ(join.outstanding(), 2u);
  join.fail_all(14, "worker w1: gone");
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got[4].tokens(0).id(), 77);
  EXPECT_EQ(got[5].batch_id(), 5u);
  EXPECT_EQ(got[5].error_code(), 14);
  EXPECT_EQ(got[6].batch_id(), 6u);
  EXPECT_EQ(got[6].error_message(), "worker w1: gone");
  EXPECT_EQ(join.outstanding(), 0u);
}

}  // namespace
}  // namespace strata::worker_test
