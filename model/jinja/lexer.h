// Lexer (internal): template text to tokens, with jinja2's whitespace rules
// (trim_blocks, lstrip_blocks, `-` and `+` markers, keep_trailing_newline)
// applied to the text between tags, and newlines normalised to \n.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/jinja/jinja.h"
#include "model/jinja/value.h"

namespace strata::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kNumber, kOp, kEof };
  Type type = Type::kEof;
  std::string text;  // kText, kName, kOp; kString: the decoded string
  Value number;      // kNumber
  int line = 1;
};

// The tokens of `source`, ending with kEof; throws Error (InvalidArgument
// "line N: ...") for an unclosed tag, comment or string, or a stray
// character.
std::vector<Token> lex(std::string_view source, const Options& options);

}  // namespace strata::jinja
