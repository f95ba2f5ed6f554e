// Constructors of the two Tokenizer implementations. Internal to
// model/tokenizer/: callers use Tokenizer::create().
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {

// `vocab` has passed validate_vocabulary() and has its defaults filled in;
// its contents are moved from.
std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocabulary& vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(
    Vocabulary& vocab, std::unique_ptr<PreTokenizer> pre);

// One symbol of a word being merged (SentencePiece and BPE alike): a
// doubly linked list over the word's bytes.
struct MergeSymbol {
  int prev;
  int next;
  size_t begin;
  size_t size;  // bytes; 0 once merged into its left neighbour
};

// The word cut into one symbol per UTF-8 sequence (a truncated last sequence
// is one short symbol), linked left to right.
inline std::vector<MergeSymbol> utf8_symbols(std::string_view word) {
  std::vector<MergeSymbol> symbols;
  symbols.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = std::min(
        unicode::sequence_length_from_lead(static_cast<uint8_t>(word[pos])),
        word.size() - pos);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back(
        {index - 1, pos + len == word.size() ? -1 : index + 1, pos, len});
    pos += len;
  }
  return symbols;
}

}  // namespace strata::tokenizer
