// Constrained sampling on the last stage (stories260K from ../shared, split
// in two): a grammar shapes the sampled tokens, greedy and at temperature
// 1.5 over many seeds (checked by decoding the ids and matching a regex,
// not with the matcher); a bad grammar fails only its own sequence; no
// grammar leaves the greedy ids as they were.
#include <regex>

#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/worker/worker_test_util.h"

namespace strata::worker_test {
namespace {

#define SKIP_WITHOUT_STORIES() \
  if (!exists(stories_path())) \
  GTEST_SKIP() << stories_path() << " absent (../shared/models)"

// Lower-case words separated by single spaces, then a period.
constexpr char kWords[] = R"(root ::= word (" " word){0,7} "."
word ::= [a-z]{1,12}
)";

// Runs sequence `seq` with `grammar` until end of generation or n tokens;
// the ids sampled (an error token ends it, reported in *error).
std::vector<int32_t> run_grammar(std::span<const std::unique_ptr<worker::Stage>> stages,
                                 uint64_t seq, const std::string& grammar, float temperature,
                                 uint64_t seed, int n, const tokenizer::Tokenizer& tok,
                                 std::string* error) {
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  v1::SequenceSlice first = slice(seq, 0, stories_prompt());
  first.set_grammar(grammar);
  first.mutable_sampling()->set_temperature(temperature);
  first.mutable_sampling()->set_seed(seed);
  *batch.add_slices() = first;
  std::vector<int32_t> ids;
  int pos = static_cast<int>(stories_prompt().size());
  for (int i = 0; i < n; ++i) {
    auto result = run_chain(stages, batch);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) break;
    const v1::SampledToken& t = result->tokens(0);
    if (t.error_code() != 0) {
      *error = t.error_message();
      break;
    }
    if (tok.is_end_of_generation(t.id())) break;
    ids.push_back(t.id());
    batch.clear_slices();
    *batch.add_slices() = slice(seq, pos++, {t.id()});
  }
  const uint64_t free_ids[] = {seq};
  stages[0]->free_sequences(free_ids, 1);
  stages[1]->free_sequences(free_ids, 1);
  return ids;
}

TEST(StageGrammar, SampledTextFollowsTheGrammar) {
  SKIP_WITHOUT_STORIES();
  auto model = gguf::GgufModel::open(stories_path());
  ASSERT_TRUE(model.ok());
  auto tok = tokenizer::Tokenizer::from_gguf((*model)->first());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto stages = load_split(stories_path(), {2});
  ASSERT_EQ(stages.size(), 2u);
  const std::regex words("[a-z]{1,12}( [a-z]{1,12}){0,7}\\.");
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const float temperature = seed == 0 ? 0.0f : 1.5f;
    std::string error;
    std::vector<int32_t> ids = run_grammar(stages, 5, kWords, temperature, seed, 120, **tok, &error);
    ASSERT_EQ(error, "") << "seed " << seed;
    auto text = (*tok)->decode(ids);
    ASSERT_TRUE(text.ok());
    EXPECT_TRUE(std::regex_match(*text, words)) << "seed " << seed << ": '" << *text << "'";
  }
}

TEST(StageGrammar, BadGrammarFailsOnlyItsSequence) {
  SKIP_WITHOUT_STORIES();
  const std::vector<int32_t> expected = whole_model_greedy(stories_path(), stories_prompt(), 1);
  auto stages = load_split(stories_path(), {2});
  ASSERT_EQ(stages.size(), 2u);
  v1::MicroBatch batch;
  batch.set_shard_id(kShardId);
  *batch.add_slices() = slice(1, 0, stories_prompt());
  batch.mutable_slices(0)->set_grammar("root ::= (\"a\"");
  *batch.add_slices() = slice(2, 0, stories_prompt());
  *batch.add_slices() = slice(3, 0, stories_prompt());
  batch.mutable_slices(2)->set_grammar(std::string(64 * 1024 + 1, ' '));
  auto result = run_chain(stages, batch);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens_size(), 3);
  EXPECT_EQ(result->tokens(0).error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(result->tokens(0).id(), -1);
  EXPECT_EQ(result->tokens(0).error_message(),
            "worker s1: sequence 1: slices[0].grammar: line 1 col 10: expected ')'");
  EXPECT_EQ(result->tokens(1).error_code(), 0);
  EXPECT_EQ(result->tokens(1).id(), expected[0]);
  EXPECT_EQ(result->tokens(2).error_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(result->tokens(2).error_message(),
            "worker s1: sequence 3: slices[2].grammar: 65537 bytes exceed 65536");
}

TEST(StageGrammar, NoGrammarLeavesGreedyIdsAlone) {
  SKIP_WITHOUT_STORIES();
  const std::vector<int32_t> expected = whole_model_greedy(stories_path(), stories_prompt(), 12);
  auto stages = load_split(stories_path(), {2});
  EXPECT_EQ(chain_greedy(stages, stories_prompt(), 12), expected);
}

}  // namespace
}  // namespace strata::worker_test
