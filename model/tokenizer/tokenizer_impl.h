// Constructors of the two Tokenizer implementations. Internal to
// model/tokenizer/: callers use Tokenizer::create().
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace strata::tokenizer {

// `vocab` has passed validate_vocabulary() and has its defaults filled in;
// its contents are moved from.
std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocabulary& vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(
    Vocabulary& vocab, std::unique_ptr<PreTokenizer> pre);

}  // namespace strata::tokenizer
