// StreamDecoder: turns token ids into text one token at a time, for
// streaming a generation to a client. Every chunk it returns is valid UTF-8:
// a token that ends inside a multi-byte character (byte-level BPE and <0xNN>
// byte tokens split characters freely) holds those bytes back until a later
// token completes the character. Bytes that can no longer form a character
// become U+FFFD; a character still incomplete when the stream ends becomes
// U+FFFD in finish(). The chunks joined equal Tokenizer::decode() of the
// same ids with the same options.
//
// Usage:
//   StreamDecoder stream(*tokenizer);
//   for (TokenId id : generated) send(stream.push(id).value());
//   send(stream.finish());
//
// Ownership and threads: borrows the Tokenizer, which must outlive it; one
// thread uses a StreamDecoder at a time.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer,
                         const DecodeOptions& options = {});

  // The text that `id` completes (possibly ""). InvalidArgument for an id
  // out of range (the stream is unchanged).
  absl::StatusOr<std::string> push(TokenId id);
  // Ends the stream; the decoder may then start a new one.
  std::string finish();
  // Bytes held back now, waiting for the rest of a character.
  size_t pending_bytes() const { return repairer_.pending(); }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  unicode::Utf8Repairer repairer_;
  size_t position_ = 0;    // tokens pushed since the stream started
  bool stripped_ = false;  // the space prefix has been dealt with
};

}  // namespace strata::tokenizer
