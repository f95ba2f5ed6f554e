// `strata tokenize` / `strata detokenize` end to end: the binary is run
// with its output, errors and exit status captured.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace strata::tokenizer {
namespace {

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q.push_back(c);
    }
  }
  return q + "'";
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("strata_tok_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // Runs `strata ARGS` with `input` on standard input.
  Result strata(const std::string& args, const std::string& input = "") {
    const std::string in = write("stdin", input);
    const std::string out = (dir_ / "stdout").string();
    const std::string err = (dir_ / "stderr").string();
    const std::string cmd = quote(STRATA_BINARY) + " " + args + " < " +
                            quote(in) + " > " + quote(out) + " 2> " +
                            quote(err);
    const int raw = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = testing::read_file(out);
    r.err = testing::read_file(err);
    return r;
  }

  std::string model_or_skip(const char* name) {
    const auto path = testing::models_dir() / name;
    if (!std::filesystem::exists(path)) return "";
    return path.string();
  }

  std::filesystem::path dir_;
};

std::string ids_line(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s + "\n";
}

TEST_F(CliTest, StdinIsReadRawAndBosFollowsTheMetadata) {
  const std::string model = model_or_skip("gemma-3-270m-q4_k_m.gguf");
  if (model.empty()) GTEST_SKIP() << "gemma-3-270m-q4_k_m.gguf not found";
  auto vocab = testing::load_vocabulary(model);
  ASSERT_TRUE(vocab.ok());
  auto tok = Tokenizer::create(*std::move(vocab));
  ASSERT_TRUE(tok.ok());
  const std::string text = "Hello\n\n  world\xE2\x82\n";
  const Result with_bos =
      strata("tokenize -m " + quote(model) + " --stdin", text);
  ASSERT_EQ(with_bos.status, 0) << with_bos.err;
  EXPECT_EQ(with_bos.out, ids_line((*tok)->encode(text).value()));
  EXPECT_EQ(with_bos.out.rfind("2 ", 0), 0u) << "Gemma adds BOS (id 2)";
  const Result no_bos =
      strata("tokenize -m " + quote(model) + " --stdin --no-bos", text);
  ASSERT_EQ(no_bos.status, 0) << no_bos.err;
  EXPECT_EQ(no_bos.out,
            ids_line((*tok)->encode(text, {.add_special = false}).value()));
}

TEST_F(CliTest, ParseSpecialAndPieces) {
  const std::string model = model_or_skip("SmolLM2-135M-Instruct.Q4_1.gguf");
  if (model.empty()) GTEST_SKIP() << "SmolLM2 not found";
  const Result plain =
      strata("tokenize -m " + quote(model) + " '<|im_start|>'");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out, "1\n");
  const Result special = strata("tokenize -m " + quote(model) +
                                " --parse-special '<|im_start|>hi'");
  ASSERT_EQ(special.status, 0) << special.err;
  EXPECT_EQ(special.out.rfind("1 ", 0), 0u) << special.out;
  const Result pieces =
      strata("tokenize -m " + quote(model) + " --pieces 'a b\n'");
  ASSERT_EQ(pieces.status, 0) << pieces.err;
  EXPECT_NE(pieces.out.find("\t b\n"), std::string::npos) << pieces.out;
  EXPECT_NE(pieces.out.find("\t\\n\n"), std::string::npos) << pieces.out;
}

TEST_F(CliTest, DetokenizePrintsTheText) {
  const std::string model = model_or_skip("SmolLM2-135M-Instruct.Q4_1.gguf");
  if (model.empty()) GTEST_SKIP() << "SmolLM2 not found";
  const Result ids = strata("tokenize -m " + quote(model) + " --stdin",
                            "Hello, world! 你好\n");
  ASSERT_EQ(ids.status, 0) << ids.err;
  std::string args = ids.out.substr(0, ids.out.size() - 1);
  const Result text = strata("detokenize -m " + quote(model) + " " + args);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out, "Hello, world! 你好\n");
  const Result bad = strata("detokenize -m " + quote(model) + " 5 999999");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("999999"), std::string::npos) << bad.err;
}

TEST_F(CliTest, BadTokenizerKeysExitOneNamingTheKey) {
  struct Bad {
    std::string key;
    std::vector<uint8_t> image;
  };
  std::vector<Bad> cases;
  {
    testing::GgufImage g;
    g.add_string("tokenizer.ggml.model", "llama");
    g.add_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
    g.add_f32s("tokenizer.ggml.scores", {0.0f});
    cases.push_back({"tokenizer.ggml.scores", g.bytes()});
  }
  {
    testing::GgufImage g;
    g.add_string("tokenizer.ggml.model", "llama");
    g.add_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
    g.add_string("tokenizer.ggml.eos_token_id", "3");
    cases.push_back({"tokenizer.ggml.eos_token_id", g.bytes()});
  }
  {
    testing::GgufImage g;
    g.add_string("tokenizer.ggml.model", "llama");
    g.add_i32s("tokenizer.ggml.tokens", {1, 2});
    cases.push_back({"tokenizer.ggml.tokens", g.bytes()});
  }
  for (const Bad& bad : cases) {
    const std::string path =
        write("bad.gguf", std::string(bad.image.begin(), bad.image.end()));
    const Result r = strata("tokenize -m " + quote(path) + " hello");
    EXPECT_EQ(r.status, 1) << bad.key;
    EXPECT_NE(r.err.find(bad.key), std::string::npos)
        << "stderr does not name " << bad.key << ": " << r.err;
  }
  const Result missing =
      strata("tokenize -m " + quote((dir_ / "nope").string()) + " hello");
  EXPECT_EQ(missing.status, 1);
  const Result usage = strata("tokenize -m x");
  EXPECT_EQ(usage.status, 2);
}

}  // namespace
}  // namespace strata::tokenizer
