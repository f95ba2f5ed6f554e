#include "model/tokenizer/stream_decoder.h"

#include "model/tokenizer/text_util.h"

namespace strata::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer,
                             const DecodeOptions& options)
    : tokenizer_(tokenizer), options_(options) {}

absl::StatusOr<std::string> StreamDecoder::push(TokenId id) {
  if (!tokenizer_.is_valid(id)) {
    return absl::InvalidArgumentError(cat("token id ", id,
                                          " is out of range for ",
                                          tokenizer_.n_tokens(), " tokens"));
  }
  std::string_view piece = tokenizer_.piece(id, options_.render_special);
  // The same token decode() strips: the first, or the second after a BOS.
  if (!stripped_) {
    const TokenId one[] = {id};
    const bool leading_bos = position_ == 0 &&
                             tokenizer_.special().bos.has_value() &&
                             id == *tokenizer_.special().bos;
    if (!leading_bos) {
      stripped_ = true;
      if (tokenizer_.space_prefix_index(one, options_) == 0 && !piece.empty() &&
          piece[0] == ' ') {
        piece.remove_prefix(1);
      }
    }
  }
  ++position_;
  std::string out;
  repairer_.push(piece, &out);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  repairer_.finish(&out);
  position_ = 0;
  stripped_ = false;
  return out;
}

}  // namespace strata::tokenizer
