// One regex step of a BPE pre-tokenizer, matched the way llama.cpp matches
// it (src/unicode.cpp, unicode_regex_split), so that words split the same:
//
//   - A pattern that names a Unicode category (\p{L}, \p{N}, \p{P}, \p{M},
//     \p{S}, \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo}) runs on a "collapsed"
//     text: ASCII stays itself, other whitespace becomes 0x0B, and any other
//     codepoint becomes one code for its category (0xD1 number, 0xD2 letter,
//     0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 anything else). The
//     pattern is rewritten to match: \p{X} becomes [<code><ASCII members>].
//     Such a pattern must be ASCII.
//   - Any other pattern runs on the codepoints, with non-ASCII whitespace
//     replaced by 0x0B (so \s, which is ASCII-only, still sees it).
//   - Matching is ECMAScript-like leftmost-first with backtracking; both the
//     matches and the gaps between them become pieces, and no match crosses
//     the boundary of a piece from an earlier step.
//
// Matching uses PCRE2 (32-bit code units, no UTF, no UCP), so any 32-bit
// value, surrogates included, is a valid subject character.
//
// Thread-safety: a compiled RegexSplit is immutable; split() may run on many
// threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::tokenizer {

// The collapsed form of `cps` described above (one unit per codepoint).
std::vector<uint32_t> collapse_codepoints(std::span<const uint32_t> cps);
// `cps` with every non-ASCII whitespace codepoint replaced by 0x0B.
std::vector<uint32_t> fold_whitespace(std::span<const uint32_t> cps);

class RegexSplit {
 public:
  // InvalidArgument when the pattern does not compile (PCRE2's message and
  // offset) or mixes a category with non-ASCII text.
  static absl::StatusOr<std::unique_ptr<RegexSplit>> compile(
      std::string_view pattern);
  ~RegexSplit();
  RegexSplit(const RegexSplit&) = delete;
  RegexSplit& operator=(const RegexSplit&) = delete;

  // Whether split() wants collapse_codepoints() or fold_whitespace() text.
  bool uses_collapsed_text() const { return collapsed_; }

  // `pieces` are lengths (in units) that tile `text`; the result tiles it
  // the same way, each piece cut at the matches. ResourceExhausted when PCRE2
  // gives up (match limit), with the pattern in the message.
  absl::StatusOr<std::vector<size_t>> split(
      std::span<const uint32_t> text, std::span<const size_t> pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  RegexSplit() = default;

  std::string pattern_;
  bool collapsed_ = false;
  void* code_ = nullptr;  // pcre2_code_32*, owned
};

}  // namespace strata::tokenizer
