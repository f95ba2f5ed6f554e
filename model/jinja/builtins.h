// Filters, tests, attribute and item access, and the methods of str and
// dict (internal; builtins.cc), as jinja2 3.1 and Python define them.
#pragma once

#include <string>

#include "model/jinja/value.h"

namespace strata::jinja {

Value get_attr(const Value& obj, const std::string& name, int line);
Value get_item(const Value& obj, const Value& key, int line);
Value apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args, int line);
bool apply_test(Interpreter& in, const std::string& name, const Value& input, Args& args, int line);

// Shared with interpreter.cc.
std::string undefined_message(const Value& v);
bool contains(const Value& container, const Value& needle, int line);
List iterate_value(const Value& v, int line);

}  // namespace strata::jinja
