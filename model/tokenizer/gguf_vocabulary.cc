// vocabulary_from_gguf(): the tokenizer keys of a GGUF file, type-checked.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>

#include "model/gguf_reader.h"
#include "model/tokenizer/text_util.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocabulary.h"
#include "model/tokenizer/vocabulary_keys.h"

namespace strata::tokenizer {
namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::Value;
using gguf::ValueType;

absl::Status wrong_type(std::string_view key, const Value& v,
                        std::string_view expected) {
  return absl::InvalidArgumentError(
      cat(key, ": ", gguf::value_type_name(v.type), ", expected ", expected));
}

absl::Status wrong_elements(std::string_view key, const Array& a,
                            std::string_view expected) {
  return absl::InvalidArgumentError(cat(key, ": array of ",
                                        gguf::value_type_name(a.element_type),
                                        ", expected ", expected));
}

// nullptr (and OK) when absent.
absl::StatusOr<const std::string*> find_string(const GgufFile& file,
                                               std::string_view key) {
  const Value* v = file.find(key);
  if (v == nullptr) return nullptr;
  const auto* s = std::get_if<std::string>(&v->data);
  if (v->type != ValueType::kString || s == nullptr) {
    return wrong_type(key, *v, "STRING");
  }
  return s;
}

absl::StatusOr<const Array*> find_array(const GgufFile& file,
                                        std::string_view key) {
  const Value* v = file.find(key);
  if (v == nullptr) return nullptr;
  const auto* a = std::get_if<Array>(&v->data);
  if (v->type != ValueType::kArray || a == nullptr) {
    return wrong_type(key, *v, "ARRAY");
  }
  return a;
}

absl::StatusOr<std::vector<std::string>> string_array(const Array& a,
                                                      std::string_view key) {
  if (a.element_type != ValueType::kString) {
    return wrong_elements(key, a, "STRING");
  }
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const Value& item : a.items) {
    const auto* s = std::get_if<std::string>(&item.data);
    if (s == nullptr) return wrong_elements(key, a, "STRING");
    out.push_back(*s);
  }
  return out;
}

// Any integer type; must be a valid (non-negative, 32-bit) token id.
absl::StatusOr<std::optional<TokenId>> find_id(const GgufFile& file,
                                               std::string_view key) {
  const Value* v = file.find(key);
  if (v == nullptr) return std::optional<TokenId>();
  int64_t value = 0;
  bool is_integer = true;
  bool too_big = false;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint64_t>) {
          too_big =
              x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
          value = static_cast<int64_t>(x);
        } else if constexpr (std::is_integral_v<T> &&
                             !std::is_same_v<T, bool>) {
          value = static_cast<int64_t>(x);
        } else {
          is_integer = false;
        }
      },
      v->data);
  if (!is_integer) return wrong_type(key, *v, "an integer token id");
  // -1 (INT32) and 4294967295 (-1 written as UINT32) mean "no such token".
  if (value == -1 || value == 0xFFFFFFFFll) return std::optional<TokenId>();
  if (too_big || value < 0 || value > std::numeric_limits<TokenId>::max()) {
    return absl::InvalidArgumentError(
        cat(key, ": ", too_big ? "huge value" : std::to_string(value),
            " is not a token id"));
  }
  return std::optional<TokenId>(static_cast<TokenId>(value));
}

absl::StatusOr<std::optional<bool>> find_bool(const GgufFile& file,
                                              std::string_view key) {
  const Value* v = file.find(key);
  if (v == nullptr) return std::optional<bool>();
  const auto* b = std::get_if<bool>(&v->data);
  if (v->type != ValueType::kBool || b == nullptr) {
    return wrong_type(key, *v, "BOOL");
  }
  return std::optional<bool>(*b);
}

}  // namespace

