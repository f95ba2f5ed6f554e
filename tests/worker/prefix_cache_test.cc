// Prefix caching on the worker side: the block store alone, and stages on
// stories260K that restore saved blocks and then compute exactly what a
// full prefill computes (bit-identical logprobs, the same greedy ids, the
// sampler's penalties counting the restored tokens); hostile prefix fields
// are INVALID_ARGUMENT naming the field, and the stage goes on.
#include <cstring>

#include "tests/worker/worker_test_util.h"
#include "worker/fake_backend.h"
#include "worker/prefix_store.h"

namespace strata::worker_test {
namespace {

#define SKIP_WITHOUT_STORIES() \
  if (!exists(stories_path())) \
  GTEST_SKIP() << stories_path() << " absent (../shared/models)"

TEST(PrefixStore, SlotsHoldKeyTokensAndRows) {
  worker::PrefixStore store(/*capacity=*/3, /*block_tokens=*/4,
                            /*row_bytes=*/8);
  EXPECT_EQ(store.block_bytes(), 32);
  EXPECT_EQ(store.allocated_bytes(), 0);  // allocated when first written
  EXPECT_EQ(store.check_restore(0, 7, "f").code(),
            absl::StatusCode::kInvalidArgument);
  uint8_t* kv = store.begin_save(1);
  for (int i = 0; i < 32; ++i) kv[i] = static_cast<uint8_t>(i);
  const int32_t tokens[] = {5, 6, 7, 8};
  store.commit_save(1, 0xabc, tokens);
  EXPECT_TRUE(store.check_restore(1, 0xabc, "f").ok());
  EXPECT_EQ(store.kv(1)[31], 31);
  EXPECT_EQ(
      std::vector<int32_t>(store.tokens(1).begin(), store.tokens(1).end()),
      std::vector<int32_t>({5, 6, 7, 8}));
  EXPECT_EQ(store.full_slots(), 1);
  EXPECT_EQ(store.allocated_bytes(), 32);
  // Another key in the slot, an id outside, a cleared slot: refused.
  absl::Status st =
      store.check_restore(1, 0xabd, "slices[0].restore_blocks[0]");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(
                "slices[0].restore_blocks[0]: block 1 holds another prefix"),
            std::string::npos)
      << st;
  st = store.check_id(3, "save_blocks[2]");
  EXPECT_NE(st.message().find("save_blocks[2]: block 3 is outside"),
            std::string::npos)
      << st;
  store.clear(1);
  EXPECT_EQ(store.check_restore(1, 0xabc, "f").code(),
            absl::StatusCode::kInvalidArgument);
  worker::PrefixStore none(0, 16, 8);
  st = none.check_id(0, "save_blocks[0]");
  EXPECT_NE(st.message().find("no prefix cache"), std::string::npos) << st;
}

// The fake backend's "KV" (each position's state) copies out and back in:
// a sequence restored from another's rows continues exactly like it.
TEST(PrefixBackend, FakeBackendRowsRoundTrip) {
  worker::FakeBackendOptions o;
  worker::FakeBackend backend(o);
  ASSERT_TRUE(backend.add_sequence(0, 32).ok());
  ASSERT_TRUE(backend.add_sequence(1, 32).ok());
  const int32_t prompt[] = {1, 2, 3, 4, 5, 6};
  worker::ForwardResult out;
  ASSERT_TRUE(worker::prefill_in_chunks(backend, 0, prompt, &out).ok());
  const std::vector<float> want(out.logits.begin(), out.logits.end());
  std::vector<uint8_t> rows(4 * backend.kv_row_bytes());
  ASSERT_TRUE(backend.read_kv(0, 0, 4, rows.data()).ok());
  ASSERT_TRUE(backend.append_kv(1, 4, rows.data()).ok());
  EXPECT_EQ(*backend.sequence_length(1), 4);
  ASSERT_TRUE(
      worker::prefill_in_chunks(backend, 1, std::span<const int32_t>(prompt + 4, 2), &out).ok());
  EXPECT_EQ(std::vector<float>(out.logits.begin(), out.logits.end()), want);
  EXPECT_EQ(backend.read_kv(0, 4, 3, rows.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(backend.read_kv(7, 0, 1, rows.data()).code(), absl::StatusCode::kNotFound);
  std::vector<uint8_t> big(40 * backend.kv_row_bytes());
  EXPECT_EQ(backend.append_kv(1, 30, big.data()).code(), absl::StatusCode::kOutOfRange);
}

constexpr int kBlock = 4;

// stories260K split in two, each stage with a block store of 8 slots of 4.
std::vector<std::unique_ptr<worker::Stage>> load_cached_split(int blocks = 8) {
  const std::string path = stories_path();
  const int n_layer = model_layers(path);
  std::vector<std::unique_ptr<worker::Stage>> stages;
  const int bounds[] = {0, 2, n_layer};
  for (int i = 0; i < 2; ++i) {
    v1::LoadShardRequest r =
        shard_request(path, bounds[i], bounds[i + 1], n_layer);
    r.set_prefix_cache_blocks(blocks);
    r.set_prefix_block_tokens(kBlock);
    auto stage = worker::load_stage(r, 1, {"s" + std::to_string(i)});
    EXPECT_TRUE(stage.ok()) << stage.status();
    if (!stage.ok()) return {};
    EXPECT_EQ((*stage)->shard().prefix_cache_blocks(), blocks);
    stages.push_back(std::move(*stage));
  }
  return stages;
}

// A 14-token stories prompt.
std::vector<int32_t> long_prompt() {
  std::vector<int32_t> p = stories_prompt();
  for (int32_t t : {263, 281, 311, 262, 400, 290, 335, 284, 271})
    p.push_back(t);
  return p;
}

struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // of each id, then its top 5
};

// Generates n tokens for `seq`: its first slice is `first`; every result
// carries logprobs and the top 5 (from the raw logits: equal logprobs,
// equal logits rows up to the log-sum).
Generated generate(std::span<const std::unique_ptr<worker::Stage>> stages,
                   v1::SequenceSlice first, int n, uint64_t batch_id = 100) {
  Generated g;
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  int pos = first.start_pos() + first.tokens_size();
  v1::SequenceSlice s = std::move(first);
  for (int i = 0; i < n; ++i) {
    s.set_logprobs(true);
    s.set_top_logprobs(5);
    batch.set_batch_id(batch_id + i);
    *batch.add_slices() = s;
    auto result = run_chain(stages, batch);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok() || result->tokens_size() != 1) return g;
    const v1::SampledToken& t = result->tokens(0);
    g.ids.push_back(t.id());
    g.logprobs.push_back(t.logprob());
    for (const v1::TokenLogprob& top : t.top())
      g.logprobs.push_back(top.logprob());
    batch.clear_slices();
    s = slice(s.seq_id(), pos++, {t.id()});
  }
  return g;
}

void add_saves(v1::SequenceSlice& s, std::span<const uint32_t> slots,
               std::span<const uint64_t> keys, int first_block = 0) {
  for (size_t i = 0; i < slots.size(); ++i) {
    s.add_save_blocks(slots[i]);
    s.add_save_keys(keys[i]);
    s.add_save_block_index(first_block + static_cast<int>(i));
  }
}

TEST(PrefixStage, RestoredBlocksGiveBitIdenticalLogprobsAndIds) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_cached_split();
  ASSERT_EQ(stages.size(), 2u);
  const std::vector<int32_t> prompt = long_prompt();  // 14: 3 full blocks
  const uint32_t slots[] = {5, 2, 7};
  const uint64_t keys[] = {0x11, 0x22, 0x33};
  // Sequence 1: the whole prompt, saving its 3 full blocks.
  v1::SequenceSlice s1 = slice(1, 0, prompt);
  add_saves(s1, slots, keys);
  const Generated full = generate(stages, s1, 10);
  ASSERT_EQ(full.ids.size(), 10u);
  EXPECT_EQ(full.ids, whole_model_greedy(stories_path(), prompt, 10));
  // Sequence 2: the 3 blocks restored, 2 rows prefilled.
  v1::SequenceSlice s2 = slice(2, 12, {prompt[12], prompt[13]});
  for (int b = 0; b < 3; ++b) {
    s2.add_restore_blocks(slots[b]);
    s2.add_restore_keys(keys[b]);
  }
  const Generated cached = generate(stages, s2, 10, 200);
  EXPECT_EQ(cached.ids, full.ids);
  EXPECT_EQ(cached.logprobs, full.logprobs);  // exact float equality
  // Sequence 1 again, restarted from 2 of the blocks (a partial match).
  v1::SequenceSlice s3 =
      slice(1, 8, std::vector<int32_t>(prompt.begin() + 8, prompt.end()));
  for (int b = 0; b < 2; ++b) {
    s3.add_restore_blocks(slots[b]);
    s3.add_restore_keys(keys[b]);
  }
  const Generated partial = generate(stages, s3, 10, 300);
  EXPECT_EQ(partial.logprobs, full.logprobs);
}

