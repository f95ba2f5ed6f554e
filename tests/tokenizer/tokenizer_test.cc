// The tokenizers on small hand-made vocabularies: SentencePiece merging by
// score, byte fallback, the space prefix, BPE merging by rank, special
// tokens (control tokens only with parse_special, user-defined always),
// attributes llama.cpp derives, BOS/EOS, decoding.
#include "model/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

constexpr int32_t kNormal = static_cast<int32_t>(TokenType::kNormal);
constexpr int32_t kControl = static_cast<int32_t>(TokenType::kControl);
constexpr int32_t kUserDefined = static_cast<int32_t>(TokenType::kUserDefined);
constexpr int32_t kByte = static_cast<int32_t>(TokenType::kByte);
constexpr int32_t kUnknown = static_cast<int32_t>(TokenType::kUnknown);

struct Builder {
  Vocabulary v;
  TokenId add(std::string text, int32_t type = kNormal, float score = 0) {
    v.tokens.push_back(std::move(text));
    v.types.push_back(type);
    v.scores.push_back(score);
    return static_cast<TokenId>(v.tokens.size() - 1);
  }
  TokenId id(std::string_view text) const {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      if (v.tokens[i] == text) return static_cast<TokenId>(i);
    }
    ADD_FAILURE() << "no token " << text;
    return -1;
  }
};

// <unk> <s> </s>, 256 byte tokens, then pieces with scores.
Builder spm_vocab() {
  Builder b;
  b.v.model = TokenizerModel::kSentencePiece;
  b.add("<unk>", kUnknown);
  b.add("<s>", kControl);
  b.add("</s>", kControl);
  for (int i = 0; i < 256; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", i);
    b.add(name, kByte);
  }
  b.add("\xE2\x96\x81", kNormal, -1);  // ▁
  b.add("a", kNormal, -2);
  b.add("b", kNormal, -2);
  b.add("c", kNormal, -2);
  b.add(
      "\xE2\x96\x81"
      "a",
      kNormal, -3);  // ▁a
  b.add("ab", kNormal, -1.5);
  b.add("bc", kNormal, -1.0);
  b.add(
      "\xE2\x96\x81"
      "ab",
      kNormal, -0.5);  // ▁ab
  b.add("<|user|>", kControl);
  b.add("[U]", kUserDefined);
  return b;
}

std::unique_ptr<Tokenizer> make(Vocabulary v) {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<TokenId> encode(const Tokenizer& tok, std::string_view text,
                            EncodeOptions opt = {.add_special = false}) {
  auto ids = tok.encode(text, opt);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<TokenId>{};
}

TEST(SentencePiece, MergesHighestScoreFirstWithSpacePrefix) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  // "▁abc": ▁a (-3), ab (-1.5), bc (-1.0) -> bc first, then ▁+a, ...
  EXPECT_EQ(encode(*tok, "abc"), (std::vector<TokenId>{b.id("\xE2\x96\x81"
                                                            "a"),
                                                       b.id("bc")}));
  EXPECT_EQ(encode(*tok, "ab"), (std::vector<TokenId>{b.id("\xE2\x96\x81"
                                                           "ab")}));
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(encode(*tok, "ab", {}), (std::vector<TokenId>{1, b.id("\xE2\x96\x81"
                                                                  "ab")}));
}

TEST(SentencePiece, UnknownCharactersFallBackToBytes) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  // é = C3 A9, not in the vocabulary.
  EXPECT_EQ(encode(*tok, "\xC3\xA9"),
            (std::vector<TokenId>{b.id("\xE2\x96\x81"), b.id("<0xC3>"),
                                  b.id("<0xA9>")}));
  // A stray byte is its own character.
  EXPECT_EQ(encode(*tok, "\x80"),
            (std::vector<TokenId>{b.id("\xE2\x96\x81"), b.id("<0x80>")}));
  auto text = tok->decode_bytes(encode(*tok,
                                       "a\x80\xFF"
                                       "b"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "a\x80\xFF"
            "b");
}

TEST(SentencePiece, NoSpacePrefixWhenTheFileSaysSo) {
  Builder b = spm_vocab();
  b.v.add_space_prefix = false;
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "ab"), (std::vector<TokenId>{b.id("ab")}));
  EXPECT_EQ(encode(*tok, " ab"), (std::vector<TokenId>{b.id("\xE2\x96\x81"
                                                            "ab")}));
}

