#include "model/grammar/vocabulary_table.h"

#include <string>
#include <vector>

namespace strata::grammar {

std::shared_ptr<const TokenTable> token_table(const tokenizer::Tokenizer& tok) {
  const int32_t n = tok.n_tokens();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> eog(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    eog[id] = tok.is_end_of_generation(id);
    if (!eog[id]) pieces[id] = std::string(tok.piece(id));
  }
  return TokenTable::build(std::move(pieces), std::move(eog));
}

}  // namespace strata::grammar
