// GGUF key names of the tokenizer metadata and small helpers shared by the
// vocabulary loader and the tokenizers. Internal to model/tokenizer/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocabulary.h"

namespace strata::tokenizer {
namespace keys {

inline constexpr std::string_view kModel = "tokenizer.ggml.model";
inline constexpr std::string_view kPre = "tokenizer.ggml.pre";
inline constexpr std::string_view kTokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view kScores = "tokenizer.ggml.scores";
inline constexpr std::string_view kTokenType = "tokenizer.ggml.token_type";
inline constexpr std::string_view kMerges = "tokenizer.ggml.merges";
inline constexpr std::string_view kBosId = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view kEosId = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view kEotId = "tokenizer.ggml.eot_token_id";
inline constexpr std::string_view kEomId = "tokenizer.ggml.eom_token_id";
inline constexpr std::string_view kUnkId = "tokenizer.ggml.unknown_token_id";
// (sic: the GGUF key is spelled so)
inline constexpr std::string_view kSepId = "tokenizer.ggml.seperator_token_id";
inline constexpr std::string_view kPadId = "tokenizer.ggml.padding_token_id";
inline constexpr std::string_view kMaskId = "tokenizer.ggml.mask_token_id";
inline constexpr std::string_view kFimPreId = "tokenizer.ggml.fim_pre_token_id";
inline constexpr std::string_view kFimSufId = "tokenizer.ggml.fim_suf_token_id";
inline constexpr std::string_view kFimMidId = "tokenizer.ggml.fim_mid_token_id";
inline constexpr std::string_view kFimPadId = "tokenizer.ggml.fim_pad_token_id";
inline constexpr std::string_view kFimRepId = "tokenizer.ggml.fim_rep_token_id";
inline constexpr std::string_view kFimSepId = "tokenizer.ggml.fim_sep_token_id";
inline constexpr std::string_view kAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr std::string_view kAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr std::string_view kAddSpacePrefix =
    "tokenizer.ggml.add_space_prefix";
inline constexpr std::string_view kGeneralName = "general.name";

}  // namespace keys

// One special-token id together with the key that sets it.
struct SpecialSlot {
  std::string_view key;
  std::optional<TokenId>* id;
};
std::vector<SpecialSlot> special_slots(SpecialTokens& s);

// A token's text as the tokenizer uses it: empty texts become
// "[EMPTY_<id>]", as llama.cpp renames them.
std::string effective_token_text(const std::string& text, size_t id);

}  // namespace strata::tokenizer
