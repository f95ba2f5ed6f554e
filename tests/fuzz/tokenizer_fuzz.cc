// libFuzzer target: the tokenizers (model/tokenizer/) on arbitrary text, as
// every prompt and Tokenize request brings it, over the vocabularies of
// llama.cpp's conformance set (../shared/conformance/tokenizer: SPM, BPE of
// several pre-tokenizers) and SmolLM2's and Gemma 3's when fetched.
//
// Input: one byte choosing the vocabulary (modulo those present), then the
// text.
//
// Asserted, beyond no crash and no sanitizer report:
//   - encode never fails without strict_utf8 and gives valid ids; with it,
//     it fails exactly when the text is not well-formed UTF-8;
//   - decode inverts encode on well-formed UTF-8 (with and without BOS/EOS)
//     for a vocabulary that round-trips every character tried at setup (one
//     that lacks a character drops it, as llama.cpp does: falcon's U+000B)
//     and for a text without U+2581 where SentencePiece reads that as a space;
//   - the ids streamed one at a time (StreamDecoder) give chunks of valid
//     UTF-8 that join to decode().
// Seeds: corpus/tokenizer/ (make_fuzz_seeds).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf_reader.h"
#include "model/tokenizer/stream_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace strata;  // NOLINT: a test harness
using fuzz::check;

struct Vocab {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // Whether every character tried at setup (lossless(): every byte value
  // but NUL, in some character) comes back from decode(encode()). Not every
  // vocabulary can: falcon's has no token for U+000B, starcoder's none for
  // the byte F1, and they drop them, as llama.cpp does. Only these must
  // round-trip.
  bool lossless = false;
  // SentencePiece writes a space as U+2581 and reads U+2581 back as a space
  // (llama.cpp too): a text holding one cannot round-trip.
  bool space_symbol_is_space = false;
};

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581

bool round_trips(const tokenizer::Tokenizer& tok, std::string_view text) {
  auto ids = tok.encode(text, {.add_special = false});
  if (!ids.ok()) return false;
  auto back = tok.decode(*ids);
  return back.ok() && *back == text;
}

// Every byte but NUL in some character: ASCII, U+0080..U+00BF (each
// continuation byte), and each lead byte C2..F4 with its first valid
// continuations.
bool lossless(const tokenizer::Tokenizer& tok) {
  std::vector<std::string> chars;
  for (int c = 1; c < 0x80; ++c) chars.emplace_back(1, static_cast<char>(c));
  for (int c = 0x80; c < 0xC0; ++c) chars.push_back({'\xC2', static_cast<char>(c)});
  for (int lead = 0xC2; lead <= 0xF4; ++lead) {
    const char l = static_cast<char>(lead);
    if (lead < 0xE0) chars.push_back({l, '\x80'});
    else if (lead == 0xE0) chars.push_back({l, '\xA0', '\x80'});
    else if (lead < 0xF0) chars.push_back({l, '\x80', '\x80'});
    else if (lead == 0xF0) chars.push_back({l, '\x90', '\x80', '\x80'});
    else chars.push_back({l, '\x80', '\x80', '\x80'});
  }
  for (const std::string& c : chars) {
    if (!round_trips(tok, c)) return false;
  }
  return true;
}

const std::vector<Vocab>& tokenizers() {
  static const auto* all = [] {
    auto* v = new std::vector<Vocab>;
    std::vector<std::filesystem::path> paths;
    for (const char* name : {"llama-spm", "phi-3", "gpt-2", "falcon", "deepseek-coder",
                             "deepseek-llm", "mpt", "refact", "starcoder"}) {
      paths.push_back(testing::shared_dir() / "conformance" / "tokenizer" /
                      (std::string("ggml-vocab-") + name + ".gguf"));
    }
    paths.push_back(testing::models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf");
    paths.push_back(testing::models_dir() / "gemma-3-270m-q4_k_m.gguf");
    paths.push_back(fuzz::stories_path());
    for (const auto& path : paths) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) continue;
      auto model = gguf::GgufModel::open(path.string());
      fuzz::require(model.ok(), path.string() + ": " + model.status().ToString());
      auto tok = tokenizer::Tokenizer::from_gguf((*model)->first());
      fuzz::require(tok.ok(), path.string() + ": " + tok.status().ToString());
      const bool whole = lossless(**tok);
      fuzz::note(path.filename().string() + (whole ? ": lossless" : ": drops some characters"));
      const bool spm_space = !round_trips(**tok, kSpaceSymbol);
      v->push_back({std::move(*tok), whole, spm_space});
    }
    fuzz::require(!v->empty(), "no tokenizer vocabulary found");
    return v;
  }();
  return *all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > (64u << 10)) return 0;
  const auto& all = tokenizers();
  const Vocab& vocab = all[data[0] % all.size()];
  const tokenizer::Tokenizer& tok = *vocab.tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool valid = tokenizer::unicode::find_invalid_utf8(text) == std::string::npos;

  auto strict = tok.encode(text, {.add_special = false, .strict_utf8 = true});
  check(strict.ok() == valid, "strict encode fails exactly on malformed UTF-8");
  for (bool add_special : {false, true}) {
    auto ids = tok.encode(text, {.add_special = add_special});
    check(ids.ok(), "lenient encode never fails");
    for (int32_t id : *ids) check(tok.is_valid(id), "encode gives tokens");
    auto back = tok.decode(*ids);
    check(back.ok(), "decode of encoded ids succeeds");
    const bool must_round_trip =
        valid && vocab.lossless &&
        !(vocab.space_symbol_is_space && text.find(kSpaceSymbol) != std::string_view::npos);
    if (must_round_trip && *back != text) {
      std::fprintf(stderr, "text    (%zu bytes): %.*s\ndecoded (%zu bytes): %s\n", text.size(),
                   static_cast<int>(text.size()), text.data(), back->size(), back->c_str());
    }
    check(!must_round_trip || *back == text, "decode inverts encode on well-formed UTF-8");

    tokenizer::StreamDecoder stream(tok);
    std::string joined;
    for (int32_t id : *ids) {
      auto chunk = stream.push(id);
      check(chunk.ok(), "a valid id streams");
      check(tokenizer::unicode::find_invalid_utf8(*chunk) == std::string::npos,
            "a streamed chunk is valid UTF-8");
      joined += *chunk;
    }
    joined += stream.finish();
    check(joined == *back, "the streamed chunks join to decode()");
  }
  fuzz::note(!valid ? "malformed UTF-8" : vocab.lossless ? "round trip" : "well-formed, lossy vocabulary");
  return 0;
}
