// GBNF parsing (errors with line and column) and the matcher on strings.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "model/grammar/grammar.h"

namespace strata::grammar {
namespace {

std::shared_ptr<const TokenTable> no_tokens() { return TokenTable::build({}, {}); }

// Whether `text` is a whole sentence of `gbnf`.
bool matches(const std::string& gbnf, const std::string& text) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return false;
  GrammarMatcher m(*g, no_tokens());
  return m.accept_bytes(text) && m.complete();
}

std::string parse_error(const std::string& gbnf) {
  auto g = parse_gbnf(gbnf);
  return g.ok() ? "ok" : std::string(g.status().message());
}

TEST(Gbnf, ParsesLiteralsClassesAndRepetition) {
  const std::string g = R"(
    # a comment
    root ::= "ab" [0-9]+ ("x" | "y")? tail{2}
    tail ::= [^\n] # trailing comment
  )";
  EXPECT_TRUE(matches(g, "ab1xzz"));
  EXPECT_TRUE(matches(g, "ab123qq"));
  EXPECT_FALSE(matches(g, "ab1x"));
  EXPECT_FALSE(matches(g, "abxzz"));
  EXPECT_FALSE(matches(g, "ab1x\nz"));
}

TEST(Gbnf, BoundedRepetition) {
  const std::string g = "root ::= \"a\"{2,4} \"b\"{0,} \"c\"{1,}";
  EXPECT_FALSE(matches(g, "ac"));
  EXPECT_TRUE(matches(g, "aac"));
  EXPECT_TRUE(matches(g, "aaaabbcc"));
  EXPECT_FALSE(matches(g, "aaaaac"));
  EXPECT_TRUE(matches("root ::= \"ab\"* \"c\"", "ababc"));
  EXPECT_FALSE(matches("root ::= \"ab\"* \"c\"", "abac"));
}

TEST(Gbnf, EscapesAndUtf8) {
  EXPECT_TRUE(matches(R"(root ::= "\x41\u00e9\U0001F600\n\"\\" [\[\]])", "A\xC3\xA9\xF0\x9F\x98\x80\n\"\\]"));
  EXPECT_TRUE(matches("root ::= [α-ω]+", "λμ"));
  EXPECT_FALSE(matches("root ::= [α-ω]+", "λA"));
  EXPECT_TRUE(matches("root ::= .", "€"));
  EXPECT_FALSE(matches("root ::= .", "€€"));
  EXPECT_TRUE(matches("root ::= [^a-z]", "é"));
  // Overlong and surrogate encodings are not characters.
  EXPECT_FALSE(matches("root ::= .", "\xC0\xAF"));
  EXPECT_FALSE(matches("root ::= .", "\xE0\x80\xB0"));
  EXPECT_FALSE(matches("root ::= .", "\xED\xA0\x80"));
  // A surrogate escape could never match UTF-8 output: refused at parse.
  auto surrogate = parse_gbnf(R"(root ::= "\uD800")");
  ASSERT_FALSE(surrogate.ok());
  EXPECT_NE(surrogate.status().message().find("surrogate"), std::string::npos) << surrogate.status();
  EXPECT_FALSE(matches("root ::= [0-9]", "\xF0\x80\x80\xB0"));
}

TEST(Gbnf, MultiLineRulesAndNesting) {
  const std::string g = R"(root ::=
      item
      ("," item)*
    item ::= ( "a" | "b"
             | ("c" "d") )
  )";
  EXPECT_TRUE(matches(g, "a,b,cd"));
  EXPECT_FALSE(matches(g, "a,c"));
}

