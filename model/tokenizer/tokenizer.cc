// The parts both tokenizers share: building from a Vocabulary, token
// attributes, cutting special tokens out of the text, and decoding.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "model/tokenizer/text_util.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode.h"
#include "model/tokenizer/vocabulary_keys.h"

namespace strata::tokenizer {
namespace {

// Token texts llama.cpp recognises (src/llama-vocab.cpp, llama_vocab::impl::
// load): end of turn, end of message, fill-in-the-middle, end of generation.
// Each such token becomes a control token.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>",  "<fim-prefix>",
    "<fim_prefix>",    "<\uFF5Cfim\u2581begin\uFF5C>",
    "<PRE>",           "\u2581<PRE>",
    "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>",  "<fim-suffix>",
    "<fim_suffix>",    "<\uFF5Cfim\u2581hole\uFF5C>",
    "<SUF>",           "\u2581<SUF>",
    "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>",  "<fim-middle>",
    "<fim_middle>",    "<\uFF5Cfim\u2581end\uFF5C>",
    "<MID>",           "\u2581<MID>",
    "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>",
                                             "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
    "[e~["};
// gpt-oss: always rendered, so user-defined.
constexpr std::string_view kAlwaysRendered[] = {"<|channel|>", "<|message|>",
                                                "<|start|>", "<|constrain|>"};

template <size_t N>
bool one_of(const std::string_view (&list)[N], std::string_view text) {
  return std::find(std::begin(list), std::end(list), text) != std::end(list);
}

uint32_t attr_of_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

// C isspace() in the "C" locale, which llama.cpp's strip attributes use.
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::create(Vocabulary vocab) {
  if (absl::Status s = validate_vocabulary(vocab); !s.ok()) return s;
  const auto n = static_cast<TokenId>(vocab.tokens.size());
  const bool spm = vocab.model == TokenizerModel::kSentencePiece;
  std::unique_ptr<PreTokenizer> pre;
  if (!spm) {
    absl::StatusOr<std::unique_ptr<PreTokenizer>> made =
        PreTokenizer::create(vocab.pre);
    if (!made.ok()) return made.status();
    pre = *std::move(made);
  }
  // llama.cpp's defaults for ids the file leaves unset (used when in range).
  auto fill = [n](std::optional<TokenId>& slot, TokenId id) {
    if (!slot.has_value() && id < n) slot = id;
  };
  fill(vocab.special.bos, spm ? 1 : 11);
  fill(vocab.special.eos, spm ? 2 : 11);
  if (spm) fill(vocab.special.unk, 0);
  vocab.add_bos = vocab.add_bos.value_or(spm || pre->adds_bos_by_default());
  vocab.add_eos = vocab.add_eos.value_or(false);
  vocab.add_space_prefix = vocab.add_space_prefix.value_or(spm);
  if (*vocab.add_bos && !vocab.special.bos.has_value()) {
    return absl::InvalidArgumentError(
        cat(keys::kAddBos, " is true, but ", keys::kBosId, " is not set"));
  }
  if (*vocab.add_eos && !vocab.special.eos.has_value()) {
    return absl::InvalidArgumentError(
        cat(keys::kAddEos, " is true, but ", keys::kEosId, " is not set"));
  }
  if (spm) return make_spm_tokenizer(vocab);
  return make_bpe_tokenizer(vocab, std::move(pre));
}

Tokenizer::Tokenizer(Vocabulary& vocab)
    : model_(vocab.model),
      special_(vocab.special),
      add_bos_(vocab.add_bos.value_or(false)),
      add_eos_(vocab.add_eos.value_or(false)),
      add_space_prefix_(vocab.add_space_prefix.value_or(false)) {
  const size_t n = vocab.tokens.size();
  tokens_.resize(n);
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tokens_[i] = effective_token_text(vocab.tokens[i], i);
    ids_.emplace(tokens_[i], static_cast<TokenId>(i));
  }
  scores_ = std::move(vocab.scores);
  scores_.resize(n, 0.0f);
  derive_attributes(vocab);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::derive_attributes(const Vocabulary& vocab) {
  const size_t n = tokens_.size();
  attrs_.assign(n, kAttrNormal);
  if (!vocab.types.empty()) {
    for (size_t i = 0; i < n; ++i) attrs_[i] = attr_of_type(vocab.types[i]);
  }
  // Ids the file does not set are found by text; such a token becomes a
  // control token. (llama.cpp takes the first match in hash order; we take
  // the lowest id.)
  auto detect = [this, n](std::optional<TokenId>& slot, const auto& texts) {
    if (slot.has_value()) return;
    for (size_t i = 0; i < n; ++i) {
      if (one_of(texts, tokens_[i])) {
        slot = static_cast<TokenId>(i);
        attrs_[i] |= kAttrControl;
        return;
      }
    }
  };
  detect(special_.eot, kEotTexts);
  detect(special_.eom, kEomTexts);
  detect(special_.fim_pre, kFimPreTexts);
  detect(special_.fim_suf, kFimSufTexts);
  detect(special_.fim_mid, kFimMidTexts);
  detect(special_.fim_pad, kFimPadTexts);
  detect(special_.fim_rep, kFimRepTexts);
  detect(special_.fim_sep, kFimSepTexts);
  for (size_t i = 0; i < n; ++i) {
    if ((attrs_[i] & kAttrControl) &&
        tokens_[i].find("unused") != std::string::npos) {
      attrs_[i] |= kAttrUnused;
    }
  }

  std::vector<TokenId> eog;
  for (const auto& id : {special_.fim_pad, special_.fim_rep, special_.fim_sep,
                         special_.eos, special_.eot, special_.eom}) {
    if (id.has_value()) eog.push_back(*id);
  }
  for (size_t i = 0; i < n; ++i) {
    if (one_of(kEogTexts, tokens_[i])) {
      eog.push_back(static_cast<TokenId>(i));
      attrs_[i] |= kAttrControl;
    }
    if (one_of(kAlwaysRendered, tokens_[i])) attrs_[i] = kAttrUserDefined;
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  auto eog_id = [&](std::string_view text) -> TokenId {
    for (TokenId id : eog) {
      if (tokens_[id] == text) return id;
    }
    return -1;
  };
  // o200k_harmony / solar-open: "<|end|>" does not end generation there.
  const TokenId end_id = eog_id("<|end|>");
  const bool has_call = eog_id("<|call|>") >= 0 || eog_id("<|calls|>") >= 0;
  if (end_id >= 0 && has_call &&
      (eog_id("<|return|>") >= 0 || eog_id("<|flush|>") >= 0)) {
    eog.erase(std::find(eog.begin(), eog.end(), end_id));
    attrs_[end_id] = kAttrUserDefined;
  }
  // Gemma 4: "</s>" is an ordinary token there.
  const TokenId s_id = eog_id("</s>");
  if (s_id >= 0 && eog_id("<|tool_response>") >= 0) {
    eog.erase(std::find(eog.begin(), eog.end(), s_id));
    attrs_[s_id] = kAttrNormal;
  }
  end_of_generation_ = std::move(eog);

  // Cut order: longest text first. std::sort over ids in increasing order,
  // as llama.cpp does, so that equal lengths come out in the same order.
  for (size_t i = 0; i < n; ++i) {
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_by_length_.push_back(static_cast<TokenId>(i));
    }
  }
  std::sort(special_by_length_.begin(), special_by_length_.end(),
            [this](TokenId a, TokenId b) {
              return tokens_[a].size() > tokens_[b].size();
            });

  // Attributes llama.cpp sets by model name or pre-tokenizer name.
  auto set = [this](std::string_view text, uint32_t attr, bool on) {
    const TokenId id = find_token(text);
    if (id < 0) return;
    attrs_[id] = on ? (attrs_[id] | attr) : (attrs_[id] & ~attr);
  };
  const std::string name = absl::AsciiStrToLower(vocab.model_name);
  if (vocab.pre.find("jina-v2-de") != std::string::npos ||
      vocab.pre.find("jina-v2-es") != std::string::npos ||
      vocab.pre.find("jina-v2-code") != std::string::npos) {
    set("<mask>", kAttrLstrip, true);
  } else if (name.find("phi-3") != std::string::npos ||
             name.find("phi3") != std::string::npos) {
    for (TokenId id : special_by_length_) attrs_[id] |= kAttrRstrip;
    set("</s>", kAttrRstrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) {
      set(t, kAttrRstrip, false);
    }
  } else if (name.find("modern-bert") != std::string::npos) {
    set("[MASK]", kAttrLstrip, true);
  }
}

void Tokenizer::build_pieces() {
  const size_t n = tokens_.size();
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = attrs_[i];
    const auto id = static_cast<TokenId>(i);
    if (a & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      pieces_[i] = tokens_[i];
    } else if (a & kAttrNormal) {
      pieces_[i] = normal_piece(id);
    } else if (a & kAttrByte) {
      // "<0xNN>": llama.cpp reads the two characters after "<0x" as hex.
      const std::string& t = tokens_[i];
      if (t.size() > 3) {
        const std::string hex = t.substr(3, 2);
        const long value = std::strtol(hex.c_str(), nullptr, 16);
        pieces_[i] = std::string(1, static_cast<char>(value));
      }
    }
  }
}