TEST(PrefixStage, SamplerPenaltiesCountTheRestoredTokens) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_cached_split();
  ASSERT_EQ(stages.size(), 2u);
  const std::vector<int32_t> prompt = long_prompt();
  auto with_penalty = [](v1::SequenceSlice s) {
    s.mutable_sampling()->set_repeat_penalty(1.5f);
    s.mutable_sampling()->set_frequency_penalty(0.5f);
    s.mutable_sampling()->set_repeat_last_n(64);
    return s;
  };
  const uint32_t slots[] = {0, 1, 2};
  const uint64_t keys[] = {1, 2, 3};
  v1::SequenceSlice s1 = with_penalty(slice(1, 0, prompt));
  add_saves(s1, slots, keys);
  const Generated full = generate(stages, s1, 12);
  v1::SequenceSlice s2 = with_penalty(slice(2, 12, {prompt[12], prompt[13]}));
  for (int b = 0; b < 3; ++b) {
    s2.add_restore_blocks(slots[b]);
    s2.add_restore_keys(keys[b]);
  }
  const Generated cached = generate(stages, s2, 12, 200);
  EXPECT_EQ(cached.ids, full.ids);
  EXPECT_EQ(cached.logprobs, full.logprobs);
}

// Saving blocks completed across chunks and during decode-free chunks: a
// block cut by a chunk boundary is saved by the chunk that completes it.
TEST(PrefixStage, BlocksSavedAcrossChunksRestoreExactly) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_cached_split();
  ASSERT_EQ(stages.size(), 2u);
  const std::vector<int32_t> prompt = long_prompt();
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  b.set_batch_id(1);
  // Rows 0..5 (block 0 complete), then 6..13 (blocks 1, 2).
  v1::SequenceSlice c1 = slice(
      1, 0, std::vector<int32_t>(prompt.begin(), prompt.begin() + 6), false);
  const uint32_t s0[] = {3};
  const uint64_t k0[] = {0xa};
  add_saves(c1, s0, k0);
  *b.add_slices() = c1;
  ASSERT_TRUE(run_chain(stages, b).ok());
  v1::SequenceSlice c2 =
      slice(1, 6, std::vector<int32_t>(prompt.begin() + 6, prompt.end()));
  const uint32_t s12[] = {4, 6};
  const uint64_t k12[] = {0xb, 0xc};
  add_saves(c2, s12, k12, /*first_block=*/1);
  const Generated full = generate(stages, c2, 6, 10);
  v1::SequenceSlice r = slice(2, 12, {prompt[12], prompt[13]});
  for (auto [slot, key] : {std::pair{3u, 0xaull}, {4u, 0xbull}, {6u, 0xcull}}) {
    r.add_restore_blocks(slot);
    r.add_restore_keys(key);
  }
  EXPECT_EQ(generate(stages, r, 6, 20).logprobs, full.logprobs);
}

class PrefixStageChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(stories_path())) GTEST_SKIP() << stories_path() << " absent";
    stages_ = load_cached_split(/*blocks=*/4);
    ASSERT_EQ(stages_.size(), 2u);
    v1::SequenceSlice s = slice(1, 0, long_prompt());
    const uint32_t slots[] = {0};
    const uint64_t keys[] = {0x5};
    add_saves(s, slots, keys);
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    *b.add_slices() = s;
    ASSERT_TRUE(run_chain(stages_, b).ok());
  }
  // `s` alone on the first stage fails with INVALID_ARGUMENT naming
  // `field`; nothing changed (sequence 1 continues at 14).
  void expect_rejected(const v1::SequenceSlice& s, const std::string& field) {
    v1::MicroBatch b;
    b.set_shard_id(kShardId);
    *b.add_slices() = s;
    v1::MicroBatch next;
    v1::MicroBatchResult r;
    const int live = stages_[0]->live_sequences();
    absl::Status st = stages_[0]->run(b, &next, &r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(field), std::string::npos)
        << "expected \"" << field << "\" in: " << st.message();
    EXPECT_EQ(stages_[0]->live_sequences(), live);
  }
  std::vector<std::unique_ptr<worker::Stage>> stages_;
};

TEST_F(PrefixStageChecks, HostileRestoreAndSaveFieldsAreRefused) {
  v1::SequenceSlice s = slice(2, 4, {1});
  s.add_restore_blocks(99);
  s.add_restore_keys(0x5);
  expect_rejected(s, "slices[0].restore_blocks[0]: block 99 is outside");
  s.set_restore_blocks(0, 0);
  s.set_restore_keys(0, 0x6);
  expect_rejected(s,
                  "slices[0].restore_blocks[0]: block 0 holds another prefix");
  s.set_restore_blocks(0, 1);
  expect_rejected(s, "slices[0].restore_blocks[0]: block 1 is empty");
  s.set_restore_blocks(0, 0);
  s.set_restore_keys(0, 0x5);
  s.set_start_pos(3);
  expect_rejected(
      s, "slices[0].start_pos: 3, but 1 restored blocks of 4 tokens end at 4");
  s.clear_restore_keys();
  s.set_start_pos(4);
  expect_rejected(s, "slices[0].restore_keys");
  v1::SequenceSlice t = slice(1, 14, {1});
  t.add_save_blocks(1);
  t.add_save_keys(9);
  t.add_save_block_index(3);  // rows 12..15, but the sequence holds 15
  expect_rejected(t, "slices[0].save_block_index[0]: block 3 is not within");
  t.set_save_block_index(0, -1);
  expect_rejected(t, "slices[0].save_block_index[0]");
  t.set_save_block_index(0, 1);
  t.set_save_blocks(0, 1u << 31);
  expect_rejected(t, "slices[0].save_blocks[0]: block 2147483648 is outside");
  t.clear_save_keys();
  expect_rejected(t, "slices[0].save_keys");
  // Still works: sequence 1 goes on at 14, and block 0 restores.
  v1::SequenceSlice ok = slice(1, 14, {1});
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  *b.add_slices() = ok;
  ASSERT_TRUE(run_chain(stages_, b).ok());
  v1::SequenceSlice r = slice(2, 4, {1});
  r.add_restore_blocks(0);
  r.add_restore_keys(0x5);
  b.clear_slices();
  *b.add_slices() = r;
  ASSERT_TRUE(run_chain(stages_, b).ok());
}