TEST(Gbnf, TailRecursionAndNullableLoops) {
  EXPECT_TRUE(matches("root ::= \"x\" root | \"y\"", "xxxy"));
  EXPECT_TRUE(matches("root ::= (\"a\"?)* \"b\"", "aab"));
  EXPECT_TRUE(matches("root ::= a\na ::= b\nb ::= a | \"z\"", "z"));
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"abc"), "line 1 col 10: unterminated literal");
  EXPECT_EQ(parse_error("root ::= foo"), "line 1 col 10: undefined rule 'foo'");
  EXPECT_EQ(parse_error("a ::= \"x\""), "line 1 col 10: no rule named 'root'");
  EXPECT_EQ(parse_error("root ::= [a-z"), "line 1 col 10: unterminated character class");
  EXPECT_EQ(parse_error("root ::= \"a\"\n  x ::= \"b\" )"), "line 2 col 13: unexpected ')'");
  EXPECT_EQ(parse_error("root ::= [z-a]"), "line 1 col 13: range end before its start");
  EXPECT_EQ(parse_error("root ::= * \"a\""), "line 1 col 10: '*' follows nothing");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "line 1 col 11: unknown escape \\q");
  EXPECT_EQ(parse_error("root ::= (\"a\""), "line 1 col 10: expected ')'");
  EXPECT_EQ(parse_error("root ::= \"a\"{5,2}"), "line 1 col 13: {5,2}: max below min");
  EXPECT_EQ(parse_error("root ::= \"a\"{2000}"), "line 1 col 14: repetition count above 1000");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""), "line 2 col 1: rule 'root' is defined twice");
  EXPECT_EQ(parse_error("root ::= root \"x\" | \"y\""),
            "line 1 col 1: rule 'root' is left-recursive (it can reach itself before consuming input)");
  EXPECT_EQ(parse_error("root = \"a\""), "line 1 col 6: expected '::='");
  EXPECT_EQ(parse_error(""), "line 1 col 1: no rule named 'root'");
  EXPECT_EQ(parse_error("root ::= \"\xff\""), "line 1 col 11: invalid UTF-8");
}

TEST(Gbnf, HostileInputNeverCrashes) {
  // Every prefix of a real grammar parses or errors cleanly.
  const std::string g = json_object_gbnf();
  for (size_t i = 0; i < g.size(); ++i) (void)parse_gbnf(g.substr(0, i));
  std::string deep(200, '(');
  EXPECT_NE(parse_error("root ::= " + deep), "ok");
  // Random byte edits of it: parse errors or grammars a matcher can walk.
  std::mt19937_64 rng(9);
  const std::string alphabet = "\"[]()|*+?{},.:=#\\^-\n ax09\xC3\xA9\xFF";
  auto table = TokenTable::build({"{", "\"", "a", "}", " ", "1", "\xC3", "\xA9"},
                                 std::vector<bool>(8, false));
  for (int i = 0; i < 2000; ++i) {
    std::string m = g;
    for (int k = 0; k < 3; ++k) m[rng() % m.size()] = alphabet[rng() % alphabet.size()];
    auto parsed = parse_gbnf(m);
    if (!parsed.ok()) continue;
    GrammarMatcher matcher(*parsed, table);
    TokenMask mask;
    for (int step = 0; step < 5 && matcher.fill_mask(&mask).ok(); ++step) {
      int32_t pick = -1;
      for (int32_t id = 0; id < table->n_tokens(); ++id) {
        if (allowed(mask, id)) pick = id;
      }
      if (pick < 0 || !matcher.accept(pick).ok()) break;
    }
  }
}

TEST(Matcher, TokensEndingInsideACharacter) {
  // "é" is C3 A9: two tokens of one byte each.
  auto table = TokenTable::build({"\xC3", "\xA9", "a", "", "}"}, {false, false, false, true, false});
  auto g = parse_gbnf("root ::= [é-ê]+");
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g, table);
  TokenMask mask;
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));
  EXPECT_FALSE(allowed(mask, 1));
  EXPECT_FALSE(allowed(mask, 2));
  EXPECT_FALSE(allowed(mask, 3));  // EOG: not complete yet
  ASSERT_TRUE(m.accept(0).ok());
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_FALSE(allowed(mask, 0));
  EXPECT_TRUE(allowed(mask, 1));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.accept(1).ok());
  EXPECT_TRUE(m.complete());
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));
  EXPECT_TRUE(allowed(mask, 3));  // EOG once complete
  EXPECT_FALSE(allowed(mask, 4));
  EXPECT_FALSE(m.accept(2).ok());
  EXPECT_TRUE(m.accept(3).ok());
}

TEST(Matcher, OnlyEndOfGenerationWhenFinished) {
  auto table = TokenTable::build({"a", "b", "ab", ""}, {false, false, false, true});
  auto g = parse_gbnf("root ::= \"ab\"");
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g, table);
  TokenMask mask;
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));
  EXPECT_FALSE(allowed(mask, 1));
  EXPECT_TRUE(allowed(mask, 2));
  EXPECT_FALSE(allowed(mask, 3));
  ASSERT_TRUE(m.accept(2).ok());
  EXPECT_TRUE(m.finished());
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_EQ(mask[0], uint64_t{1} << 3);
}

