// jinja2's attribute and item lookup (`.` tries the attribute first, `[]`
// the item first) and the methods of Python's str, dict and list, with the
// immutable sandbox's refusal of mutating methods (internal; methods.cc).
#pragma once

#include <string>

#include "model/jinja/value.h"

namespace strata::jinja {

// obj.name: a method (str, dict, list), a dict's key, or an undefined
// value saying what was missing. Fails (line) on an undefined `obj`.
Value get_attr(const Value& obj, const std::string& name, int line);
// obj[key]: a dict's key, a list's or a string's element (negative from
// the end), else as get_attr for a string key.
Value get_item(const Value& obj, const Value& key, int line);

// dict.items(): a list of (key, value) tuples, in the dict's order.
Value items_of(const Value& d);

}  // namespace strata::jinja
