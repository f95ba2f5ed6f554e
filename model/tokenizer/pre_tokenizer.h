// BPE pre-tokenizer: splits text into words before byte-pair merging, chosen
// by `tokenizer.ggml.pre` the way llama.cpp chooses it (src/llama-vocab.cpp,
// llm_tokenizer_bpe; src/unicode.cpp, unicode_regex_split). A pre-tokenizer
// is a list of steps; each step cuts every piece the previous steps left
// into smaller pieces (matches and the gaps between them). A step is a
// regex (see regex_split.h) or one of llama.cpp's two hand-written
// splitters, which replace the GPT-2 and Llama-3 patterns:
//
//   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
//            \s+(?!\S)|\s+
//   Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
//            \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Input that is not valid UTF-8 is decoded as llama.cpp decodes it (see
// unicode::decode_lenient), so each bad byte becomes U+FFFD.
//
// Thread-safety: immutable after create(); split_words() may run on many
// threads at once.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/regex_split.h"

namespace strata::tokenizer {

class PreTokenizer {
 public:
  // `name` is tokenizer.ggml.pre; "" and "default" give llama.cpp's default
  // steps. Unimplemented for a name this build does not know.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> create(
      std::string_view name);

  // Names create() accepts, for messages and documentation.
  static std::vector<std::string_view> known_names();

  // Splits `text` into words, each the UTF-8 of its codepoints written in
  // the GPT-2 byte-to-unicode alphabet (so a word never holds a raw space).
  // Errors only when a regex step gives up (ResourceExhausted).
  absl::StatusOr<std::vector<std::string>> split_words(
      std::string_view text) const;

  // Codepoint pieces before the byte-to-unicode step (for tests): lengths in
  // codepoints that tile decode_lenient(text).
  absl::StatusOr<std::vector<size_t>> split_codepoints(
      std::span<const uint32_t> cps) const;

  // llama.cpp flags that go with the name.
  bool ignore_merges() const { return ignore_merges_; }  // whole-word tokens
  bool adds_bos_by_default() const { return add_bos_; }
  const std::string& name() const { return name_; }

  ~PreTokenizer();

 private:
  enum class StepKind { kRegex, kGpt2, kLlama3 };
  struct Step {
    StepKind kind;
    std::unique_ptr<RegexSplit> regex;  // kRegex only
  };
  PreTokenizer() = default;

  std::string name_;
  std::vector<Step> steps_;
  bool ignore_merges_ = false;
  bool add_bos_ = false;
  bool needs_collapsed_ = false;
  bool needs_folded_ = false;
};

}  // namespace strata::tokenizer