// fill_mask (trie, lazy DFA, memo, mask cache) against the token-by-token
// check (allows(): the plain byte path), along random walks through a JSON
// grammar with a vocabulary of JSON pieces, bytes and split characters.
TEST(Matcher, MaskEqualsTokenByTokenCheck) {
  std::vector<std::string> pieces = {"{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\"a",
                                     "\":", "\": ", "true", "tr", "ue", "null", "0", "12", "-",
                                     ".5", "e+", "\\", "\\u00", "e9", "\xC3", "\xA9", "\xE2\x82",
                                     "\xAC", "\xF0\x9F\x98\x80", "ab", "\"}", "\"]", "{\"", "", "\x80",
                                     "\xC0\xAF", "  ", "\t", "1}", "\"k\": \""};
  std::vector<bool> eog(pieces.size(), false);
  eog[33] = true;  // "": the end-of-generation token
  auto table = TokenTable::build(pieces, eog);
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g.ok());
  std::mt19937_64 rng(5);
  for (int walk = 0; walk < 40; ++walk) {
    GrammarMatcher m(*g, table);
    for (int step = 0; step < 40; ++step) {
      TokenMask mask;
      ASSERT_TRUE(m.fill_mask(&mask).ok());
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < table->n_tokens(); ++id) {
        ASSERT_EQ(allowed(mask, id), m.allows(id)) << "walk " << walk << " step " << step
                                                   << " token " << id;
        if (allowed(mask, id)) ok.push_back(id);
      }
      if (ok.empty()) break;
      const int32_t pick = ok[rng() % ok.size()];
      ASSERT_TRUE(m.accept(pick).ok());
      if (table->is_eog(pick)) break;
    }
  }
}

TEST(Matcher, RulesNestedTooDeepFailTheStepNotTheProcess) {
  std::string g = "root ::= r0\n";
  for (int i = 0; i < 3000; ++i) g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  g += "r3000 ::= \"y\"\n";
  auto parsed = parse_gbnf(g);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  GrammarMatcher m(*parsed, TokenTable::build({"y", "x"}, {false, false}));
  TokenMask mask;
  EXPECT_EQ(m.fill_mask(&mask).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.accept(0).code(), absl::StatusCode::kInvalidArgument);
}

// A token may be as long as a GGUF string: the mask's walk down the token
// trie keeps its own stack (a 1 MB token was 1 MB of recursion), and the
// long token is allowed exactly when the grammar takes it.
TEST(Matcher, VeryLongTokensAreWalkedWithoutRecursion) {
  const std::string long_a(1 << 20, 'a');
  auto table = TokenTable::build({"a", long_a, long_a + "b", "b"}, {false, false, false, false});
  auto g = parse_gbnf("root ::= \"a\"* \"b\"");
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g, table);
  TokenMask mask;
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  for (int id = 0; id < 4; ++id) EXPECT_TRUE(allowed(mask, id)) << id;
  auto only_a = parse_gbnf("root ::= \"a\"{0,3}");
  ASSERT_TRUE(only_a.ok()) << only_a.status();
  GrammarMatcher few(*only_a, table);
  ASSERT_TRUE(few.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));
  EXPECT_FALSE(allowed(mask, 1));
  EXPECT_FALSE(allowed(mask, 2));
  EXPECT_FALSE(allowed(mask, 3));
}

// Repetitions are desugared as they are parsed, and their total is
// bounded then: 6500 x a{0,1000} (65 KB) asked for 6.5 million helper
// rules (~3 GB). 120 of them (120000 rules) still parse, and the
// left-recursion check over them is linear (it searched from every edge:
// 120000 x 120000 steps). Left recursion through helpers is still found.
TEST(Gbnf, RepetitionsAreBoundedAsTheyAreMade) {
  auto rules = [](int n, const char* each) {
    std::string g = "root ::= ";
    for (int i = 0; i < n; ++i) g += each;
    return g + "\na ::= \"x\"\n";
  };
  auto huge = parse_gbnf(rules(6500, "a{0,1000} "));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("grammar too large: its repetitions make more than 131072 rules"),
            std::string::npos)
      << huge.status();
  auto copies = parse_gbnf(rules(1100, "a{1000} "));
  ASSERT_FALSE(copies.ok());
  EXPECT_NE(copies.status().message().find("more than 1048576 elements"), std::string::npos)
      << copies.status();
  auto many = parse_gbnf(rules(120, "a{0,1000} "));
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_GT((*many)->alternatives().size(), 120000u);
  auto left = parse_gbnf("root ::= b \"x\"\nb ::= c{0,3} d\nc ::= \"c\"\nd ::= root | \"y\"\n");
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.status().message().find("rule 'root' is left-recursive"), std::string::npos)
      << left.status();
}

