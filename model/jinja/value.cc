// Python semantics of the interpreter's values: truth, ==, <, str(), repr(),
// float repr, json.dumps.
#include "model/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace strata::jinja {

void fail(int line, std::string message) {
  throw Error{absl::StatusCode::kInvalidArgument, absl::StrCat("line ", line, ": ", message)};
}

Value Value::undefined(std::string what) {
  Value v;
  v.s = std::move(what);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::real(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
namespace {
// Deeply nested values would make printing, comparing and freeing them
// recurse without bound; refused when built. Sets v's depth and whether it
// holds a namespace, from its elements in one pass.
template <typename It, typename Get>
void set_nesting(Value& v, It begin, It end, Get get) {
  int d = 0;
  bool ns = false;
  for (It it = begin; it != end; ++it) {
    d = std::max(d, get(*it).depth);
    ns = ns || get(*it).holds_namespace;
  }
  if (d + 1 > Value::kMaxDepth) {
    throw Error{absl::StatusCode::kResourceExhausted,
                absl::StrCat("a list or dict nested deeper than ", Value::kMaxDepth)};
  }
  v.depth = d + 1;
  v.holds_namespace = ns;
}
}  // namespace

Value Value::of_list(List x, bool tuple) {
  Value v;
  set_nesting(v, x.begin(), x.end(), [](const Value& e) -> const Value& { return e; });
  v.kind = Kind::kList;
  v.list = std::make_shared<List>(std::move(x));
  v.tuple = tuple;
  return v;
}
Value Value::of_generator(List x) {
  Value v = of_list(std::move(x));
  v.generator = true;
  return v;
}
Value Value::of_dict(Dict x) {
  Value v;
  set_nesting(v, x.begin(), x.end(), [](const auto& e) -> const Value& { return e.second; });
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(x));
  return v;
}
Value Value::callable(std::string name, Function fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value Args::get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return fallback;
}

bool Args::has(size_t index, std::string_view name) const {
  if (index < positional.size()) return true;
  for (const auto& [k, v] : keyword) {
    if (k == name) return true;
  }
  return false;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0;
    case Value::Kind::kString: return !v.s.empty();
    case Value::Kind::kList: return v.generator || !v.list->empty();
    case Value::Kind::kDict: return v.ns || !v.dict->empty();
    case Value::Kind::kCallable: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      return (a.kind == Value::Kind::kBool ? a.b : a.i) == (b.kind == Value::Kind::kBool ? b.b : b.i);
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.s == b.s;
    case Value::Kind::kList:
      if (a.generator || b.generator) return a.list == b.list;
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.ns || b.ns) return a.dict == b.dict;
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (other == nullptr || !equal(v, *other)) return false;
      }
      return true;
    case Value::Kind::kCallable: return a.fn == b.fn;
    default: return false;
  }
}

int compare(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i;
      int64_t y = b.kind == Value::Kind::kBool ? b.b : b.i;
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.s.compare(b.s);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.tuple == b.tuple && !a.generator && !b.generator) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (!equal((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k], line);
    }
    return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
  }
  fail(line, absl::StrCat("'<' not supported between instances of '", type_name(a), "' and '",
                          type_name(b), "'"));
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      switch (v.view) {
        case Value::View::kItems: return "dict_items";
        case Value::View::kKeys: return "dict_keys";
        case Value::View::kValues: return "dict_values";
        default: break;
      }
      return v.generator ? "generator" : v.tuple ? "tuple" : "list";
    case Value::Kind::kDict: return v.ns ? "Namespace" : "dict";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  int x = decpt - 1;
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
  return out + eb;
}

namespace {

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return repr_string(v.s);
    case Value::Kind::kList: {
      if (v.generator) return "<generator object>";
      if (v.view != Value::View::kNone) {
        Value plain = v;
        plain.view = Value::View::kNone;
        return type_name(v) + "(" + repr(plain) + ")";
      }
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) out += ", ";
        out += repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      if (v.ns) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.dict) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr(x);
      }
      return out + "}";
    }
    case Value::Kind::kUndefined: return "Undefined";
    default: return str(v);
  }
}

