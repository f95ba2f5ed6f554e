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
//   - decode inverts encode on well-formed UTF-8 (with and without BOS/EOS;
//     the guarantee every prompt echo and every OpenAI `prompt` replay
//     relies on);
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

const std::vector<std::unique_ptr<tokenizer::Tokenizer>>& tokenizers() {
  static const auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<tokenizer::Tokenizer>>;
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
      v->push_back(std::move(*tok));
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
  const tokenizer::Tokenizer& tok = *all[data[0] % all.size()];
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
    if (valid && *back != text) {
      std::fprintf(stderr, "text    (%zu bytes): %.*s\ndecoded (%zu bytes): %s\n", text.size(),
                   static_cast<int>(text.size()), text.data(), back->size(), back->c_str());
    }
    check(!valid || *back == text, "decode inverts encode on well-formed UTF-8");

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
  fuzz::note(valid ? "round trip" : "malformed UTF-8");
  return 0;
}