TEST(SpecialTokens, ControlTokensOnlyWithParseSpecial) {
  Builder b = spm_vocab();
  b.v.add_space_prefix = false;
  auto tok = make(b.v);
  const TokenId user = b.id("<|user|>");
  const std::vector<TokenId> plain = encode(*tok, "<|user|>");
  EXPECT_EQ(std::find(plain.begin(), plain.end(), user), plain.end());
  EXPECT_EQ(
      encode(*tok, "<|user|>ab", {.add_special = false, .parse_special = true}),
      (std::vector<TokenId>{user, b.id("ab")}));
  // A user-defined token is cut out either way.
  EXPECT_EQ(encode(*tok, "a[U]b"),
            (std::vector<TokenId>{b.id("a"), b.id("[U]"), b.id("b")}));
}

TEST(SpecialTokens, SpacePrefixFollowsEverySpecialToken) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "[U]ab"),
            (std::vector<TokenId>{b.id("[U]"), b.id("\xE2\x96\x81"
                                                    "ab")}));
}

TEST(SpecialTokens, LongestTextIsCutFirst) {
  Builder b = spm_vocab();
  b.v.add_space_prefix = false;
  const TokenId shorter = b.add("<x>", kUserDefined);
  const TokenId longer = b.add("<x><x>", kUserDefined);
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "<x><x><x>"), (std::vector<TokenId>{longer, shorter}));
}

TEST(SpecialTokens, EndOfTurnTextsBecomeControlAndEndGeneration) {
  Builder b = spm_vocab();
  const TokenId im_end = b.add("<|im_end|>", kNormal);
  auto tok = make(b.v);
  EXPECT_TRUE(tok->attributes(im_end) & kAttrControl);
  EXPECT_TRUE(tok->is_end_of_generation(im_end));
  EXPECT_TRUE(tok->is_end_of_generation(2));  // </s>, the EOS
  EXPECT_FALSE(tok->is_end_of_generation(b.id("a")));
  EXPECT_EQ(tok->special().eot, im_end);
}

TEST(SpecialTokens, Phi3TokensStripTheWhitespaceAfterThem) {
  Builder b = spm_vocab();
  b.v.model_name = "Phi3 mini";
  b.v.add_space_prefix = false;
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "<|user|>  ab",
                   {.add_special = false, .parse_special = true}),
            (std::vector<TokenId>{b.id("<|user|>"), b.id("ab")}));
}

TEST(Decode, ControlTokensRenderOnlyWhenAsked) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  const std::vector<TokenId> ids = {1,
                                    b.id("\xE2\x96\x81"
                                         "ab"),
                                    b.id("<|user|>")};
  EXPECT_EQ(tok->decode(ids).value(), "ab");
  EXPECT_EQ(tok->decode(ids, {.render_special = true}).value(),
            "<s>ab<|user|>");
  EXPECT_EQ(tok->decode(ids, {.strip_space_prefix = false}).value(), " ab");
  EXPECT_FALSE(tok->decode(std::vector<TokenId>{-1}).ok());
  EXPECT_FALSE(tok->decode(std::vector<TokenId>{tok->n_tokens()}).ok());
  EXPECT_EQ(tok->piece(tok->n_tokens()), "");
}

TEST(Decode, StreamHoldsBackSplitCharacters) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  StreamDecoder stream(*tok);
  // "€" = E2 82 AC as three byte tokens, then "a".
  EXPECT_EQ(stream.push(b.id("<0xE2>")).value(), "");
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.push(b.id("<0x82>")).value(), "");
  EXPECT_EQ(stream.push(b.id("<0xAC>")).value(), "\xE2\x82\xAC");
  EXPECT_EQ(stream.push(b.id("a")).value(), "a");
  // A character never completed becomes U+FFFD, not before it is known bad.
  EXPECT_EQ(stream.push(b.id("<0xE2>")).value(), "");
  EXPECT_EQ(stream.push(b.id("a")).value(),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(stream.push(b.id("<0xF0>")).value(), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_FALSE(stream.push(-5).ok());
}

TEST(Decode, StreamStripsTheSpacePrefixLikeDecode) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  const std::vector<TokenId> ids = {1,
                                    b.id("\xE2\x96\x81"
                                         "ab"),
                                    b.id("\xE2\x96\x81"
                                         "a")};
  StreamDecoder stream(*tok);
  std::string joined;
  for (TokenId id : ids) joined += stream.push(id).value();
  joined += stream.finish();
  EXPECT_EQ(joined, tok->decode(ids).value());
  EXPECT_EQ(joined, "ab a");
}

