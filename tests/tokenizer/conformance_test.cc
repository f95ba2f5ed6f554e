// llama.cpp's own tokenizer test vectors (../shared/conformance/tokenizer:
// vocab-only GGUFs, inputs separated by "\n__ggml_vocab_test__\n", one line
// of expected ids per input, tokenized with no BOS and no special parsing).
// The files are not part of the project: the test skips, saying so, when
// they are absent.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace strata::tokenizer {
namespace {

std::vector<std::string> split(const std::string& s, std::string_view sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t at = s.find(sep, begin);
    if (at == std::string::npos) {
      out.push_back(s.substr(begin));
      return out;
    }
    out.push_back(s.substr(begin, at - begin));
    begin = at + sep.size();
  }
}

std::filesystem::path vocab_path(const std::string& name) {
  return testing::shared_dir() / "conformance" / "tokenizer" /
         ("ggml-vocab-" + name + ".gguf");
}

class ConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceTest, IdsEqualLlamaCppVectors) {
  const std::filesystem::path gguf_path = vocab_path(GetParam());
  if (!std::filesystem::exists(gguf_path)) {
    GTEST_SKIP() << gguf_path << " is absent (the conformance vectors live "
                 << "in ../shared, outside the project)";
  }
  auto model = gguf::GgufModel::open(gguf_path.string());
  ASSERT_TRUE(model.ok()) << model.status();
  auto tok = Tokenizer::from_gguf((*model)->first());
  ASSERT_TRUE(tok.ok()) << tok.status();

  const std::vector<std::string> inputs =
      split(testing::read_file(gguf_path.string() + ".inp"),
            "\n__ggml_vocab_test__\n");
  const std::vector<std::string> outputs =
      split(testing::read_file(gguf_path.string() + ".out"), "\n");
  ASSERT_EQ(inputs.size(), outputs.size());
  int mismatches = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<TokenId> want;
    std::istringstream line(outputs[i]);
    for (TokenId id; line >> id;) want.push_back(id);
    auto got = (*tok)->encode(inputs[i], {.add_special = false});
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got != want && ++mismatches <= 5) {
      ADD_FAILURE() << "input " << i << " \"" << inputs[i] << "\"";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << inputs.size() << " inputs";
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, ConformanceTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2",
                                           "falcon", "deepseek-coder",
                                           "deepseek-llm", "mpt", "refact",
                                           "starcoder"),
                         testing::param_name);

// WordPiece (BERT) is not implemented: refused with a message naming the
// tokenizer model, never tokenized wrongly.
TEST(Conformance, WordPieceIsRefusedClearly) {
  const std::filesystem::path gguf_path = vocab_path("bert-bge");
  if (!std::filesystem::exists(gguf_path)) {
    GTEST_SKIP() << gguf_path << " is absent";
  }
  auto model = gguf::GgufModel::open(gguf_path.string());
  ASSERT_TRUE(model.ok()) << model.status();
  auto tok = Tokenizer::from_gguf((*model)->first());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.model"),
            std::string::npos)
      << tok.status();
}

}  // namespace
}  // namespace strata::tokenizer
