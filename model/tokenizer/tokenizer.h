// Tokenizer: text <-> token ids for a GGUF model, built from the file's
// `tokenizer.*` metadata alone (see vocabulary.h) and equal, id for id, to
// llama.cpp's tokenizer on the same file (src/llama-vocab.cpp). Two
// implementations sit behind this interface:
//
//   SentencePiece-style ("llama"): spaces become U+2581, adjacent pieces
//     merge by highest token score, pieces that are not tokens fall back to
//     <0xNN> byte tokens; a space is put before the text (and after every
//     special token) when add_space_prefix says so.
//   GPT-2 byte-level BPE ("gpt2"): a pre-tokenizer chosen by
//     tokenizer.ggml.pre splits the text into words (pre_tokenizer.h), each
//     written in the byte-to-unicode alphabet, then merged by merge rank.
//
// Special tokens. Before either model runs, the text is cut at the text of
// special tokens, longest first: user-defined tokens always, control and
// unknown tokens only when EncodeOptions::parse_special is set. Without it a
// user cannot forge a turn marker: "<|im_start|>" typed by a user is
// tokenized as ordinary text.
//
// Usage:
//   ASSIGN_OR_RETURN(auto tok, Tokenizer::from_gguf(file));
//   ASSIGN_OR_RETURN(std::vector<TokenId> ids, tok->encode("Hello"));
//   ASSIGN_OR_RETURN(std::string text, tok->decode(ids));
//
// Streaming output one token at a time: StreamDecoder (stream_decoder.h).
//
// Ownership and threads: a Tokenizer owns its tables and is immutable after
// create(); any number of threads may call its const methods at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/text_util.h"
#include "model/tokenizer/vocabulary.h"

namespace strata::gguf {
class GgufFile;
}  // namespace strata::gguf

namespace strata::tokenizer {

// Token attributes, as llama.cpp derives them (llama_token_attr): from the
// token type plus llama.cpp's fix-ups by token text (end-of-turn texts such
// as "<|im_end|>" are control tokens) and by model name (Phi-3's special
// tokens strip the whitespace after them).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  // eat ASCII whitespace before the token's text
  kAttrRstrip = 1u << 8,  // eat ASCII whitespace after the token's text
};

struct EncodeOptions {
  // Put BOS/EOS around the ids as the vocabulary's add_bos/add_eos say.
  bool add_special = true;
  // Match control (and unknown) tokens' text in the input.
  bool parse_special = false;
  // Refuse input that is not well-formed UTF-8 (InvalidArgument naming the
  // byte offset). Off: do what llama.cpp does, which never fails:
  // SentencePiece turns stray bytes into byte tokens, BPE into U+FFFD.
  bool strict_utf8 = false;
};

struct DecodeOptions {
  // Control and unknown tokens print their text (otherwise nothing).
  bool render_special = false;
  // SentencePiece with add_space_prefix: drop the one space that encode()
  // put before the text, so decode(encode(x)) == x.
  bool strip_space_prefix = true;
};

class Tokenizer {
 public:
  // Builds the tokenizer the vocabulary asks for. Errors: those of
  // validate_vocabulary(); Unimplemented for an unknown pre-tokenizer.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> create(Vocabulary vocab);
  // vocabulary_from_gguf() then create().
  static absl::StatusOr<std::unique_ptr<Tokenizer>> from_gguf(
      const gguf::GgufFile& file);

  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text (any bytes) to ids. Errors: InvalidArgument for invalid UTF-8 with
  // strict_utf8; ResourceExhausted if a pre-tokenizer regex gives up.
  absl::StatusOr<std::vector<TokenId>> encode(
      std::string_view text, const EncodeOptions& options = {}) const;

  // Ids to text. decode() returns valid UTF-8 (bytes that do not form UTF-8
  // become U+FFFD, as the WHATWG decoder does); decode_bytes() returns the
  // pieces' bytes unchanged. InvalidArgument for an id out of range.
  absl::StatusOr<std::string> decode(std::span<const TokenId> ids,
                                     const DecodeOptions& options = {}) const;
  absl::StatusOr<std::string> decode_bytes(
      std::span<const TokenId> ids, const DecodeOptions& options = {}) const;

  // The bytes one token stands for (maybe part of a UTF-8 character), as
  // llama.cpp's llama_token_to_piece gives them. Control and unknown tokens
  // give "" unless render_special; an id out of range gives "".
  std::string_view piece(TokenId id, bool render_special = false) const;

  TokenizerModel model() const { return model_; }
  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  bool is_valid(TokenId id) const { return id >= 0 && id < n_tokens(); }
  // Token text as stored in the vocabulary (e.g. "▁the", "Ġthe", "<0x0A>")
  // and its TokenAttr bits. `id` must be valid (is_valid).
  const std::string& token_text(TokenId id) const { return tokens_[id]; }
  uint32_t attributes(TokenId id) const { return attrs_[id]; }
  // The id whose text is exactly `text`, or -1.
  TokenId find_token(std::string_view text) const;

  const SpecialTokens& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of generation: EOS, EOT, EOM and the other tokens llama.cpp treats
  // as ending a turn ("<|im_end|>", "<end_of_turn>", ...).
  bool is_end_of_generation(TokenId id) const;
  // tokenizer.ggml.pre as used ("default" when absent); "" for
  // SentencePiece.
  const std::string& pre_tokenizer_name() const { return pre_name_; }

 protected:
  explicit Tokenizer(Vocabulary& vocab);

  // Tokenizes one stretch of ordinary text (no special tokens in it).
  // `after_special` is true at the start of the text and right after a
  // special token.
  virtual absl::Status encode_text(std::string_view text, bool after_special,
                                   std::vector<TokenId>* out) const = 0;
  // The piece of a normal token (the model's own text encoding undone).
  virtual std::string normal_piece(TokenId id) const = 0;
  // Builds the piece cache; subclasses call it once constructed.
  void build_pieces();

  TokenizerModel model_;
  std::vector<std::string> tokens_;  // (n_tokens) token text
  std::vector<float> scores_;        // (n_tokens)
  std::vector<uint32_t> attrs_;      // (n_tokens) TokenAttr bits
  StringMap<TokenId> ids_;           // text -> id
  SpecialTokens special_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  std::string pre_name_;

 private:
  friend class StreamDecoder;

  void derive_attributes(const Vocabulary& vocab);
  // Appends the ids of `text`, special tokens cut out first.
  absl::Status encode_fragments(std::string_view text, bool parse_special,
                                std::vector<TokenId>* out) const;
  absl::StatusOr<std::string> concat_pieces(std::span<const TokenId> ids,
                                            const DecodeOptions& opt) const;
  // Index (into `ids`) of the token whose leading space decode() drops, or
  // -1 (see DecodeOptions::strip_space_prefix).
  int space_prefix_index(std::span<const TokenId> ids,
                         const DecodeOptions& opt) const;

  std::vector<TokenId> special_by_length_;  // special-token cut order
  std::vector<std::string> pieces_;         // (n_tokens) rendered pieces
  std::vector<TokenId> end_of_generation_;  // sorted
};

}  // namespace strata::tokenizer
