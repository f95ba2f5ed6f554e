// Pre-tokenizers: known splits, the hand-written GPT-2 and Llama-3 splitters
// against their regexes run through the regex engine, and the regex
// engine's llama.cpp conventions (collapsed categories, ASCII-only \s).
#include "model/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/regex_split.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

// The pieces of `text` as UTF-8 strings (before the byte alphabet).
std::vector<std::string> pieces(const PreTokenizer& pre,
                                std::string_view text) {
  const std::vector<uint32_t> cps = unicode::decode_lenient(text);
  auto lengths = pre.split_codepoints(cps);
  EXPECT_TRUE(lengths.ok()) << lengths.status();
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t len : *lengths) {
    std::string s;
    for (size_t i = begin; i < begin + len; ++i) {
      unicode::append_utf8(cps[i], &s);
    }
    begin += len;
    out.push_back(std::move(s));
  }
  return out;
}

std::unique_ptr<PreTokenizer> make(std::string_view name) {
  auto pre = PreTokenizer::create(name);
  EXPECT_TRUE(pre.ok()) << pre.status();
  return pre.ok() ? *std::move(pre) : nullptr;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Splits) {
  auto pre = make("gpt-2");
  EXPECT_EQ(pieces(*pre, "Hello world's  end"),
            (Pieces{"Hello", " world", "'s", " ", " end"}));
  EXPECT_EQ(pieces(*pre, "a  \n\tb"), (Pieces{"a", "  \n", "\t", "b"}));
  EXPECT_EQ(pieces(*pre, "x=1234!!"), (Pieces{"x", "=", "1234", "!!"}));
  EXPECT_EQ(pieces(*pre, "trailing   "), (Pieces{"trailing", "   "}));
  EXPECT_EQ(pieces(*pre, "IT'S"), (Pieces{"IT", "'", "S"}));
}

TEST(PreTokenizer, Llama3Splits) {
  auto pre = make("llama-bpe");
  EXPECT_EQ(pieces(*pre, "Hello world's"), (Pieces{"Hello", " world", "'s"}));
  EXPECT_EQ(pieces(*pre, "IT'S 1234567"),
            (Pieces{"IT", "'S", " ", "123", "456", "7"}));
  EXPECT_EQ(pieces(*pre, "a\n\n  b"), (Pieces{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(pieces(*pre, "(x)\n"), (Pieces{"(x", ")\n"}));
  EXPECT_TRUE(pre->ignore_merges());
  EXPECT_TRUE(pre->adds_bos_by_default());
}

TEST(PreTokenizer, SmolLmCutsDigitsOneByOne) {
  auto pre = make("smollm");
  EXPECT_EQ(pieces(*pre, "x 2024"), (Pieces{"x", " ", "2", "0", "2", "4"}));
}

TEST(PreTokenizer, Qwen2SplitsOnCollapsedCategories) {
  auto pre = make("qwen2");
  EXPECT_EQ(pieces(*pre, "你好 world 12"),
            (Pieces{"你好", " world", " ", "1", "2"}));
  // U+3000 is whitespace for \s through the collapsed text.
  EXPECT_EQ(pieces(*pre, "a\u3000\u3000b"), (Pieces{"a", "\u3000", "\u3000b"}));
}

TEST(PreTokenizer, WordsUseTheByteAlphabet) {
  auto pre = make("gpt-2");
  auto words = pre->split_words("a b\n");
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(*words, (Pieces{"a",
                            "\xC4\xA0"
                            "b",
                            "\xC4\x8A"}));
  // Invalid UTF-8 reads as U+FFFD (EF BF BD), as in llama.cpp.
  words = pre->split_words("\x80");
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(*words, (Pieces{"\xC3\xAF\xC2\xBF\xC2\xBD"}));
}

TEST(PreTokenizer, UnknownNameIsUnimplemented) {
  auto pre = PreTokenizer::create("gpt-5000");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(PreTokenizer::known_names().empty());
}

// Random text from a mix that exercises every branch of the splitters.
std::vector<std::string> random_texts() {
  const char* pool[] = {" ",      "  ",         "\t",      "\n",
                        "\r\n",   "\r",         "a",       "Zebra",
                        "'s",     "'S",         "'ll",     "'Re",
                        "'x",     "'",          "1",       "22",
                        "4444",   "!",          "?!",      "(",
                        ")",      "\u00a0",     "\u3000",  "\u2028",
                        "\u0085", "é",          "e\u0301", "\u0301",
                        "中",     "\U0001F600", "\u0378",  "\xEF\xBF\xBD",
                        "_",      "$",          "~",       "\u00bd",
                        "\u2163", "\x01",       "\x7f",    "\u200b"};
  std::mt19937 rng(2024);
  std::vector<std::string> out;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) s += pool[rng() % std::size(pool)];
    out.push_back(std::move(s));
  }
  return out;
}

// The hand-written splitters equal their patterns run as regexes (llama.cpp
// replaced the regexes by them for speed; the answers must not change).
void expect_same_as_regex(std::string_view pre_name, std::string_view regex) {
  auto pre = make(pre_name);
  auto split = RegexSplit::compile(regex);
  ASSERT_TRUE(split.ok()) << split.status();
  int differ = 0;
  for (const std::string& text : random_texts()) {
    const std::vector<uint32_t> cps = unicode::decode_lenient(text);
    auto hand = pre->split_codepoints(cps);
    ASSERT_TRUE(hand.ok());
    const std::vector<size_t> whole = {cps.size()};
    auto by_regex = (*split)->split(collapse_codepoints(cps), whole);
    ASSERT_TRUE(by_regex.ok());
    if (*hand != *by_regex && ++differ <= 5) {
      ADD_FAILURE() << pre_name << " differs from its regex on \"" << text
                    << "\"";
    }
  }
  EXPECT_EQ(differ, 0);
}

TEST(PreTokenizer, HandWrittenGpt2EqualsItsRegex) {
  expect_same_as_regex("gpt-2",
                       "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s"
                       "\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
}

TEST(PreTokenizer, HandWrittenLlama3EqualsItsRegex) {
  expect_same_as_regex(
      "llama-bpe",
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
      "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
}

TEST(RegexSplit, KeepsGapsAndPieceBoundaries) {
  auto split = RegexSplit::compile("[0-9]+");
  ASSERT_TRUE(split.ok());
  EXPECT_FALSE((*split)->uses_collapsed_text());
  const std::vector<uint32_t> text = {'a', '1', '2', 'b', '3', '4'};
  // Two pieces: "a12b" and "34"; no match crosses the boundary.
  auto out = (*split)->split(text, std::vector<size_t>{4, 2});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (std::vector<size_t>{1, 2, 1, 2}));
}

TEST(RegexSplit, DollarMatchesOnlyAtTheEnd) {
  auto split = RegexSplit::compile("\\s+$");
  ASSERT_TRUE(split.ok());
  const std::vector<uint32_t> text = {'a', ' ', '\n', 'b', ' ', ' '};
  auto out = (*split)->split(fold_whitespace(text), std::vector<size_t>{6});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (std::vector<size_t>{4, 2}));
}

TEST(RegexSplit, BadPatternsAreErrors) {
  EXPECT_FALSE(RegexSplit::compile("(unclosed").ok());
  EXPECT_FALSE(RegexSplit::compile("\\p{L}é").ok());  // category + non-ASCII
}

}  // namespace
}  // namespace strata::tokenizer