TokenId Tokenizer::find_token(std::string_view text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
  return std::binary_search(end_of_generation_.begin(),
                            end_of_generation_.end(), id);
}

absl::StatusOr<std::vector<TokenId>> Tokenizer::encode(
    std::string_view text, const EncodeOptions& options) const {
  if (options.strict_utf8) {
    const size_t bad = unicode::find_invalid_utf8(text);
    if (bad != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("input is not valid UTF-8: byte 0x%02X at offset %d",
                          static_cast<unsigned char>(text[bad]), bad));
    }
  }
  std::vector<TokenId> out;
  if (options.add_special && add_bos_) out.push_back(*special_.bos);
  if (absl::Status s = encode_fragments(text, options.parse_special, &out);
      !s.ok()) {
    return s;
  }
  if (options.add_special && add_eos_) out.push_back(*special_.eos);
  return out;
}

absl::Status Tokenizer::encode_fragments(std::string_view text,
                                         bool parse_special,
                                         std::vector<TokenId>* out) const {
  // A fragment is a special token (id >= 0) or a stretch of text.
  struct Fragment {
    TokenId id;
    size_t begin, size;
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (TokenId sid : special_by_length_) {
    const uint32_t attr = attrs_[sid];
    if (!parse_special && (attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& special = tokens_[sid];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      size_t size = f.size;
      while (size > 0) {
        const size_t match = text.substr(0, begin + size).find(special, begin);
        if (match == std::string_view::npos) {
          next.push_back({-1, begin, size});
          break;
        }
        size_t left = match - begin;
        if (attr & kAttrLstrip) {
          while (left > 0 && is_ascii_space(text[begin + left - 1])) --left;
        }
        if (left > 0) next.push_back({-1, begin, left});
        next.push_back({sid, 0, 0});
        size_t right = match + special.size();
        size = begin + size - right;
        if (attr & kAttrRstrip) {
          while (size > 0 && is_ascii_space(text[right])) {
            ++right;
            --size;
          }
        }
        begin = right;
      }
    }
    fragments.swap(next);
  }
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      out->push_back(f.id);
      after_special = true;
      continue;
    }
    if (absl::Status s =
            encode_text(text.substr(f.begin, f.size), after_special, out);
        !s.ok()) {
      return s;
    }
    after_special = false;
  }
  return absl::OkStatus();
}

