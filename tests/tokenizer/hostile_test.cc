// Hostile tokenizer metadata (written into GGUF images here) is refused with
// a message naming the key; hostile text (invalid UTF-8 of every kind) never
// crashes a tokenizer and gives byte tokens or U+FFFD as llama.cpp does, or a
// clear error with strict_utf8.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace strata::tokenizer {
namespace {

using testing::GgufImage;
using testing::tokenizer_from_image;

std::vector<std::string> some_tokens(size_t n) {
  std::vector<std::string> t;
  for (size_t i = 0; i < n; ++i) t.push_back("t" + std::to_string(i));
  return t;
}

// A valid SentencePiece image; `mutate` changes it before it is written.
std::vector<uint8_t> spm_image(
    const std::function<void(GgufImage&)>& extra = {},
    bool with_tokens = true) {
  GgufImage g;
  g.add_string("general.architecture", "llama");
  g.add_string("tokenizer.ggml.model", "llama");
  if (with_tokens) {
    g.add_strings("tokenizer.ggml.tokens", some_tokens(8));
    g.add_f32s("tokenizer.ggml.scores", std::vector<float>(8, 0.0f));
    g.add_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(8, 1));
  }
  if (extra) extra(g);
  return g.bytes();
}

void expect_refused_naming(const std::vector<uint8_t>& image,
                           std::string_view key) {
  auto tok = tokenizer_from_image(image);
  ASSERT_FALSE(tok.ok()) << "accepted a file whose " << key << " is bad";
  EXPECT_NE(std::string(tok.status().message()).find(key), std::string::npos)
      << "message does not name " << key << ": " << tok.status();
}

TEST(HostileMetadata, ValidImageLoads) {
  auto tok = tokenizer_from_image(spm_image());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->n_tokens(), 8);
}

TEST(HostileMetadata, MissingKeysAreNamed) {
  expect_refused_naming(spm_image({}, /*with_tokens=*/false),
                        "tokenizer.ggml.tokens");
  GgufImage g;
  g.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  expect_refused_naming(g.bytes(), "tokenizer.ggml.model");
  GgufImage bpe;
  bpe.add_string("tokenizer.ggml.model", "gpt2");
  bpe.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  expect_refused_naming(bpe.bytes(), "tokenizer.ggml.merges");
}

TEST(HostileMetadata, WrongTypesAreNamed) {
  GgufImage tokens_as_ints;
  tokens_as_ints.add_string("tokenizer.ggml.model", "llama");
  tokens_as_ints.add_i32s("tokenizer.ggml.tokens", {1, 2, 3});
  expect_refused_naming(tokens_as_ints.bytes(), "tokenizer.ggml.tokens");

  GgufImage model_as_int;
  model_as_int.add_u32("tokenizer.ggml.model", 1);
  model_as_int.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  expect_refused_naming(model_as_int.bytes(), "tokenizer.ggml.model");

  GgufImage scores_as_strings;
  scores_as_strings.add_string("tokenizer.ggml.model", "llama");
  scores_as_strings.add_strings("tokenizer.ggml.tokens", some_tokens(3));
  scores_as_strings.add_strings("tokenizer.ggml.scores", {"a", "b", "c"});
  expect_refused_naming(scores_as_strings.bytes(), "tokenizer.ggml.scores");

  GgufImage types_as_floats;
  types_as_floats.add_string("tokenizer.ggml.model", "llama");
  types_as_floats.add_strings("tokenizer.ggml.tokens", some_tokens(3));
  types_as_floats.add_f32s("tokenizer.ggml.token_type", {1, 1, 1});
  expect_refused_naming(types_as_floats.bytes(), "tokenizer.ggml.token_type");

  expect_refused_naming(spm_image([](GgufImage& g) {
                          g.add_string("tokenizer.ggml.bos_token_id", "1");
                        }),
                        "tokenizer.ggml.bos_token_id");
  expect_refused_naming(spm_image([](GgufImage& g) {
                          g.add_u32("tokenizer.ggml.add_bos_token", 1);
                        }),
                        "tokenizer.ggml.add_bos_token");

  GgufImage merges_as_ints;
  merges_as_ints.add_string("tokenizer.ggml.model", "gpt2");
  merges_as_ints.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  merges_as_ints.add_i32s("tokenizer.ggml.merges", {0, 1});
  expect_refused_naming(merges_as_ints.bytes(), "tokenizer.ggml.merges");
}

