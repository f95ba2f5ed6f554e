// The generation loop on the tiny stories model (../shared) with a fake
// detokenizer, and stop-string matching on its own.
#include <string>
#include <vector>

#include "coordinator/generation.h"
#include "worker/sampler.h"
#include "tests/engine/engine_test_util.h"

namespace strata::coordinator {
namespace {

using engine_test::exists;
using engine_test::load;
using engine_test::shared_model;

// Id i reads as "<i>"; `eog` ends a turn.
class FakeDetokenizer final : public Detokenizer {
 public:
  explicit FakeDetokenizer(int32_t eog = -1) : eog_(eog) {}
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string finish() override { return ""; }
  bool is_end_of_generation(int32_t id) const override { return id == eog_; }

 private:
  int32_t eog_;
};

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

TEST(StopMatcher, StopStringSpanningPiecesIsNeverEmitted) {
  StopMatcher m({"o wor"});
  std::string out = m.push("Hel");
  out += m.push("lo w");
  EXPECT_EQ(out, "Hell");  // "o w" might begin the stop string: held
  out += m.push("orld");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hell");
  EXPECT_EQ(m.push("more"), "");
}

TEST(StopMatcher, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"xyz", "\n\n"});
  EXPECT_EQ(m.push("abx"), "ab");
  EXPECT_EQ(m.push("y"), "");
  EXPECT_EQ(m.push("\n"), "xy");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "\n");
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "b");  // the one that stopped, not the first given
  // Two at one place: the first given.
  StopMatcher tie({"bc", "b", "xy"});
  EXPECT_EQ(tie.push("abcd"), "a");
  EXPECT_EQ(tie.matched(), "bc");
  // Across pieces; flushed text matches nothing.
  StopMatcher spans({"o wor"});
  spans.push("Hello w");
  spans.push("orld");
  EXPECT_EQ(spans.matched(), "o wor");
  StopMatcher none({"zz"});
  none.push("abc");
  none.flush();
  EXPECT_EQ(none.matched(), "");
}

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = shared_model("stories260K.gguf");
    if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
    auto l = load(path, 256);
    ASSERT_TRUE(l.ok()) << l.status();
    loaded_ = std::move(*l);
  }
  absl::StatusOr<GenerationResult> run(const GenerationParams& p,
                                       Detokenizer& d) {
    return generate(*loaded_.backend, 0, kPrompt, p, d, {});
  }
  engine_test::Loaded loaded_;
};

TEST_F(GenerationTest, GreedyEqualsLlamaCppAndLimitsAgree) {
  const std::vector<int32_t> expected = {432, 383, 286, 261, 376, 298, 315, 421,
                                         395, 317, 426, 338, 401, 396, 267, 337};
  GenerationParams greedy;
  greedy.max_tokens = 16;
  FakeDetokenizer d;
  auto g = run(greedy, d);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ids, expected);
  EXPECT_EQ(g->finish, FinishReason::kLength);
  GenerationParams k1 = greedy;
  k1.sampling.temperature = 1.0f;
  k1.sampling.top_k = 1;
  GenerationParams p0 = greedy;
  p0.sampling.temperature = 1.0f;
  p0.sampling.top_p = 1e-6f;
  for (const GenerationParams& p : {k1, p0}) {
    FakeDetokenizer d2;
    auto r = run(p, d2);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->ids, expected);
  }
}

TEST_F(GenerationTest, SeedsAtTemperatureOne) {
  GenerationParams p;
  p.max_tokens = 32;
  p.sampling.temperature = 1.0f;
  auto text = [&](uint64_t seed) {
    p.sampling.seed = seed;
    FakeDetokenizer d;
    return run(p, d)->text;
  };
  EXPECT_EQ(text(1), text(1));
  EXPECT_NE(text(1), text(2));
}

