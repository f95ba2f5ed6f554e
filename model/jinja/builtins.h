// jinja2 3.1's built-in filters and tests (internal; builtins.cc), and what
// the interpreter shares with them (interpreter.cc).
#pragma once

#include <string>

#include "model/jinja/value.h"

namespace strata::jinja {

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args, int line);
bool apply_test(Interpreter& in, const std::string& name, const Value& input, Args& args, int line);

// Shared with interpreter.cc.
std::string undefined_message(const Value& v);
bool contains(const Value& container, const Value& needle, int line);
List iterate_value(const Value& v, int line);

}  // namespace strata::jinja