TEST_F(PrefixStageChecks, AFailedMicroBatchEmptiesTheSlotsItWouldSave) {
  // A bad token in slice 1 fails the batch; slot 0 (named by slice 0's
  // save) must not keep its old block under any key.
  v1::SequenceSlice a = slice(3, 0, long_prompt());
  const uint32_t slots[] = {0};
  const uint64_t keys[] = {0x77};
  add_saves(a, slots, keys);
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  *b.add_slices() = a;
  *b.add_slices() = slice(4, 0, {100000});
  v1::MicroBatch next;
  v1::MicroBatchResult r;
  EXPECT_FALSE(stages_[0]->run(b, &next, &r).ok());
  v1::SequenceSlice s = slice(2, 4, {1});
  s.add_restore_blocks(0);
  s.add_restore_keys(0x5);
  expect_rejected(s, "block 0 is empty");
}

TEST(PrefixStage, AShardWithoutAStoreRefusesPrefixFields) {
  SKIP_WITHOUT_STORIES();
  auto stages = load_split(stories_path(), {2});
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0]->shard().prefix_cache_blocks(), 0);
  v1::SequenceSlice s = slice(1, 4, {1});
  s.add_restore_blocks(0);
  s.add_restore_keys(1);
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  *b.add_slices() = s;
  v1::MicroBatch next;
  v1::MicroBatchResult r;
  absl::Status st = stages[0]->run(b, &next, &r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(
                "slices[0].restore_blocks: this shard has no prefix cache"),
            std::string::npos)
      << st;
}

TEST(PrefixStage, LoadShardChecksThePrefixFields) {
  SKIP_WITHOUT_STORIES();
  const int n = model_layers(stories_path());
  v1::LoadShardRequest r = shard_request(stories_path(), 0, n, n);
  r.set_prefix_cache_blocks(-1);
  auto st = worker::load_stage(r, 1, {"s"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("prefix_cache_blocks"),
            std::string::npos);
  r.set_prefix_cache_blocks(4);
  r.set_prefix_block_tokens(0);
  st = worker::load_stage(r, 1, {"s"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("prefix_block_tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::worker_test