// A backend that hands every step to `inner` and records what it asked
// for.
class Recording final : public worker::Backend {
 public:
  explicit Recording(worker::Backend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  const arch::Hyperparameters& hyperparameters() const override {
    return inner_.hyperparameters();
  }
  worker::BlockRange range() const override { return inner_.range(); }
  int n_vocab() const override { return inner_.n_vocab(); }
  int max_batch() const override { return inner_.max_batch(); }
  absl::Status add_sequence(int seq, int n_ctx) override { return inner_.add_sequence(seq, n_ctx); }
  absl::Status remove_sequence(int seq) override { return inner_.remove_sequence(seq); }
  absl::StatusOr<int> sequence_length(int seq) const override { return inner_.sequence_length(seq); }
  absl::StatusOr<int> sequence_context(int seq) const override {
    return inner_.sequence_context(seq);
  }
  absl::Status truncate_sequence(int seq, int n) override { return inner_.truncate_sequence(seq, n); }
  absl::Status forward(const worker::ForwardRequest& request,
                       worker::ForwardResult* result) override {
    asked.push_back(request.logits);
    return inner_.forward(request, result);
  }
  std::vector<worker::Logits> asked;

 private:
  worker::Backend& inner_;
};

// The tokens a sampler of `p` draws from every step's whole logits row
// (the prompt in one step, then a step a token).
std::vector<int32_t> tokens_from_rows(worker::Backend& b, const GenerationParams& p) {
  EXPECT_TRUE(b.truncate_sequence(0, 0).ok());
  worker::Sampler sampler(p.sampling, b.n_vocab());
  for (int32_t id : kPrompt) sampler.accept(id);
  std::vector<int32_t> ids;
  worker::ForwardRequest req;
  req.tokens = kPrompt;
  worker::ForwardResult out;
  while (static_cast<int>(ids.size()) < p.max_tokens) {
    EXPECT_TRUE(b.forward(req, &out).ok());
    ids.push_back(sampler.sample(out.logits));
    sampler.accept(ids.back());
    req.tokens = std::span<const int32_t>(&ids.back(), 1);
  }
  return ids;
}

// Decode steps ask the backend for what the sampler reads (the greedy
// pick, the top-k candidates, or the row when there is no top-k) and draw
// the tokens that sampling every step's whole row draws.
TEST_F(GenerationTest, DecodeStepsAskForWhatTheSamplerReadsAndDrawTheSameTokens) {
  GenerationParams greedy;
  greedy.max_tokens = 12;
  GenerationParams top_k = greedy;
  top_k.sampling.temperature = 0.9f;
  top_k.sampling.top_k = 40;
  top_k.sampling.top_p = 0.9f;
  top_k.sampling.seed = 5;
  GenerationParams whole = top_k;
  whole.sampling.top_k = 0;
  // A logit bias (here banning the first two greedy tokens) takes the row.
  GenerationParams biased = greedy;
  biased.sampling.logit_bias = {{383, -100.0f}, {432, -100.0f}};
  GenerationParams biased_top_k = top_k;
  biased_top_k.sampling.logit_bias = biased.sampling.logit_bias;
  const worker::Logits kinds[] = {worker::Logits::kArgmax, worker::Logits::kTopK,
                                  worker::Logits::kLast, worker::Logits::kLast,
                                  worker::Logits::kLast};
  int i = 0;
  for (const GenerationParams& p : {greedy, top_k, whole, biased, biased_top_k}) {
    SCOPED_TRACE(i);
    const std::vector<int32_t> want = tokens_from_rows(*loaded_.backend, p);
    FakeDetokenizer d;
    Recording recording(*loaded_.backend);
    auto got = generate(recording, 0, kPrompt, p, d, {});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ids, want);
    ASSERT_FALSE(recording.asked.empty());
    EXPECT_EQ(recording.asked.back(), kinds[i]);  // the last decode step's
    ++i;
  }
}