TEST(HostileMetadata, ShortPerTokenArraysAreNamed) {
  GgufImage short_scores;
  short_scores.add_string("tokenizer.ggml.model", "llama");
  short_scores.add_strings("tokenizer.ggml.tokens", some_tokens(8));
  short_scores.add_f32s("tokenizer.ggml.scores", {0, 0, 0});
  expect_refused_naming(short_scores.bytes(), "tokenizer.ggml.scores");

  GgufImage short_types;
  short_types.add_string("tokenizer.ggml.model", "llama");
  short_types.add_strings("tokenizer.ggml.tokens", some_tokens(8));
  short_types.add_i32s("tokenizer.ggml.token_type", {1});
  expect_refused_naming(short_types.bytes(), "tokenizer.ggml.token_type");

  // The same checks on a Vocabulary filled by hand.
  Vocabulary v;
  v.tokens = some_tokens(4);
  v.scores = {0.0f};
  EXPECT_NE(validate_vocabulary(v).message().find("tokenizer.ggml.scores"),
            std::string::npos);
  v.scores.clear();
  v.types = {1, 1};
  EXPECT_NE(validate_vocabulary(v).message().find("tokenizer.ggml.token_type"),
            std::string::npos);
}

// As llama.cpp's llama_vocab::load: a special-token id outside the
// vocabulary (8 of 8 tokens, or -1 written as UINT32 4294967295, which
// converters use for "none") is read as absent; a value that is not a
// UINT32 is refused, naming the key (the GGUF key table's rule). (Absent ids then take the model's
// defaults: the special tokens equal those of the file without the key.)
TEST(HostileMetadata, SpecialIdsOutOfRangeAreAbsent) {
  auto plain = tokenizer_from_image(spm_image());
  ASSERT_TRUE(plain.ok()) << plain.status();
  const SpecialTokens& want = (*plain)->special();
  for (const char* key :
       {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.eot_token_id", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.fim_pre_token_id"}) {
    for (uint32_t id : {8u, 4294967295u}) {
      auto tok = tokenizer_from_image(
          spm_image([&](GgufImage& g) { g.add_u32(key, id); }));
      ASSERT_TRUE(tok.ok()) << key << " = " << id << ": " << tok.status();
      const SpecialTokens& got = (*tok)->special();
      EXPECT_EQ(got.bos, want.bos) << key << " = " << id;
      EXPECT_EQ(got.eos, want.eos) << key << " = " << id;
      EXPECT_EQ(got.unk, want.unk) << key << " = " << id;
      EXPECT_EQ(got.pad, want.pad) << key << " = " << id;
      EXPECT_EQ(got.eot, want.eot) << key << " = " << id;
      EXPECT_EQ(got.sep, want.sep) << key << " = " << id;
      EXPECT_EQ(got.fim_pre, want.fim_pre) << key << " = " << id;
    }
    expect_refused_naming(
        spm_image([key](GgufImage& g) { g.add_string(key, "2"); }), key);
  }
}

TEST(HostileMetadata, InconsistentVocabulariesAreNamed) {
  GgufImage duplicate;
  duplicate.add_string("tokenizer.ggml.model", "llama");
  duplicate.add_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
  expect_refused_naming(duplicate.bytes(), "tokenizer.ggml.tokens");

  GgufImage empty;
  empty.add_string("tokenizer.ggml.model", "llama");
  empty.add_strings("tokenizer.ggml.tokens", {});
  expect_refused_naming(empty.bytes(), "tokenizer.ggml.tokens");

  GgufImage unknown_model;
  unknown_model.add_string("tokenizer.ggml.model", "rwkv");
  unknown_model.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  expect_refused_naming(unknown_model.bytes(), "tokenizer.ggml.model");

  GgufImage unknown_pre;
  unknown_pre.add_string("tokenizer.ggml.model", "gpt2");
  unknown_pre.add_string("tokenizer.ggml.pre", "nonesuch");
  unknown_pre.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  unknown_pre.add_strings("tokenizer.ggml.merges", {});
  expect_refused_naming(unknown_pre.bytes(), "tokenizer.ggml.pre");

  // add_bos with no BOS id (and the default id 11 out of range).
  GgufImage bos_missing;
  bos_missing.add_string("tokenizer.ggml.model", "gpt2");
  bos_missing.add_strings("tokenizer.ggml.tokens", some_tokens(4));
  bos_missing.add_strings("tokenizer.ggml.merges", {});
  bos_missing.add_bool("tokenizer.ggml.add_bos_token", true);
  expect_refused_naming(bos_missing.bytes(), "tokenizer.ggml.bos_token_id");
}

TEST(HostileMetadata, OddButHarmlessVocabulariesStillWork) {
  // Empty token texts are renamed as llama.cpp renames them; merges without
  // a space, with spaces, or naming unknown texts are ignored; token types
  // out of range are undefined; a huge token is just long.
  GgufImage g;
  g.add_string("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(unicode::byte_to_unicode(static_cast<uint8_t>(b)));
  }
  tokens.push_back("");
  tokens.push_back(std::string(100000, 'x'));
  g.add_strings("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  types[10] = 99;
  types[11] = -7;
  g.add_i32s("tokenizer.ggml.token_type", types);
  g.add_strings("tokenizer.ggml.merges",
                {"nospace", " leading", "a b c", "x x", "", "zz top"});
  auto tok = tokenizer_from_image(g.bytes());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->token_text(256), "[EMPTY_256]");
  auto ids = (*tok)->encode("xxxx hello \n\t 123");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_FALSE(ids->empty());
}

