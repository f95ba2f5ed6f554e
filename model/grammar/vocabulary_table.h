// The TokenTable of a tokenizer's vocabulary: each token's bytes as
// llama.cpp's token_to_piece gives them (control tokens: none) and whether
// it ends the generation. Built once per vocabulary (about 50 ms for a
// 49k-token vocabulary) and shared by every GrammarMatcher.
#pragma once

#include <memory>

#include "model/grammar/grammar.h"
#include "model/tokenizer/tokenizer.h"

namespace strata::grammar {

std::shared_ptr<const TokenTable> token_table(const tokenizer::Tokenizer& tok);

}  // namespace strata::grammar