// `strata run` has no server to check a bias's token ids: generate() does.
TEST_F(GenerationTest, LogitBiasPastTheVocabularyIsRefused) {
  GenerationParams p;
  p.max_tokens = 4;
  p.sampling.logit_bias = {{5, 1.0f}, {loaded_.backend->n_vocab(), -100.0f}};
  FakeDetokenizer d;
  auto r = run(p, d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("logit_bias: token id 512 is out of range [0, 512)"),
            std::string::npos)
      << r.status();
  GenerationParams banned = p;
  banned.sampling.logit_bias = {{432, -100.0f}};
  auto b = run(banned, d);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->ids[0], 432);  // the greedy first token, banned
}

TEST_F(GenerationTest, EndOfGenerationTokenStopsAndIsNotEmitted) {
  GenerationParams p;
  p.max_tokens = 16;
  FakeDetokenizer d(/*eog=*/261);  // the 4th greedy token
  auto r = run(p, d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(r->ids, (std::vector<int32_t>{432, 383, 286}));
  EXPECT_EQ(r->text, "<432><383><286>");
}

TEST_F(GenerationTest, StopStringAcrossTokens) {
  GenerationParams p;
  p.max_tokens = 16;
  p.stop = {"6><26"};  // spans "<286>" and "<261>"
  FakeDetokenizer d;
  std::string streamed;
  auto r = generate(*loaded_.backend, 0, kPrompt, p, d,
                    [&](std::string_view t) { streamed += t; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(r->text, "<432><383><28");
  EXPECT_EQ(streamed, r->text);
}

TEST(GenerationContext, FullContextEndsWithLengthAndLongPromptIsAnError) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto l = load(path, /*n_ctx=*/8);
  ASSERT_TRUE(l.ok());
  GenerationParams p;
  p.max_tokens = 100;
  FakeDetokenizer d;
  auto r = generate(*l->backend, 0, kPrompt, p, d, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->ids.size(), 4u);  // 5 prompt + 3 decoded fill 8; the 4th is sampled
  const std::vector<int32_t> long_prompt(9, 1);
  auto bad = generate(*l->backend, 0, long_prompt, p, d, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsOutOfRange(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("a prompt of 9 tokens after 0 positions exceeds the "
                                        "context of 8"),
            std::string::npos)
      << bad.status();
}

// A prompt longer than one chunk (max_batch rows) and than the context is
// refused before its first chunk runs: the sequence holds no position.
TEST(Generate, PromptOverTheContextIsRefusedBeforeAnyChunk) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto l = load(path, /*n_ctx=*/600);
  ASSERT_TRUE(l.ok());
  const int batch = l->backend->max_batch();
  ASSERT_LT(batch, 600) << "the test needs a prompt of more than one chunk";
  const std::vector<int32_t> prompt(601, 1);
  GenerationParams p;
  p.max_tokens = 1;
  FakeDetokenizer d;
  auto r = generate(*l->backend, 0, prompt, p, d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsOutOfRange(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("601 tokens after 0 positions exceeds the context of 600"),
            std::string::npos)
      << r.status();
  absl::StatusOr<int> length = l->backend->sequence_length(0);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(*length, 0);
  // A prompt that fits still runs.
  const std::vector<int32_t> fits(600, 1);
  p.max_tokens = 0;
  auto ok = generate(*l->backend, 0, fits, p, d, {});
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(Backend, RefusesBadTokensAndUnknownSequences) {
  const std::string path = shared_model("stories260K.gguf");
  if (!exists(path)) GTEST_SKIP() << path << " absent (../shared)";
  auto l = load(path, 16);
  ASSERT_TRUE(l.ok());
  worker::ForwardResult out;
  const std::vector<int32_t> bad = {1, 100000};
  worker::ForwardRequest req;
  req.tokens = bad;
  EXPECT_TRUE(absl::IsInvalidArgument(l->backend->forward(req, &out)));
  EXPECT_EQ(*l->backend->sequence_length(0), 0);  // nothing changed
  req.seq = 9;
  EXPECT_TRUE(absl::IsNotFound(l->backend->forward(req, &out)));
}

}  // namespace
}  // namespace strata::coordinator