// Every kind of broken UTF-8, through SentencePiece and BPE vocabularies:
// never a crash; SentencePiece keeps the bytes (byte tokens); strict mode
// refuses exactly the inputs that are not valid UTF-8.
std::vector<std::string> broken_inputs() {
  std::vector<std::string> in = {"\x80",
                                 "abc\x80",
                                 "\xC3",
                                 "\xC3(",
                                 "\xE2\x82",
                                 "\xE2\x82(",
                                 "\xF0\x9F\x98",
                                 "\xF0\x9F",
                                 "\xED\xA0\x80",
                                 "\xED\xA0\xBD\xED\xB8\x80",
                                 "\xED\xBF\xBF",
                                 "\xC0\x80",
                                 "\xC1\xBF",
                                 "\xE0\x80\x80",
                                 "\xF0\x80\x80\x80",
                                 "\xF4\x90\x80\x80",
                                 "\xF5\x80\x80\x80",
                                 "\xF7\xBF\xBF\xBF",
                                 "\xF8\x88\x80\x80\x80",
                                 "\xFC\x84\x80\x80\x80\x80",
                                 "\xFE",
                                 "\xFF",
                                 "\xFF\xFE\xFD",
                                 std::string("\x00\x80", 2),
                                 "<|im_start|>\xE2\x82",
                                 "\xE2\x82<|im_end|>",
                                 "  \x80  \x80\t\x80\n"};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(1, 40);
  for (int i = 0; i < 3000; ++i) {
    std::string s(length(rng), '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    in.push_back(std::move(s));
  }
  return in;
}

void check_broken_inputs(const Tokenizer& tok) {
  for (const std::string& text : broken_inputs()) {
    for (bool parse_special : {false, true}) {
      auto ids = tok.encode(
          text, {.add_special = true, .parse_special = parse_special});
      ASSERT_TRUE(ids.ok()) << ids.status();
      for (TokenId id : *ids) ASSERT_TRUE(tok.is_valid(id));
      auto text_back = tok.decode(*ids);
      ASSERT_TRUE(text_back.ok());
      EXPECT_EQ(unicode::find_invalid_utf8(*text_back), std::string::npos);
      if (tok.model() == TokenizerModel::kSentencePiece && !parse_special &&
          text.find("\xE2\x96\x81") == std::string::npos) {
        // Byte fallback keeps every byte. (Spaces become U+2581 before the
        // text is cut into characters, so a stray lead byte can swallow part
        // of one and it comes back as U+2581's bytes, as in llama.cpp.)
        auto bytes = tok.decode_bytes(*ids);
        ASSERT_TRUE(bytes.ok());
        std::string spaced = *bytes;
        for (size_t at;
             (at = spaced.find("\xE2\x96\x81")) != std::string::npos;) {
          spaced.replace(at, 3, " ");
        }
        EXPECT_EQ(spaced, text);
      }
    }
    auto strict = tok.encode(text, {.strict_utf8 = true});
    EXPECT_EQ(strict.ok(),
              unicode::find_invalid_utf8(text) == std::string::npos);
  }
}

TEST(HostileText, SyntheticVocabulariesNeverCrash) {
  Vocabulary spm;
  spm.model = TokenizerModel::kSentencePiece;
  spm.tokens = {"<unk>", "<s>", "</s>"};
  spm.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    spm.tokens.push_back(name);
    spm.types.push_back(6);
  }
  spm.tokens.push_back("\xE2\x96\x81");
  spm.types.push_back(1);
  auto spm_tok = Tokenizer::create(spm);
  ASSERT_TRUE(spm_tok.ok()) << spm_tok.status();
  check_broken_inputs(**spm_tok);

  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm",
                          "deepseek-coder", "falcon", "default", "tekken"}) {
    Vocabulary bpe;
    bpe.model = TokenizerModel::kBytePair;
    bpe.pre = pre;
    for (int b = 0; b < 256; ++b) {
      bpe.tokens.emplace_back(
          unicode::byte_to_unicode(static_cast<uint8_t>(b)));
    }
    bpe.tokens.push_back("<|im_end|>");
    bpe.special.bos = 256;
    auto bpe_tok = Tokenizer::create(bpe);
    ASSERT_TRUE(bpe_tok.ok()) << bpe_tok.status();
    SCOPED_TRACE(pre);
    check_broken_inputs(**bpe_tok);
  }
}

TEST(HostileText, RealModelsNeverCrash) {
  int checked = 0;
  for (const char* name :
       {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    const auto path = testing::models_dir() / name;
    if (!std::filesystem::exists(path)) continue;
    auto vocab = testing::load_vocabulary(path);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    auto tok = Tokenizer::create(*std::move(vocab));
    ASSERT_TRUE(tok.ok()) << tok.status();
    SCOPED_TRACE(name);
    check_broken_inputs(**tok);
    ++checked;
  }
  if (checked == 0) {
    GTEST_SKIP() << "no real model in " << testing::models_dir();
  }
}

}  // namespace
}  // namespace strata::tokenizer
