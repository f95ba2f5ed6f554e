// The tokenizer against llama.cpp on the real models: ids for the corpus of
// scripts/make_tokenizer_expected.py (committed under data/, with the
// llama.cpp version that produced them), pieces, decode(encode(x)) == x and
// streamed decoding. Skips when a model file is absent.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "nlohmann/json.hpp"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace strata::tokenizer {
namespace {

using nlohmann::json;
using testing::data_dir;
using testing::from_hex;
using testing::models_dir;

struct Case {
  std::string text;
  std::vector<TokenId> ids;                // no BOS/EOS, no special parsing
  std::vector<TokenId> ids_parse_special;  // parse_special
  std::vector<TokenId> ids_add_special;    // BOS/EOS as the model says
};

struct Reference {
  json header;
  std::vector<Case> cases;
  json pieces;
  std::unique_ptr<Tokenizer> tokenizer;
};

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

// Loads data/<target>.json and the model it names; skips when the model
// file is absent.
void load(const std::string& target, Reference* ref, bool* skipped) {
  *skipped = false;
  const json data =
      json::parse(testing::read_file(data_dir() / (target + ".json")));
  ref->header = data;
  ref->header.erase("cases");
  ref->header.erase("pieces");
  const auto model = models_dir() / data.at("model").get<std::string>();
  if (!std::filesystem::exists(model)) {
    *skipped = true;
    return;
  }
  for (const json& c : data.at("cases")) {
    Case k;
    k.text = c.contains("text") ? c["text"].get<std::string>()
                                : from_hex(c["hex"].get<std::string>());
    k.ids = c.at("ids").get<std::vector<TokenId>>();
    k.ids_parse_special = c.value("ids_parse_special", k.ids);
    k.ids_add_special = c.value("ids_add_special", k.ids);
    ref->cases.push_back(std::move(k));
  }
  ref->pieces = data.at("pieces");
  absl::StatusOr<Vocabulary> vocab = testing::load_vocabulary(model);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  if (!data.at("pre_override").is_null()) {
    vocab->pre = data["pre_override"].get<std::string>();
  }
  auto tok = Tokenizer::create(*std::move(vocab));
  ASSERT_TRUE(tok.ok()) << tok.status();
  ref->tokenizer = *std::move(tok);
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    bool skipped = false;
    load(GetParam(), &ref_, &skipped);
    if (skipped) {
      GTEST_SKIP() << ref_.header.at("model").get<std::string>()
                   << " not found in " << models_dir()
                   << " (scripts/fetch-models.sh puts it there)";
    }
  }
  Reference ref_;
};

TEST_P(ReferenceTest, IdsEqualLlamaCpp) {
  const Tokenizer& tok = *ref_.tokenizer;
  int mismatches = 0;
  int checked = 0;
  auto check = [&](const Case& c, const EncodeOptions& opt,
                   const std::vector<TokenId>& want, const char* mode) {
    ++checked;
    auto got = tok.encode(c.text, opt);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got == want) return;
    if (++mismatches <= 10) {
      ADD_FAILURE() << mode << " \"" << printable(c.text) << "\"\n  want "
                    << ids_text(want) << "\n  got  " << ids_text(*got);
    }
  };
  for (const Case& c : ref_.cases) {
    check(c, {.add_special = false, .parse_special = false}, c.ids, "plain");
    check(c, {.add_special = false, .parse_special = true}, c.ids_parse_special,
          "parse_special");
    check(c, {.add_special = true, .parse_special = false}, c.ids_add_special,
          "add_special");
  }
  EXPECT_GE(ref_.cases.size(), 300u);
  EXPECT_EQ(mismatches, 0) << "of " << checked << " encodings of "
                           << ref_.cases.size() << " strings; reference "
                           << ref_.header.at("reference").dump();
  RecordProperty("strings", static_cast<int>(ref_.cases.size()));
  RecordProperty("mismatches", mismatches);
}

TEST_P(ReferenceTest, PiecesEqualLlamaCpp) {
  const Tokenizer& tok = *ref_.tokenizer;
  int mismatches = 0;
  for (const json& p : ref_.pieces) {
    const auto id = p.at(0).get<TokenId>();
    const std::string special = from_hex(p.at(1).get<std::string>());
    const std::string plain = from_hex(p.at(2).get<std::string>());
    if (tok.piece(id, true) != special || tok.piece(id, false) != plain) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "id " << id << ": want \"" << printable(special)
                      << "\" / \"" << printable(plain) << "\", got \""
                      << printable(std::string(tok.piece(id, true)))
                      << "\" / \""
                      << printable(std::string(tok.piece(id, false))) << "\"";
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << ref_.pieces.size() << " pieces";
}

TEST_P(ReferenceTest, DecodeInvertsEncode) {
  const Tokenizer& tok = *ref_.tokenizer;
  int valid = 0;
  for (const Case& c : ref_.cases) {
    if (unicode::find_invalid_utf8(c.text) != std::string::npos) continue;
    ++valid;
    for (bool add_special : {false, true}) {
      auto ids = tok.encode(c.text, {.add_special = add_special});
      ASSERT_TRUE(ids.ok()) << ids.status();
      auto text = tok.decode(*ids);
      ASSERT_TRUE(text.ok()) << text.status();
      EXPECT_EQ(*text, c.text)
          << "\"" << printable(c.text) << "\" -> " << ids_text(*ids);
    }
  }
  EXPECT_GT(valid, 250);
}

// Streams `ids` one token at a time; checks every chunk is valid UTF-8 and
// that the chunks join to decode(ids).
void expect_stream_matches(const Tokenizer& tok,
                           const std::vector<TokenId>& ids,
                           const DecodeOptions& opt) {
  StreamDecoder stream(tok, opt);
  std::string joined;
  for (TokenId id : ids) {
    auto chunk = stream.push(id);
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    ASSERT_EQ(unicode::find_invalid_utf8(*chunk), std::string::npos)
        << "chunk \"" << printable(*chunk) << "\" of " << ids_text(ids);
    joined += *chunk;
  }
  const std::string tail = stream.finish();
  ASSERT_EQ(unicode::find_invalid_utf8(tail), std::string::npos);
  joined += tail;
  auto whole = tok.decode(ids, opt);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(joined, *whole) << ids_text(ids);
}

TEST_P(ReferenceTest, StreamedDecodeJoinsToDecode) {
  const Tokenizer& tok = *ref_.tokenizer;
  for (bool render : {false, true}) {
    const DecodeOptions opt{.render_special = render};
    for (const Case& c : ref_.cases) {
      expect_stream_matches(tok, c.ids, opt);
      expect_stream_matches(tok, c.ids_parse_special, opt);
      expect_stream_matches(tok, c.ids_add_special, opt);
    }
  }
  // Arbitrary id sequences, byte tokens and all.
  std::mt19937 rng(7);
  std::uniform_int_distribution<TokenId> any(0, tok.n_tokens() - 1);
  std::uniform_int_distribution<int> length(1, 24);
  for (int i = 0; i < 300; ++i) {
    std::vector<TokenId> ids(length(rng));
    for (TokenId& id : ids) id = any(rng);
    expect_stream_matches(tok, ids, {});
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceTest,
                         ::testing::Values("smollm2", "gemma3", "llama-bpe",
                                           "qwen2"),
                         testing::param_name);

}  // namespace
}  // namespace strata::tokenizer
