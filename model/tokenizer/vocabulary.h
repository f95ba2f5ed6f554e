// Vocabulary: the plain data a tokenizer is built from, as a GGUF's
// `tokenizer.*` keys carry it (GGUF spec, "Tokenizer" section; llama.cpp
// src/llama-vocab.cpp reads the same keys):
//
//   tokenizer.ggml.model          STRING  "llama" (SentencePiece) | "gpt2"
//   (BPE) tokenizer.ggml.pre            STRING  pre-tokenizer name (BPE only)
//   tokenizer.ggml.tokens         ARRAY[STRING]   token text, id = index
//   tokenizer.ggml.scores         ARRAY[FLOAT32 | INT32]   >= n_tokens entries
//   tokenizer.ggml.token_type     ARRAY[INT32]    >= n_tokens entries
//   (TokenType) tokenizer.ggml.merges         ARRAY[STRING]   "left right",
//   rank = index (BPE)
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,seperator,padding,mask}_token_id
//   tokenizer.ggml.{fim_pre,fim_suf,fim_mid,fim_pad,fim_rep,fim_sep}_token_id
//                                 any integer type, < n_tokens
//   tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix   BOOL
//   general.name                  STRING  (llama.cpp keys a few token
//                                          attributes on it, e.g. Phi-3)
//
// `vocabulary_from_gguf()` fills a Vocabulary from a GgufFile; tests and tools
// may fill one by hand. `validate_vocabulary()` is what Tokenizer::create runs
// first: every error names the key it is about, e.g.
//   "tokenizer.ggml.scores: 10 entries, fewer than the 12 tokens"
//
// Thread-safety: plain data; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::gguf {
class GgufFile;
}  // namespace strata::gguf

namespace strata::tokenizer {

using TokenId = int32_t;

// Ids of `tokenizer.ggml.token_type` (gguf-py TokenType / llama.cpp
// llama_token_type). Values outside the enum are kept and read as undefined.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerModel {
  kSentencePiece,  // "llama": scores-driven merges, U+2581 for spaces
  kBytePair,       // "gpt2": ranked merges over the byte-to-unicode alphabet
};

// Special token ids; nullopt when the vocabulary has none.
struct SpecialTokens {
  std::optional<TokenId> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<TokenId> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
};

struct Vocabulary {
  TokenizerModel model = TokenizerModel::kSentencePiece;
  std::string pre;                  // tokenizer.ggml.pre; "" when absent
  std::vector<std::string> tokens;  // (n_tokens) token text, id = index
  std::vector<float> scores;        // (n_tokens) or empty: all 0
  std::vector<int32_t> types;       // (n_tokens) TokenType values, or empty:
                                    // all normal
  std::vector<std::string> merges;  // BPE only: "left right", rank = index
  // Special ids as the file sets them. Ids the file leaves unset take
  // llama.cpp's defaults for the model (SentencePiece: bos 1, eos 2, unk 0;
  // BPE: bos = eos = 11) when those are in range.
  SpecialTokens special;
  // Flags as the file sets them; nullopt takes the model's default
  // (SentencePiece: add_bos and add_space_prefix; BPE: add_bos only for the
  // Llama-3 family of pre-tokenizers).
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string model_name;  // general.name; "" when absent
};

// Checks the vocabulary before a tokenizer is built: at least one token, no
// duplicate token text, scores/types not shorter than tokens, special ids in
// range, a BOS/EOS id when add_bos/add_eos asks for one, merges present for
// BPE. InvalidArgument naming the key otherwise.
absl::Status validate_vocabulary(const Vocabulary& vocab);

// Reads the keys listed at the top of this file. Missing required keys
// (model, tokens, and merges for BPE) are NotFound; wrong value or array
// element types, lengths or ranges are InvalidArgument; both name the key,
// e.g. "tokenizer.ggml.token_type: array of FLOAT32, expected INT32".
// An unknown tokenizer.ggml.model is Unimplemented.
absl::StatusOr<Vocabulary> vocabulary_from_gguf(const gguf::GgufFile& file);

}  // namespace strata::tokenizer