// A grammar whose first step enters millions of (rule, continuation) pairs
// (4096 alternatives each opening a 990-rule chain: 50 KB of GBNF, under
// the request limit) fails the step, at once, instead of taking the
// worker's stage for hours. The same shape, 4 alternatives deep, works.
TEST(Matcher, GrammarsEnteringTooManyRulesFailTheStepNotTheStage) {
  auto grammar = [](int alternatives, int chain) {
    std::string g = "root ::= c0 \"x\"";
    for (int i = 1; i < alternatives; ++i) g += " | c0 \"x\"";
    g += "\n";
    for (int i = 0; i + 1 < chain; ++i) {
      g += "c" + std::to_string(i) + " ::= c" + std::to_string(i + 1) + "\n";
    }
    g += "c" + std::to_string(chain - 1) + " ::= \"z\"\n";
    return g;
  };
  auto hostile = parse_gbnf(grammar(4096, 990));
  ASSERT_TRUE(hostile.ok()) << hostile.status();
  GrammarMatcher m(*hostile, TokenTable::build({"z", "x"}, {false, false}));
  TokenMask mask;
  EXPECT_EQ(m.fill_mask(&mask).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.accept(0).code(), absl::StatusCode::kInvalidArgument);

  auto small = parse_gbnf(grammar(4, 990));
  ASSERT_TRUE(small.ok()) << small.status();
  GrammarMatcher ok(*small, TokenTable::build({"z", "x"}, {false, false}));
  ASSERT_TRUE(ok.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));
  EXPECT_FALSE(allowed(mask, 1));
  ASSERT_TRUE(ok.accept(0).ok());
  ASSERT_TRUE(ok.accept(1).ok());
  EXPECT_TRUE(ok.complete());
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A class is sorted and merged when parsed, and searched: 18000 code
// points written one by one in descending order, negated, on top of 2000
// stacks, took one mask 113 s when every stack scanned it (quadratically
// inside a character). It still means what it says, whole and cut
// between tokens: U+4E00..U+59B8 here, U+59B8 being E5 A6 B8.
TEST(Matcher, LongClassesAreSearchedNotScanned) {
  std::string cjk;
  for (uint32_t cp = 0x59B8; cp >= 0x4E00; --cp) cjk += utf8(cp);
  const std::string negated = "root ::= [^" + cjk + "]+";
  EXPECT_FALSE(matches(negated, utf8(0x4E00)));
  EXPECT_FALSE(matches(negated, utf8(0x59B8)));
  EXPECT_TRUE(matches(negated, utf8(0x4DFF) + utf8(0x59B9) + "a"));
  const std::string positive = "root ::= [zy" + cjk + "xa-cb-d]+";
  EXPECT_TRUE(matches(positive, utf8(0x4E00) + utf8(0x5000) + "abcdxyz"));
  EXPECT_FALSE(matches(positive, "e"));
  EXPECT_FALSE(matches(positive, utf8(0x4DFF)));

  auto table = TokenTable::build({"\xE4", "\xE5", "\xB8", "\xB9", "\xA5", "\xA6", "\x80", "\xBF"},
                                 std::vector<bool>(8, false));
  auto g = parse_gbnf(negated);
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g, table);
  TokenMask mask;
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_TRUE(allowed(mask, 0));   // E4: U+4000..U+4DFF are outside
  EXPECT_TRUE(allowed(mask, 1));   // E5: U+59B9..U+5FFF are
  EXPECT_FALSE(allowed(mask, 2));  // a continuation byte first
  ASSERT_TRUE(m.accept(1).ok());
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_FALSE(allowed(mask, 4));  // E5 A5: U+5940..U+597F, all inside
  EXPECT_TRUE(allowed(mask, 5));   // E5 A6: U+5980..U+59BF, the last 7 outside
  for (int32_t id = 0; id < table->n_tokens(); ++id) {
    EXPECT_EQ(allowed(mask, id), m.allows(id)) << id;
  }
  ASSERT_TRUE(m.accept(5).ok());
  ASSERT_TRUE(m.fill_mask(&mask).ok());
  EXPECT_FALSE(allowed(mask, 6));  // U+5980: inside
  EXPECT_TRUE(allowed(mask, 7));   // U+59BF: outside
  EXPECT_EQ(m.accept(6).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.accept(7).ok());
  EXPECT_TRUE(m.complete());
}