absl::StatusOr<Vocabulary> vocabulary_from_gguf(const GgufFile& file) {
  Vocabulary vocab;

  absl::StatusOr<const std::string*> model = find_string(file, keys::kModel);
  if (!model.ok()) return model.status();
  if (*model == nullptr) {
    return absl::NotFoundError(cat(keys::kModel, ": missing"));
  }
  if (**model == "llama") {
    vocab.model = TokenizerModel::kSentencePiece;
  } else if (**model == "gpt2") {
    vocab.model = TokenizerModel::kBytePair;
  } else {
    return absl::UnimplementedError(
        cat(keys::kModel, ": '", **model,
            "' is not supported (supported: llama, gpt2)"));
  }

  absl::StatusOr<const std::string*> pre = find_string(file, keys::kPre);
  if (!pre.ok()) return pre.status();
  if (*pre != nullptr) vocab.pre = **pre;
  absl::StatusOr<const std::string*> name =
      find_string(file, keys::kGeneralName);
  if (!name.ok()) return name.status();
  if (*name != nullptr) vocab.model_name = **name;

  absl::StatusOr<const Array*> tokens = find_array(file, keys::kTokens);
  if (!tokens.ok()) return tokens.status();
  if (*tokens == nullptr) {
    return absl::NotFoundError(cat(keys::kTokens, ": missing"));
  }
  absl::StatusOr<std::vector<std::string>> token_text =
      string_array(**tokens, keys::kTokens);
  if (!token_text.ok()) return token_text.status();
  vocab.tokens = *std::move(token_text);

  absl::StatusOr<const Array*> scores = find_array(file, keys::kScores);
  if (!scores.ok()) return scores.status();
  if (*scores != nullptr) {
    const Array& a = **scores;
    if (a.element_type != ValueType::kFloat32 &&
        a.element_type != ValueType::kInt32) {
      return wrong_elements(keys::kScores, a, "FLOAT32 or INT32");
    }
    vocab.scores.reserve(a.items.size());
    for (const Value& item : a.items) {
      if (const auto* f = std::get_if<float>(&item.data)) {
        vocab.scores.push_back(*f);
      } else if (const auto* i = std::get_if<int32_t>(&item.data)) {
        vocab.scores.push_back(static_cast<float>(*i));
      } else {
        return wrong_elements(keys::kScores, a, "FLOAT32 or INT32");
      }
    }
  }

  absl::StatusOr<const Array*> types = find_array(file, keys::kTokenType);
  if (!types.ok()) return types.status();
  if (*types != nullptr) {
    const Array& a = **types;
    if (a.element_type != ValueType::kInt32) {
      return wrong_elements(keys::kTokenType, a, "INT32");
    }
    vocab.types.reserve(a.items.size());
    for (const Value& item : a.items) {
      const auto* t = std::get_if<int32_t>(&item.data);
      if (t == nullptr) return wrong_elements(keys::kTokenType, a, "INT32");
      vocab.types.push_back(*t);
    }
  }

  absl::StatusOr<const Array*> merges = find_array(file, keys::kMerges);
  if (!merges.ok()) return merges.status();
  if (*merges != nullptr) {
    absl::StatusOr<std::vector<std::string>> m =
        string_array(**merges, keys::kMerges);
    if (!m.ok()) return m.status();
    vocab.merges = *std::move(m);
  } else if (vocab.model == TokenizerModel::kBytePair) {
    return absl::NotFoundError(
        cat(keys::kMerges, ": missing (a gpt2 tokenizer needs it)"));
  }

  // A special-token id outside the vocabulary (converters write -1, stored
  // as UINT32 4294967295, for "none") is read as absent, as llama.cpp's
  // llama_vocab::load does ("bad special token ... using default id").
  const auto in_vocab = [&](std::optional<TokenId> id) {
    return id.has_value() && static_cast<size_t>(*id) < vocab.tokens.size()
               ? id
               : std::optional<TokenId>();
  };
  for (const SpecialSlot& slot : special_slots(vocab.special)) {
    absl::StatusOr<std::optional<TokenId>> id = find_id(file, slot.key);
    if (!id.ok()) return id.status();
    *slot.id = in_vocab(*id);
  }
  // Deprecated spellings of the FIM ids; as in llama.cpp, they win.
  const std::pair<std::string_view, std::optional<TokenId>*> deprecated[] = {
      {"tokenizer.ggml.prefix_token_id", &vocab.special.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &vocab.special.fim_suf},
      {"tokenizer.ggml.middle_token_id", &vocab.special.fim_mid},
  };
  for (const auto& [key, slot] : deprecated) {
    absl::StatusOr<std::optional<TokenId>> id = find_id(file, key);
    if (!id.ok()) return id.status();
    if (in_vocab(*id).has_value()) *slot = *id;
  }

  const std::pair<std::string_view, std::optional<bool>*> flags[] = {
      {keys::kAddBos, &vocab.add_bos},
      {keys::kAddEos, &vocab.add_eos},
      {keys::kAddSpacePrefix, &vocab.add_space_prefix},
  };
  for (const auto& [key, slot] : flags) {
    absl::StatusOr<std::optional<bool>> b = find_bool(file, key);
    if (!b.ok()) return b.status();
    *slot = *b;
  }

  if (absl::Status s = validate_vocabulary(vocab); !s.ok()) return s;
  return vocab;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(
    const GgufFile& file) {
  absl::StatusOr<Vocabulary> vocab = vocabulary_from_gguf(file);
  if (!vocab.ok()) return vocab.status();
  return create(*std::move(vocab));
}

}  // namespace strata::tokenizer
