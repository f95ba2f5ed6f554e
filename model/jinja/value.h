// Values of the Jinja interpreter (internal): Python's types as jinja2 sees
// them (None, bool, int, float, str, list, tuple, dict, callables, namespace)
// plus jinja2's Undefined. Lists and dicts are shared, immutable once built
// (the sandbox is immutable), except a namespace's dict.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace strata::jinja {

// A render error, thrown inside the interpreter and turned into a Status at
// Template::render.
struct Error {
  absl::StatusCode code;
  std::string message;
};
[[noreturn]] void fail(int line, std::string message);  // InvalidArgument "line N: ..."

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order
struct Args;
struct Interpreter;
using Function = std::function<Value(Interpreter&, Args&, int line)>;

struct Callable {
  std::string name;
  Function fn;
};

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                       // kString; kUndefined: what is undefined (for errors)
  bool markup = false;                 // kString that is markupsafe's Markup (`|safe`):
                                       // `+` HTML-escapes the plain side
  std::shared_ptr<List> list;          // kList
  bool tuple = false;                  // kList printed as a tuple
  // kList that is a dict view (dict.items() / keys() / values()): printed
  // as dict_items([...]), not JSON.
  enum class View : uint8_t { kNone, kItems, kKeys, kValues } view = View::kNone;
  bool generator = false;              // kList that is a Python generator (map, select...):
                                       // always true, no len(), not JSON
  std::shared_ptr<Dict> dict;          // kDict
  bool ns = false;                     // kDict that is a namespace() (mutable)
  std::shared_ptr<const Callable> fn;  // kCallable
  int depth = 0;                       // lists / dicts nested in this one, +1 (at most kMaxDepth)
  // A namespace, or a list or dict with one inside: what a namespace's
  // attribute may not be set to (the one mutation; depth is counted when a
  // value is built, so chains and cycles of namespaces would escape it).
  bool holds_namespace = false;
  static constexpr int kMaxDepth = 256;

  static Value undefined(std::string what = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value real(double v);
  static Value string(std::string v);
  static Value of_list(List v, bool tuple = false);
  static Value of_generator(List v);
  static Value of_dict(Dict v);
  static Value callable(std::string name, Function fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i); }

  const Value* find(std::string_view key) const;  // dict item or null
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`, else `fallback`.
  Value get(size_t index, std::string_view name, Value fallback = Value::none()) const;
  bool has(size_t index, std::string_view name) const;
};

// Python's truth value.
bool truthy(const Value& v);
// Python's ==.
bool equal(const Value& a, const Value& b);
// Python's <: -1, 0, 1; fails (line) for incomparable types.
int compare(const Value& a, const Value& b, int line);
// Python's str() and repr().
std::string str(const Value& v);
std::string repr(const Value& v);
std::string python_float_repr(double v);
// Python's type name, for error messages ('str', 'dict', 'NoneType'...).
std::string type_name(const Value& v);
// An argument as an integer (a bool counts, as in Python) or a string; else
// InvalidArgument "line N: WHAT: expected an integer|a string, got 'TYPE'".
int64_t to_int(const Value& v, int line, const char* what);
std::string need_string(const Value& v, int line, const char* what);

Value from_json(const nlohmann::ordered_json& j);
// json.dumps(v, ensure_ascii, indent=indent (<0: None), sort_keys, separators).
std::string to_json(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                    const std::string& key_sep, int line, bool ensure_ascii = false);

// UTF-8 helpers: code points of `s` (invalid bytes pass as U+FFFD-free raw
// code points 0xDC80+byte, as Python's surrogateescape) and back.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
bool is_python_space(char32_t c);
// markupsafe's escape(): & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

}  // namespace strata::jinja