// Every limit of one state can hold while a mask still makes a state per
// token prefix: 1000 parses that take any byte (2000 stacks) beside one
// that pushes a frame for each byte read (so every prefix is a state of
// its own) took SmolLM2's vocabulary 15 s and 3 GB a mask; 4000 parses
// that each lead back to all 4000 copied 16 million stacks a byte (16 GB,
// then bad_alloc). Both now fail the step once it has done kMaxStepWork;
// the same shapes, small, and JSON still mask as before.
TEST(Matcher, MasksThatWouldTakeSecondsFailTheStep) {
  // Every string of 1..3 of 24 letters: a trie of 14,424 tokens.
  constexpr char kLast = 'A' + 24;
  std::vector<std::string> pieces;
  for (char a = 'A'; a < kLast; ++a) {
    pieces.emplace_back(1, a);
    for (char b = 'A'; b < kLast; ++b) {
      pieces.push_back(std::string{a, b});
      for (char c = 'A'; c < kLast; ++c) pieces.push_back(std::string{a, b, c});
    }
  }
  const int32_t n = static_cast<int32_t>(pieces.size());
  auto table = TokenTable::build(pieces, std::vector<bool>(pieces.size(), false));
  auto tracked = [&](int background) {
    std::string g = "root ::= bg | tr\nbg ::= a \"x\"";
    for (int i = 1; i < background; ++i) g += " | a \"x\"";
    g += "\na ::= [^\\x00] a | \"\"\ntr ::= \"\"";
    for (char c = 'A'; c < kLast; ++c) g += std::string(" | \"") + c + "\" tr \"y\"";
    return g + "\n";
  };
  auto fanout = [](int alternatives) {
    std::string g = "root ::= x\nx ::= [^\\x00] x";
    for (int i = 1; i < alternatives; ++i) g += " | [^\\x00] x";
    return g + "\n";
  };
  TokenMask mask;
  for (const std::string& hostile : {tracked(1000), fanout(1000)}) {
    auto g = parse_gbnf(hostile);
    ASSERT_TRUE(g.ok()) << g.status();
    GrammarMatcher m(*g, table);
    const absl::Status st = m.fill_mask(&mask);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("units of work for one token"), std::string::npos) << st;
  }
  for (const std::string& small : {tracked(4), fanout(4)}) {
    auto g = parse_gbnf(small);
    ASSERT_TRUE(g.ok()) << g.status();
    GrammarMatcher m(*g, table);
    for (int32_t id : {0, 1, 2, n - 1}) {
      ASSERT_TRUE(m.fill_mask(&mask).ok());
      for (int32_t t = 0; t < table->n_tokens(); ++t) ASSERT_TRUE(allowed(mask, t)) << t;
      ASSERT_TRUE(m.accept(id).ok());
    }
  }
  // JSON over the same vocabulary (every key and string a letter run).
  auto json = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(json.ok());
  GrammarMatcher m(*json, TokenTable::build([&] {
    std::vector<std::string> p = pieces;
    for (const char* s : {"{\"", "\": \"", "\", \"", "\"}", ":", " "}) p.emplace_back(s);
    return p;
  }(), std::vector<bool>(pieces.size() + 6, false)));
  for (int32_t id : {n, 5, n + 1, 40, 7, n + 2, 1000, n + 1, n - 1, n + 3}) {
    ASSERT_TRUE(m.fill_mask(&mask).ok());
    ASSERT_TRUE(allowed(mask, id)) << id;
    ASSERT_TRUE(m.accept(id).ok()) << id;
  }
  EXPECT_TRUE(m.complete());
}

}  // namespace
}  // namespace strata::grammar
