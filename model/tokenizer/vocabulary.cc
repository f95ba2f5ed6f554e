#include "model/tokenizer/vocabulary.h"

#include <limits>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "model/tokenizer/text_util.h"
#include "model/tokenizer/vocabulary_keys.h"

namespace strata::tokenizer {

std::string effective_token_text(const std::string& text, size_t id) {
  // llama.cpp renames empty tokens so that every id keeps a distinct text.
  if (!text.empty()) return text;
  return cat("[EMPTY_", id, "]");
}

std::vector<SpecialSlot> special_slots(SpecialTokens& s) {
  return {
      {keys::kBosId, &s.bos},        {keys::kEosId, &s.eos},
      {keys::kEotId, &s.eot},        {keys::kEomId, &s.eom},
      {keys::kUnkId, &s.unk},        {keys::kSepId, &s.sep},
      {keys::kPadId, &s.pad},        {keys::kMaskId, &s.mask},
      {keys::kFimPreId, &s.fim_pre}, {keys::kFimSufId, &s.fim_suf},
      {keys::kFimMidId, &s.fim_mid}, {keys::kFimPadId, &s.fim_pad},
      {keys::kFimRepId, &s.fim_rep}, {keys::kFimSepId, &s.fim_sep},
  };
}

absl::Status validate_vocabulary(const Vocabulary& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) {
    return absl::InvalidArgumentError(cat(keys::kTokens, ": no tokens"));
  }
  if (n > static_cast<size_t>(std::numeric_limits<TokenId>::max())) {
    return absl::InvalidArgumentError(
        cat(keys::kTokens, ": ", n, " tokens, more than ids hold"));
  }
  if (!vocab.scores.empty() && vocab.scores.size() < n) {
    return absl::InvalidArgumentError(
        cat(keys::kScores, ": ", vocab.scores.size(),
            " entries, fewer than the ", n, " tokens"));
  }
  if (!vocab.types.empty() && vocab.types.size() < n) {
    return absl::InvalidArgumentError(
        cat(keys::kTokenType, ": ", vocab.types.size(),
            " entries, fewer than the ", n, " tokens"));
  }
  absl::flat_hash_map<std::string, size_t> seen;
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] =
        seen.emplace(effective_token_text(vocab.tokens[i], i), i);
    if (!inserted) {
      return absl::InvalidArgumentError(cat(keys::kTokens, ": token ", i,
                                            " repeats the text of token ",
                                            it->second));
    }
  }
  SpecialTokens special = vocab.special;
  for (const SpecialSlot& slot : special_slots(special)) {
    if (!slot.id->has_value()) continue;
    const TokenId id = **slot.id;
    if (id < 0 || static_cast<size_t>(id) >= n) {
      return absl::InvalidArgumentError(
          cat(slot.key, ": id ", id, " out of range for ", n, " tokens"));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::tokenizer