std::string_view Tokenizer::piece(TokenId id, bool render_special) const {
  if (!is_valid(id)) return {};
  if (!render_special && (attrs_[id] & (kAttrControl | kAttrUnknown))) {
    return {};
  }
  return pieces_[id];
}

int Tokenizer::space_prefix_index(std::span<const TokenId> ids,
                                  const DecodeOptions& opt) const {
  if (!opt.strip_space_prefix || model_ != TokenizerModel::kSentencePiece ||
      !add_space_prefix_) {
    return -1;
  }
  size_t i = 0;
  if (!ids.empty() && special_.bos.has_value() && ids[0] == *special_.bos) {
    i = 1;
  }
  return i < ids.size() ? static_cast<int>(i) : -1;
}

absl::StatusOr<std::string> Tokenizer::concat_pieces(
    std::span<const TokenId> ids, const DecodeOptions& opt) const {
  const int strip = space_prefix_index(ids, opt);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!is_valid(ids[i])) {
      return absl::InvalidArgumentError(
          cat("token id ", ids[i], " at position ", i, " is out of range for ",
              n_tokens(), " tokens"));
    }
    std::string_view p = piece(ids[i], opt.render_special);
    if (static_cast<int>(i) == strip && !p.empty() && p[0] == ' ') {
      p.remove_prefix(1);
    }
    out.append(p);
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::decode_bytes(
    std::span<const TokenId> ids, const DecodeOptions& options) const {
  return concat_pieces(ids, options);
}

absl::StatusOr<std::string> Tokenizer::decode(
    std::span<const TokenId> ids, const DecodeOptions& options) const {
  absl::StatusOr<std::string> bytes = concat_pieces(ids, options);
  if (!bytes.ok()) return bytes.status();
  return unicode::repair_utf8(*bytes);
}

}  // namespace strata::tokenizer
