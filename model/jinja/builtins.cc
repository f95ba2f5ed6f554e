// jinja2's built-in filters and tests (builtins.h).
#include "model/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/jinja/jinja.h"
#include "model/jinja/methods.h"
#include "model/jinja/python_str.h"

namespace strata::jinja {
namespace {

// Python's int(x) of a finite float: toward zero; a value outside int64
// (Python's ints are unbounded, ours are 64-bit) fails.
int64_t truncate_to_int(double x, int line) {
  const double t = std::trunc(x);
  // [-2^63, 2^63): both bounds are exact doubles.
  if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) {
    fail(line, "int: " + python_float_repr(x) + " does not fit in 64 bits");
  }
  return static_cast<int64_t>(t);
}

// Attribute lookup for map/selectattr/sort: dotted paths, items first.
Value attribute_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = 0;
    if (!numeric) {
      cur = get_item(cur, Value::string(part), line);
    } else if (std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc()) {
      cur = get_item(cur, Value::integer(index), line);
    } else {  // past int64: no list is that long
      cur = Value::undefined(type_name(cur) + " object has no element " + part);
    }
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(lower(v.s));
  return v;
}

List as_list(const Value& v, int line) { return iterate_value(v, line); }

int64_t length_of(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(decode_utf8(v.s).size());
    case Value::Kind::kList:
      if (v.generator) break;
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict->size());
    default: break;
  }
  fail(line, "object of type '" + type_name(v) + "' has no len()");
}

