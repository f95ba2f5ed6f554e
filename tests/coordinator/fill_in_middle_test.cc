// Fill-in-the-middle prompts (coordinator/fill_in_middle.h) over a
// hand-built vocabulary where every letter, digit, and each of ".- \n<>_()" is
// one token: the layout of llama.cpp's server's /infill written out piece by
// piece, its budgets, BOS, both orders and the refusals.
#include "coordinator/fill_in_middle.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/tokenizer/vocabulary.h"

namespace strata::coordinator {
namespace {

using tokenizer::TokenType;
using tokenizer::Vocabulary;

constexpr int32_t kNormal = static_cast<int32_t>(TokenType::kNormal);
constexpr int32_t kControl = static_cast<int32_t>(TokenType::kControl);

struct Fim {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  int32_t bos = -1, pre = -1, suf = -1, mid = -1, rep = -1, sep = -1;
  // One id per character (the vocabulary has no merges).
  std::vector<int32_t> ids(const std::string& text) const {
    std::vector<int32_t> out;
    for (char c : text) {
      out.push_back(tok->find_token(c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c)));
    }
    return out;
  }
};

// <unk> <s> </s>, one token per character, then the FIM tokens asked for
// (found by their text, as llama.cpp finds them when the file has no id).
Fim make(bool with_rep_sep, bool with_mid = true, bool add_bos = true) {
  Vocabulary v;
  v.model = tokenizer::TokenizerModel::kSentencePiece;
  v.add_space_prefix = false;
  v.add_bos = add_bos;
  auto add = [&v](std::string text, int32_t type) {
    v.tokens.push_back(std::move(text));
    v.types.push_back(type);
    v.scores.push_back(0);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  add("<unk>", static_cast<int32_t>(TokenType::kUnknown));
  Fim f;
  f.bos = add("<s>", kControl);
  add("</s>", kControl);
  const std::string chars = "abcdefghijklmnopqrstuvwxyz0123456789.- \n<>_()";
  for (char c : chars) add(std::string(c == ' ' ? "\xE2\x96\x81" : std::string(1, c)), kNormal);
  f.pre = add("<fim_prefix>", kControl);
  f.suf = add("<fim_suffix>", kControl);
  if (with_mid) f.mid = add("<fim_middle>", kControl);
  if (with_rep_sep) {
    f.rep = add("<|repo_name|>", kControl);
    f.sep = add("<|file_sep|>", kControl);
  }
  auto tok = tokenizer::Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (tok.ok()) f.tok = *std::move(tok);
  return f;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int32_t> layout(const Fim& f, const v1::FillInMiddle& in, bool add_bos = true,
                            FimBudget budget = {.n_ctx = 32768, .max_tokens = 0}) {
  auto ids = fill_in_middle_prompt(*f.tok, in, add_bos, budget);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(FillInMiddle, TheModelsTokensAreFoundByTheirText) {
  const Fim f = make(true);
  ASSERT_NE(f.tok, nullptr);
  EXPECT_EQ(f.tok->special().fim_pre, f.pre);
  EXPECT_EQ(f.tok->special().fim_suf, f.suf);
  EXPECT_EQ(f.tok->special().fim_mid, f.mid);
  EXPECT_EQ(f.tok->special().fim_rep, f.rep);
  EXPECT_EQ(f.tok->special().fim_sep, f.sep);
  // The character vocabulary encodes text one id per character.
  EXPECT_EQ(*f.tok->encode("ab\n", {.add_special = false}), f.ids("ab\n"));
}

TEST(FillInMiddle, RepoLevelLayoutWithFilesThenBosThenPrefixSuffixMiddle) {
  const Fim f = make(true);
  v1::FillInMiddle in;
  in.set_prefix("def f");
  in.set_suffix("\nreturn x");
  in.set_prompt("(a");
  auto* a = in.add_extra();
  a->set_filename("util.py");
  a->set_text("x - 1");
  in.add_extra()->set_text("y");  // no filename: "tmp"
  const std::vector<int32_t> want =
      cat({{f.rep}, f.ids("myproject\n"),
           {f.sep}, f.ids("util.py\n"), f.ids("x - 1"),
           {f.sep}, f.ids("tmp\n"), f.ids("y"),
           {f.sep}, f.ids("filename\n"),
           {f.bos, f.pre}, f.ids("def f"), f.ids("(a"),
           {f.suf}, f.ids("\nreturn x"), {f.mid}});
  EXPECT_EQ(layout(f, in), want);
  // add_special false: no BOS; suffix first (SPM): suffix before prefix.
  in.set_suffix_first(true);
  const std::vector<int32_t> spm =
      cat({{f.rep}, f.ids("myproject\n"),
           {f.sep}, f.ids("util.py\n"), f.ids("x - 1"),
           {f.sep}, f.ids("tmp\n"), f.ids("y"),
           {f.sep}, f.ids("filename\n"),
           {f.suf}, f.ids("\nreturn x"),
           {f.pre}, f.ids("def f"), f.ids("(a"), {f.mid}});
  EXPECT_EQ(layout(f, in, /*add_bos=*/false), spm);
}

TEST(FillInMiddle, WithoutRepoTokensFilesAreSnippetsAndNothingElseComes) {
  const Fim f = make(false);
  v1::FillInMiddle in;
  in.set_prefix("a");
  in.set_suffix("b");
  EXPECT_EQ(layout(f, in), cat({{f.bos, f.pre}, f.ids("a"), {f.suf}, f.ids("b"), {f.mid}}));
  in.add_extra()->set_text("c");
  EXPECT_EQ(layout(f, in), cat({f.ids("\n\n--- snippet ---\n\n"), f.ids("c"),
                                {f.bos, f.pre}, f.ids("a"), {f.suf}, f.ids("b"), {f.mid}}));
}

TEST(FillInMiddle, SpecialTokenTextIsReadOnlyInThePrompt) {
  const Fim f = make(false);
  v1::FillInMiddle in;
  in.set_prefix("<fim_middle>");  // text: 12 characters
  in.set_prompt("<fim_middle>");  // the token
  const std::vector<int32_t> ids = layout(f, in, false);
  ASSERT_EQ(ids.size(), 1u + 12u + 1u + 1u + 1u);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.begin() + 13), f.ids("<fim_middle>"));
  EXPECT_EQ(ids[13], f.mid);
  EXPECT_EQ(ids[14], f.suf);
  EXPECT_EQ(ids[15], f.mid);
}

TEST(FillInMiddle, BudgetsKeepThePrefixsEndTheSuffixsStartAndTheLastOfTheFiles) {
  const Fim f = make(true);
  v1::FillInMiddle in;
  // 2000 prefix tokens, the last 1536 kept; 600 suffix tokens, the first
  // 512 - 2 - 10 (the prompt's) kept.
  std::string prefix, suffix;
  for (int i = 0; i < 2000; ++i) prefix += static_cast<char>('a' + i % 26);
  for (int i = 0; i < 600; ++i) suffix += static_cast<char>('0' + i % 10);
  in.set_prefix(prefix);
  in.set_suffix(suffix);
  in.set_prompt("0123456789");
  in.add_extra()->set_text(std::string(500, 'z'));
  const std::vector<int32_t> all_extra =
      cat({{f.rep}, f.ids("myproject\n"), {f.sep}, f.ids("tmp\n"), f.ids(std::string(500, 'z')),
           {f.sep}, f.ids("filename\n")});
  ASSERT_EQ(all_extra.size(), 526u);
  auto last = [](const std::vector<int32_t>& v, size_t n) {
    return std::vector<int32_t>(v.end() - static_cast<std::ptrdiff_t>(n), v.end());
  };
  // A context of 4096: the files' budget 4096 - 2048 + 2 holds them all, and
  // the prompt (1 + 3 + 10 + 526 + 1536 + 500 = 2576) leaves 100 tokens.
  EXPECT_EQ(layout(f, in, true, {.n_ctx = 4096, .max_tokens = 100}),
            cat({all_extra, {f.bos, f.pre}, f.ids(prefix.substr(2000 - 1536)), f.ids("0123456789"),
                 {f.suf}, f.ids(suffix.substr(0, 500)), {f.mid}}));
  // 2348: the files' budget is 302 tokens, and 104 more go so that 100 are
  // left for max_tokens (2348 - 100 = 1 + 3 + 10 + 198 + 1536 + 500).
  EXPECT_EQ(layout(f, in, true, {.n_ctx = 2348, .max_tokens = 100}),
            cat({last(all_extra, 198), {f.bos, f.pre}, f.ids(prefix.substr(2000 - 1536)),
                 f.ids("0123456789"), {f.suf}, f.ids(suffix.substr(0, 500)), {f.mid}}));
  // 2048 and no max_tokens (1 kept): 95 over, the files' 2 tokens go, then 93 of
  // the prefix's; a 600-token prompt leaves the suffix nothing.
  in.set_prompt(std::string(600, '1'));
  EXPECT_EQ(layout(f, in, true, {.n_ctx = 2048, .max_tokens = 0}),
            cat({{f.bos, f.pre}, f.ids(prefix.substr(2000 - 1443)), f.ids(std::string(600, '1')),
                 {f.suf}, {f.mid}}));
  // 300 and 50: no files, no prefix, the suffix's first 236 (300 - 50 =
  // 1 + 3 + 10 + 236).
  in.set_prompt("0123456789");
  EXPECT_EQ(layout(f, in, true, {.n_ctx = 300, .max_tokens = 50}),
            cat({{f.bos, f.pre}, f.ids("0123456789"), {f.suf}, f.ids(suffix.substr(0, 236)),
                 {f.mid}}));
}

TEST(FillInMiddle, AModelWithoutFimTokensIsRefusedNamingThem) {
  const Fim f = make(false, /*with_mid=*/false);
  v1::FillInMiddle in;
  in.set_prefix("a");
  auto ids = fill_in_middle_prompt(*f.tok, in, true, {.n_ctx = 4096});
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ids.status().message(),
            "infill: the model has no fill-in-the-middle tokens (missing: FIM_MID)");
  EXPECT_TRUE(check_fill_in_middle(*make(true).tok).ok());
}

}  // namespace
}  // namespace strata::coordinator