// Byte-level BPE over the 256-character alphabet plus a few merges.
Builder bpe_vocab() {
  Builder b;
  b.v.model = TokenizerModel::kBytePair;
  b.v.pre = "gpt-2";
  for (int i = 0; i < 256; ++i) {
    b.add(std::string(unicode::byte_to_unicode(static_cast<uint8_t>(i))));
  }
  const char* merged[] = {
      "he", "ll",          "hell", "hello",         "\xC4\xA0w",  // Ġw
      "or", "\xC4\xA0wor", "ld",   "\xC4\xA0world", "bc",        "ab"};
  for (const char* m : merged) b.add(m);
  b.v.merges = {"h e", "l l",          "he ll", "hell o",         "\xC4\xA0 w",
                "o r", "\xC4\xA0w or", "l d",   "\xC4\xA0wor ld", "b c",
                "a b"};
  b.add("<|endoftext|>", kControl);
  return b;
}

TEST(BytePair, MergesByRank) {
  Builder b = bpe_vocab();
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "hello world"),
            (std::vector<TokenId>{b.id("hello"), b.id("\xC4\xA0world")}));
  // "b c" outranks "a b": abc -> a + bc.
  EXPECT_EQ(encode(*tok, "abc"), (std::vector<TokenId>{b.id("a"), b.id("bc")}));
  EXPECT_EQ(tok->decode(encode(*tok, "hello world")).value(), "hello world");
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->pre_tokenizer_name(), "gpt-2");
}

TEST(BytePair, EveryByteRoundTrips) {
  Builder b = bpe_vocab();
  auto tok = make(b.v);
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  // Invalid UTF-8 becomes U+FFFD (as in llama.cpp); valid text is kept.
  auto ids = tok->encode(all, {.add_special = false});
  ASSERT_TRUE(ids.ok());
  const std::string ascii = all.substr(0, 128);
  EXPECT_EQ(tok->decode(encode(*tok, ascii)).value(), ascii);
  EXPECT_EQ(tok->decode(encode(*tok, "\xE2\x82\xAC")).value(), "\xE2\x82\xAC");
  EXPECT_EQ(tok->decode(encode(*tok, "\x80")).value(), "\xEF\xBF\xBD");
}

TEST(BytePair, ControlTokenTextIsOrdinaryTextByDefault) {
  Builder b = bpe_vocab();
  auto tok = make(b.v);
  const TokenId eot = b.id("<|endoftext|>");
  const std::vector<TokenId> plain = encode(*tok, "a<|endoftext|>b");
  EXPECT_EQ(std::find(plain.begin(), plain.end(), eot), plain.end());
  EXPECT_EQ(tok->decode(plain).value(), "a<|endoftext|>b");
  EXPECT_EQ(encode(*tok, "a<|endoftext|>b",
                   {.add_special = false, .parse_special = true}),
            (std::vector<TokenId>{b.id("a"), eot, b.id("b")}));
}

TEST(BytePair, AddBosAndEosAsTheFileSays) {
  Builder b = bpe_vocab();
  b.v.add_bos = true;
  b.v.add_eos = true;
  b.v.special.bos = b.id("<|endoftext|>");
  b.v.special.eos = b.id("<|endoftext|>");
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, "ab", {}),
            (std::vector<TokenId>{b.id("<|endoftext|>"), b.id("ab"),
                                  b.id("<|endoftext|>")}));
}

TEST(BytePair, Llama3FamilyAddsBosByDefault) {
  Builder b = bpe_vocab();
  b.v.pre = "llama-bpe";
  b.v.special.bos = b.id("<|endoftext|>");
  auto tok = make(b.v);
  EXPECT_TRUE(tok->add_bos());
}

TEST(BytePair, UnknownPreTokenizerIsRefusedByName) {
  Builder b = bpe_vocab();
  b.v.pre = "no-such-pre";
  auto tok = Tokenizer::create(b.v);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.pre"),
            std::string::npos);
  EXPECT_NE(tok.status().message().find("no-such-pre"), std::string::npos);
}

TEST(Encode, StrictUtf8NamesTheOffset) {
  Builder b = bpe_vocab();
  auto tok = make(b.v);
  auto ids = tok->encode("ab\xED\xA0\x80", {.strict_utf8 = true});
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("offset 2"), std::string::npos)
      << ids.status();
  EXPECT_TRUE(tok->encode("ab\xE2\x82\xAC", {.strict_utf8 = true}).ok());
}

TEST(Encode, EmptyTextGivesOnlyTheSpecialTokens) {
  Builder b = spm_vocab();
  auto tok = make(b.v);
  EXPECT_EQ(encode(*tok, ""), std::vector<TokenId>{});
  EXPECT_EQ(encode(*tok, "", {}), std::vector<TokenId>{1});
}

}  // namespace
}  // namespace strata::tokenizer
