// UTF-8 helpers: llama.cpp-compatible lenient decoding, strict validation,
// the streaming repairer, the GPT-2 byte alphabet, codepoint categories.
#include "model/tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace strata::tokenizer::unicode {
namespace {

constexpr uint32_t kFffd = kReplacementCharacter;

TEST(DecodeLenient, ValidTextDecodes) {
  EXPECT_EQ(decode_lenient("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"),
            (std::vector<uint32_t>{'a', 0xE9, 0x20AC, 0x1F600}));
  EXPECT_TRUE(decode_lenient("").empty());
}

TEST(DecodeLenient, BadBytesBecomeOneReplacementEach) {
  // A lone continuation byte; a truncated sequence (each byte on its own).
  EXPECT_EQ(decode_lenient("\x80"
                           "a"),
            (std::vector<uint32_t>{kFffd, 'a'}));
  EXPECT_EQ(decode_lenient("\xE2\x82"), (std::vector<uint32_t>{kFffd, kFffd}));
  EXPECT_EQ(decode_lenient("\xE2\x82"
                           "a"),
            (std::vector<uint32_t>{kFffd, kFffd, 'a'}));
  EXPECT_EQ(decode_lenient("\xFF\xF8"), (std::vector<uint32_t>{kFffd, kFffd}));
  // As in llama.cpp: surrogates and overlong forms are decoded, not refused.
  EXPECT_EQ(decode_lenient("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  EXPECT_EQ(decode_lenient("\xC0\x80"), (std::vector<uint32_t>{0}));
  // Above U+10FFFF: replaced (llama.cpp throws later on these).
  EXPECT_EQ(decode_lenient("\xF7\xBF\xBF\xBF"), (std::vector<uint32_t>{kFffd}));
}

TEST(FindInvalidUtf8, FollowsRfc3629) {
  constexpr size_t kOk = std::string_view::npos;
  EXPECT_EQ(find_invalid_utf8("plain \xC3\xA9 \xF0\x9F\x98\x80"), kOk);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xC0\x80"), 0u);          // overlong
  EXPECT_EQ(find_invalid_utf8("\xE0\x9F\xBF"), 0u);      // overlong
  EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);     // surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);  // > U+10FFFF
  EXPECT_EQ(find_invalid_utf8("\xF0\x9F\x98"), 0u);      // truncated
  EXPECT_EQ(find_invalid_utf8("\xEF\xBF\xBF"), kOk);     // U+FFFF is valid
}

TEST(Utf8Repairer, ReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(repair_utf8("\xE2\x82"
                        "a"),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(repair_utf8("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(repair_utf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(repair_utf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(repair_utf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8Repairer, AnySplitGivesTheSameValidText) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> pick(0, 9);
  const uint8_t interesting[] = {0x41, 0x80, 0xBF, 0xC3, 0xA9,
                                 0xE2, 0x82, 0xED, 0xF0, 0x9F};
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 24, '\0');
    for (char& c : bytes) {
      c = static_cast<char>(rng() % 3 == 0 ? rng() % 256
                                           : interesting[pick(rng)]);
    }
    const std::string whole = repair_utf8(bytes);
    ASSERT_EQ(find_invalid_utf8(whole), std::string::npos);
    Utf8Repairer r;
    std::string joined;
    for (size_t i = 0; i < bytes.size();) {
      const size_t n = std::min<size_t>(bytes.size() - i, 1 + rng() % 4);
      std::string chunk;
      r.push(std::string_view(bytes).substr(i, n), &chunk);
      ASSERT_EQ(find_invalid_utf8(chunk), std::string::npos);
      joined += chunk;
      i += n;
    }
    r.finish(&joined);
    EXPECT_EQ(joined, whole);
    if (find_invalid_utf8(bytes) == std::string::npos) {
      EXPECT_EQ(whole, bytes);
    }
  }
}

TEST(ByteAlphabet, IsGpt2BytesToUnicode) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // the last remapped: U+0143
  EXPECT_EQ(byte_to_unicode(0xFF), "\xC3\xBF");
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string_view text = byte_to_unicode(static_cast<uint8_t>(b));
    seen.emplace(text);
    const std::vector<uint32_t> cps = decode_lenient(text);
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(unicode_to_byte(cps[0]), b);
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(unicode_to_byte(0x20), -1);
  EXPECT_EQ(unicode_to_byte(0x4E00), -1);
}

TEST(CodepointFlags, GroupsCategoriesAsLlamaCpp) {
  EXPECT_EQ(codepoint_flags('a').category, Category::kLetter);
  EXPECT_EQ(codepoint_flags(0x4E2D).category, Category::kLetter);  // 中
  EXPECT_EQ(codepoint_flags('7').category, Category::kNumber);
  EXPECT_EQ(codepoint_flags(0x00BD).category, Category::kNumber);  // ½
  EXPECT_EQ(codepoint_flags(0x0301).category, Category::kMark);
  EXPECT_EQ(codepoint_flags('!').category, Category::kPunctuation);
  EXPECT_EQ(codepoint_flags('$').category, Category::kSymbol);
  EXPECT_EQ(codepoint_flags(0x1F600).category, Category::kSymbol);
  EXPECT_EQ(codepoint_flags(0xD800).category, Category::kControl);
  EXPECT_EQ(codepoint_flags(0xE000).category, Category::kControl);
  EXPECT_EQ(codepoint_flags(0x0378).category, Category::kUndefined);
  EXPECT_EQ(codepoint_flags(0x110000).category, Category::kUndefined);
  for (uint32_t ws : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u,
                      0x2000u, 0x200Au, 0x2028u, 0x202Fu, 0x205Fu, 0x3000u}) {
    EXPECT_TRUE(codepoint_flags(ws).whitespace) << ws;
  }
  for (uint32_t not_ws : {0x200Bu, 0x180Eu, 0xFEFFu, 0x61u}) {
    EXPECT_FALSE(codepoint_flags(not_ws).whitespace) << not_ws;
  }
}

TEST(CodepointFlags, AsciiFastPathAgreesWithUtf8proc) {
  // The fast path must give what the general path would: compare with a
  // character just above ASCII of each kind as a sanity check, and with the
  // known ASCII classes.
  int letters = 0, digits = 0, punct = 0, symbols = 0;
  for (uint32_t c = 0x21; c < 0x7F; ++c) {
    switch (codepoint_flags(c).category) {
      case Category::kLetter:
        ++letters;
        break;
      case Category::kNumber:
        ++digits;
        break;
      case Category::kPunctuation:
        ++punct;
        break;
      case Category::kSymbol:
        ++symbols;
        break;
      default:
        ADD_FAILURE() << c;
    }
  }
  EXPECT_EQ(letters, 52);
  EXPECT_EQ(digits, 10);
  EXPECT_EQ(punct, 23);
  EXPECT_EQ(symbols, 9);
}

}  // namespace
}  // namespace strata::tokenizer::unicode