std::string str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.b ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.i);
    case Value::Kind::kFloat: return python_float_repr(v.f);
    case Value::Kind::kString: return v.s;
    case Value::Kind::kCallable: return "<function " + v.fn->name + ">";
    default: return repr(v);
  }
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > Value::kMaxDepth) {
    throw Error{absl::StatusCode::kInvalidArgument,
                absl::StrCat("the template's variables nest deeper than ", Value::kMaxDepth)};
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::real(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      list.reserve(j.size());
      for (const auto& x : j) list.push_back(from_json_at(x, depth + 1));
      return Value::of_list(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      dict.reserve(j.size());
      for (const auto& [k, x] : j.items()) dict.emplace_back(k, from_json_at(x, depth + 1));
      return Value::of_dict(std::move(dict));
    }
    default: return Value::none();
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {

void json_string(const std::string& s, std::string& out, bool ensure_ascii) {
  out += '"';
  if (ensure_ascii) {  // \\uXXXX for every non-ASCII code point (surrogate pairs above U+FFFF)
    for (char32_t c : decode_utf8(s)) {
      if (c < 0x80) {
        std::string one;
        json_string(std::string(1, static_cast<char>(c)), one, false);
        out += one.substr(1, one.size() - 2);
        continue;
      }
      char buf[16];
      if (c >= 0x10000) {
        const unsigned v = static_cast<unsigned>(c) - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3ff));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    }
    out += '"';
    return;
  }
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                const std::string& key_sep, int level, int line, bool ascii, std::string& out) {
  if (level > 512) fail(line, "tojson: value nested too deep");
  auto newline = [&](int lvl) {
    if (indent >= 0) {
      out += '\n';
      out.append(static_cast<size_t>(indent) * lvl, ' ');
    }
  };
  switch (v.kind) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.i); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += python_float_repr(v.f);
      return;
    case Value::Kind::kString: json_string(v.s, out, ascii); return;
    case Value::Kind::kList: {
      if (v.generator || v.view != Value::View::kNone) break;
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) out += item_sep;
        newline(level + 1);
        json_value((*v.list)[k], indent, sort_keys, item_sep, key_sep, level + 1, line, ascii, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.ns) break;
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : *v.dict) items.push_back(&item);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) out += item_sep;
        newline(level + 1);
        json_string(items[k]->first, out, ascii);
        out += key_sep;
        json_value(items[k]->second, indent, sort_keys, item_sep, key_sep, level + 1, line, ascii, out);
      }
      newline(level);
      out += '}';
      return;
    }
    default: break;
  }
  fail(line, "Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, int indent, bool sort_keys, const std::string& item_sep,
                    const std::string& key_sep, int line, bool ensure_ascii) {
  std::string out;
  json_value(v, indent, sort_keys, item_sep, key_sep, 0, line, ensure_ascii, out);
  return out;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    unsigned char c = s[k];
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    bool ok = n >= 0;
    char32_t cp = n <= 0 ? c : (c & (0x3f >> n));  // payload bits of the lead byte
    for (int m = 1; ok && m <= n; ++m) {
      if (k + m >= s.size() || (static_cast<unsigned char>(s[k + m]) & 0xc0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3f);
      }
    }
    if (!ok || n < 0) {
      out += static_cast<char32_t>(0xDC00 + c);  // surrogateescape
      ++k;
      continue;
    }
    out += cp;
    k += n + 1;
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF) {
      out += static_cast<char>(c - 0xDC00);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 9 && c <= 13) || c == ' ' || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

int64_t to_int(const Value& v, int line, const char* what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  fail(line, std::string(what) + ": expected an integer, got '" + type_name(v) + "'");
}

std::string need_string(const Value& v, int line, const char* what) {
  if (!v.is_string()) fail(line, std::string(what) + ": expected a string, got '" + type_name(v) + "'");
  return v.s;
}

}  // namespace strata::jinja