// select / reject / selectattr / rejectattr
Value select(Interpreter& in, const Value& input, Args& args, bool attr, bool keep, int line) {
  size_t at = 0;
  std::string attribute;
  if (attr) {
    Value a = args.get(0, "attribute");
    attribute = need_string(a, line, "selectattr");
    at = 1;
  }
  Value test = args.get(at, "test", Value::undefined());
  Args test_args;
  for (size_t k = at + 1; k < args.positional.size(); ++k) test_args.positional.push_back(args.positional[k]);
  List out;
  for (const auto& item : truthy(input) ? as_list(input, line) : List{}) {
    Value v = attr ? attribute_path(item, attribute, line) : item;
    bool r;
    if (test.is_undefined() || test.is_none()) {
      r = truthy(v);
    } else {
      Args copy = test_args;
      r = apply_test(in, need_string(test, line, "select"), v, copy, line);
    }
    if (r == keep) out.push_back(item);
  }
  return Value::of_generator(std::move(out));
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args, int line) {
  if (name == "tojson") {
    bool ensure_ascii = truthy(args.get(0, "ensure_ascii", Value::boolean(false)));
    Value indent = args.get(1, "indent");
    Value seps = args.get(2, "separators");
    bool sort_keys = truthy(args.get(3, "sort_keys", Value::boolean(false)));
    int ind = indent.is_none() ? -1 : static_cast<int>(to_int(indent, line, "tojson indent"));
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    if (!seps.is_none()) {
      if (!seps.is_list() || seps.list->size() != 2) fail(line, "tojson: separators must be a pair");
      item_sep = need_string((*seps.list)[0], line, "tojson separators");
      key_sep = need_string((*seps.list)[1], line, "tojson separators");
    }
    if (input.is_undefined()) fail(line, "Object of type Undefined is not JSON serializable");
    return Value::string(to_json(input, ind, sort_keys, item_sep, key_sep, line, ensure_ascii));
  }
  if (name == "length" || name == "count") return Value::integer(length_of(input, line));
  if (name == "string") return input.is_string() ? input : Value::string(str(input));
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (input.is_string() && input.markup && name != "forceescape") return input;
    Value r = Value::string(html_escape(str(input)));
    r.markup = true;
    return r;
  }
  if (name == "safe") {
    Value r = input.is_string() ? input : Value::string(str(input));
    r.markup = true;
    return r;
  }
  if (name == "trim") {
    return Value::string(encode_utf8(strip_chars(decode_utf8(str(input)), args.get(0, "chars"), true, true, line)));
  }
  if (name == "upper") return Value::string(upper(str(input)));
  if (name == "lower") return Value::string(lower(str(input)));
  if (name == "title") {  // jinja2's own: words split at whitespace, '-' and brackets
    std::u32string cs = decode_utf8(str(input));
    bool start = true;
    for (char32_t& c : cs) {
      bool sep = is_python_space(c) || c == '-' || c == '[' || c == ']' || c == '(' || c == ')' ||
                 c == '{' || c == '}';
      if (c < 0x80) c = start ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c));
      start = sep;
    }
    return Value::string(encode_utf8(cs));
  }
  if (name == "capitalize") return Value::string(capitalize(str(input)));
  if (name == "replace") {
    std::string old = str(args.get(0, "old")), with = str(args.get(1, "new"));
    int64_t count = args.has(2, "count") ? to_int(args.get(2, "count"), line, "replace") : -1;
    return Value::string(replace(str(input), old, with, count, line));
  }
  if (name == "default" || name == "d") {
    Value fallback = args.get(0, "default_value", Value::string(""));
    bool boolean = truthy(args.get(1, "boolean", Value::boolean(false)));
    if (input.is_undefined() || (boolean && !truthy(input))) return fallback;
    return input;
  }
  if (name == "join") {
    std::string sep = str(args.get(0, "d", Value::string("")));
    Value attribute = args.get(1, "attribute");
    std::string r;
    bool first = true;
    for (const auto& x : as_list(input, line)) {
      if (!first) r += sep;
      first = false;
      r += str(attribute.is_none() ? x : attribute_path(x, str(attribute), line));
    }
    return Value::string(std::move(r));
  }
  if (name == "list") return Value::of_list(as_list(input, line));
  if (name == "items") {
    if (input.is_undefined()) return Value::of_generator({});
    if (!input.is_dict()) fail(line, "Can only get item pairs from a mapping.");
    Value items = items_of(input);
    items.generator = true;
    return items;
  }
  if (name == "dictsort") {
    if (!input.is_dict()) fail(line, "You can only sort by either \"key\" or \"value\"");
    bool cs = truthy(args.get(0, "case_sensitive", Value::boolean(false)));
    std::string by = str(args.get(1, "by", Value::string("key")));
    bool reverse = truthy(args.get(2, "reverse", Value::boolean(false)));
    List items = *items_of(input).list;
    size_t pos = by == "value" ? 1 : 0;
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      int c = compare(sort_key((*a.list)[pos], cs), sort_key((*b.list)[pos], cs), line);
      return reverse ? c > 0 : c < 0;
    });
    return Value::of_list(std::move(items));
  }
  if (name == "first" || name == "last") {
    List items = as_list(input, line);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string cs = decode_utf8(input.s);
      std::reverse(cs.begin(), cs.end());
      return Value::string(encode_utf8(cs));
    }
    List items = as_list(input, line);
    std::reverse(items.begin(), items.end());
    return Value::of_generator(std::move(items));
  }
  if (name == "sort") {
    bool reverse = truthy(args.get(0, "reverse", Value::boolean(false)));
    bool cs = truthy(args.get(1, "case_sensitive", Value::boolean(false)));
    Value attribute = args.get(2, "attribute");
    List items = as_list(input, line);
    auto key = [&](const Value& v) {
      return sort_key(attribute.is_none() ? v : attribute_path(v, str(attribute), line), cs);
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      int c = compare(key(a), key(b), line);
      return reverse ? c > 0 : c < 0;
    });
    return Value::of_list(std::move(items));
  }
  if (name == "unique") {
    bool cs = truthy(args.get(0, "case_sensitive", Value::boolean(false)));
    Value attribute = args.get(1, "attribute");
    List out, seen;
    for (const auto& x : as_list(input, line)) {
      Value k = sort_key(attribute.is_none() ? x : attribute_path(x, str(attribute), line), cs);
      bool dup = false;
      for (const auto& s : seen) dup = dup || equal(s, k);
      if (!dup) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::of_generator(std::move(out));
  }
  if (name == "map") {
    List out;
    if (!truthy(input)) return Value::of_generator({});
    Value attribute = args.get(99, "attribute", Value::undefined());
    if (!attribute.is_undefined()) {
      Value dflt = args.get(99, "default", Value::undefined());
      for (const auto& x : as_list(input, line)) {
        Value v = attribute_path(x, str(attribute), line);
        out.push_back(v.is_undefined() && !dflt.is_undefined() ? dflt : v);
      }
      return Value::of_generator(std::move(out));
    }
    if (args.positional.empty()) fail(line, "map requires a filter argument");
    std::string filter = need_string(args.positional[0], line, "map");
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const auto& x : as_list(input, line)) {
      Args copy = rest;
      out.push_back(apply_filter(in, filter, x, copy, line));
    }
    return Value::of_generator(std::move(out));
  }
  if (name == "select") return select(in, input, args, false, true, line);
  if (name == "reject") return select(in, input, args, false, false, line);
  if (name == "selectattr") return select(in, input, args, true, true, line);
  if (name == "rejectattr") return select(in, input, args, true, false, line);
  if (name == "int") {
    Value dflt = args.get(0, "default", Value::integer(0));
    if (input.kind == Value::Kind::kInt) return input;
    if (input.kind == Value::Kind::kBool) return Value::integer(input.b);
    if (input.kind == Value::Kind::kFloat) {
      return std::isfinite(input.f) ? Value::integer(truncate_to_int(input.f, line)) : dflt;
    }
    if (input.is_string()) {
      std::string s = encode_utf8(strip_chars(decode_utf8(input.s), Value::none(), true, true, line));
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(v);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value::integer(truncate_to_int(d, line));
    }
    return dflt;
  }
  if (name == "float") {
    Value dflt = args.get(0, "default", Value::real(0.0));
    if (input.is_number()) return Value::real(input.as_double());
    if (input.is_string()) {
      std::string s = encode_utf8(strip_chars(decode_utf8(input.s), Value::none(), true, true, line));
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::real(d);
    }
    return dflt;
  }
  if (name == "abs") {
    if (input.kind == Value::Kind::kFloat) return Value::real(std::fabs(input.f));
    if (input.is_number()) {
      const int64_t x = input.kind == Value::Kind::kBool ? input.b : input.i;
      if (x == std::numeric_limits<int64_t>::min()) fail(line, "abs: integer overflow");
      return Value::integer(x < 0 ? -x : x);
    }
    fail(line, "bad operand type for abs(): '" + type_name(input) + "'");
  }
  if (name == "round") {
    if (!input.is_number()) fail(line, "round: expected a number, got '" + type_name(input) + "'");
    int64_t precision = to_int(args.get(0, "precision", Value::integer(0)), line, "round");
    std::string method = str(args.get(1, "method", Value::string("common")));
    double scale = std::pow(10.0, static_cast<double>(precision)), x = input.as_double() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::real(r / scale);
  }
  if (name == "indent") {
    Value width = args.get(0, "width", Value::integer(4));
    const int64_t pad_bytes = width.is_string() ? 0 : to_int(width, line, "indent");
    check_built(static_cast<size_t>(std::max<int64_t>(pad_bytes, 0)), line, "indent");
    std::string pad = width.is_string() ? width.s : std::string(static_cast<size_t>(std::max<int64_t>(pad_bytes, 0)), ' ');
    bool first = truthy(args.get(1, "first", Value::boolean(false)));
    bool blank = truthy(args.get(2, "blank", Value::boolean(false)));
    const std::string text = str(input);
    List lines = splitlines(text + "\n");
    check_built(text.size() + pad.size() * lines.size(), line, "indent");
    std::string r;
    for (size_t k = 0; k < lines.size(); ++k) {
      const std::string& l = lines[k].s;
      if (k == 0) {
        r = l;
      } else {
        r += "\n";
        if (blank || !l.empty()) r += pad;
        r += l;
      }
    }
    if (first) r = pad + r;
    return Value::string(std::move(r));
  }
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(split(str(input), Value::none(), -1, false, line).size()));
  if (name == "center") {
    int64_t width = to_int(args.get(0, "width", Value::integer(80)), line, "center");
    std::u32string cs = decode_utf8(str(input));
    int64_t n = static_cast<int64_t>(cs.size());
    if (width <= n) return Value::string(str(input));
    check_built(static_cast<size_t>(width), line, "center");
    int64_t total = width - n, left = total / 2 + (total & width & 1);
    return Value::string(std::string(left, ' ') + str(input) + std::string(total - left, ' '));
  }
  if (name == "sum") {
    Value attribute = args.get(0, "attribute");
    Value acc = args.get(1, "start", Value::integer(0));
    for (const auto& x : as_list(input, line)) {
      Value v = attribute.is_none() ? x : attribute_path(x, str(attribute), line);
      if (!v.is_number() || !acc.is_number()) fail(line, "sum: expected numbers");
      if (acc.kind == Value::Kind::kFloat || v.kind == Value::Kind::kFloat) {
        acc = Value::real(acc.as_double() + v.as_double());
      } else {
        acc = Value::integer(acc.i + v.i);
      }
    }
    return acc;
  }
  if (name == "min" || name == "max") {
    bool cs = truthy(args.get(0, "case_sensitive", Value::boolean(false)));
    Value attribute = args.get(1, "attribute");
    List items = as_list(input, line);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    Value best = items[0];
    auto key = [&](const Value& v) {
      return sort_key(attribute.is_none() ? v : attribute_path(v, str(attribute), line), cs);
    };
    for (const auto& x : items) {
      int c = compare(key(x), key(best), line);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  fail(line, "No filter named '" + name + "'.");
}

bool apply_test(Interpreter&, const std::string& name, const Value& v, Args& args, int line) {
  auto arg = [&]() { return args.get(0, "other", Value::undefined()); };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Value::Kind::kInt;
  if (name == "float") return v.kind == Value::Kind::kFloat;
  if (name == "boolean") return v.kind == Value::Kind::kBool;
  if (name == "true") return v.kind == Value::Kind::kBool && v.b;
  if (name == "false") return v.kind == Value::Kind::kBool && !v.b;
  if (name == "mapping") return v.is_dict() && !v.ns;
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || (v.is_list() && !v.generator) || (v.is_dict() && !v.ns) || v.is_undefined();
  if (name == "callable") return v.kind == Value::Kind::kCallable;
  if (name == "odd" || name == "even") {
    int64_t x = to_int(v, line, name.c_str());
    return name == "odd" ? (x % 2 != 0) : (x % 2 == 0);
  }
  if (name == "divisibleby") {
    int64_t x = to_int(v, line, "divisibleby"), n = to_int(args.get(0, "num"), line, "divisibleby");
    if (n == 0) fail(line, "integer division or modulo by zero");
    return x % n == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "lt" || name == "<") return compare(v, arg(), line) < 0;
  if (name == "le" || name == "<=") return compare(v, arg(), line) <= 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return compare(v, arg(), line) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg(), line) >= 0;
  if (name == "lessthan") return compare(v, arg(), line) < 0;
  if (name == "in") return contains(args.get(0, "seq"), v, line);
  if (name == "sameas") {
    Value o = arg();
    if (v.kind != o.kind) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind == Value::Kind::kBool) return v.b == o.b;
    return equal(v, o) && (v.is_number() || (v.list == o.list && v.dict == o.dict));
  }
  if (name == "lower" || name == "upper") {
    std::string s = str(v);
    return name == "lower" ? s == lower(s) && s != upper(s) : s == upper(s) && s != lower(s);
  }
  fail(line, "No test named '" + name + "'.");
}

}  // namespace strata::jinja
