// jinja2's filters and tests, Python's str and dict methods, and jinja2's
// attribute / item lookup (attribute first for `.`, item first for `[]`),
// with the immutable sandbox's refusal of mutating methods.
#include "model/jinja/builtins.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/jinja/jinja.h"

namespace strata::jinja {
namespace {

int64_t to_int(const Value& v, int line, const char* what) {
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  fail(line, std::string(what) + ": expected an integer, got '" + type_name(v) + "'");
}

std::string need_string(const Value& v, int line, const char* what) {
  if (!v.is_string()) fail(line, std::string(what) + ": expected a string, got '" + type_name(v) + "'");
  return v.s;
}

std::u32string strip_chars(const std::u32string& s, const Value& chars, bool left, bool right, int line) {
  std::u32string set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = decode_utf8(need_string(chars, line, "strip"));
  auto drop = [&](char32_t c) { return ws ? is_python_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && drop(s[b])) ++b;
  }
  if (right) {
    while (e > b && drop(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

std::string ascii_map(const std::string& s, int (*f)(int)) {
  std::string r = s;
  for (char& c : r) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return r;
}
std::string upper(const std::string& s) { return ascii_map(s, ::toupper); }
std::string lower(const std::string& s) { return ascii_map(s, ::tolower); }
bool is_alpha_cp(char32_t c) { return (c < 0x80 && std::isalpha(static_cast<int>(c))) || c >= 0xC0; }

std::string title(const std::string& s) {
  std::u32string cs = decode_utf8(s);
  bool prev_cased = false;
  for (char32_t& c : cs) {
    if (c < 0x80 && std::isalpha(static_cast<int>(c))) {
      c = prev_cased ? std::tolower(static_cast<int>(c)) : std::toupper(static_cast<int>(c));
      prev_cased = true;
    } else {
      prev_cased = is_alpha_cp(c);
    }
  }
  return encode_utf8(cs);
}

std::string capitalize(const std::string& s) {
  std::string r = lower(s);
  if (!r.empty() && static_cast<unsigned char>(r[0]) < 0x80) r[0] = static_cast<char>(std::toupper(r[0]));
  return r;
}

// A string a filter or method builds, refused past the output limit (no
// render could print it; center(10**12) asked for a terabyte).
void check_built(size_t bytes, int line, const char* what) {
  if (bytes > Limits::kMaxOutputBytes) {
    throw Error{absl::StatusCode::kResourceExhausted,
                absl::StrCat("line ", line, ": ", what, " would make more than ",
                             Limits::kMaxOutputBytes, " bytes")};
  }
}

std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count,
                    int line) {
  std::string r;
  if (old.empty()) {  // Python inserts `with` between every code point
    std::u32string cs = decode_utf8(s);
    int64_t n = 0;
    for (char32_t c : cs) {
      if (count < 0 || n < count) {
        r += with;
        ++n;
      }
      r += encode_utf8(std::u32string(1, c));
      check_built(r.size(), line, "replace");
    }
    if (count < 0 || n < count) r += with;
    return r;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    r.append(s, pos, f - pos);
    r += with;
    check_built(r.size(), line, "replace");
    pos = f + old.size();
    ++n;
  }
  r.append(s, pos);
  return r;
}

List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, int line) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string cs = decode_utf8(s);
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t k = 0;
      while (k < cs.size()) {
        while (k < cs.size() && is_python_space(cs[k])) ++k;
        if (k >= cs.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) >= maxsplit) {
          size_t e = cs.size();
          while (e > k && is_python_space(cs[e - 1])) --e;
          words.push_back(cs.substr(k, e - k));
          break;
        }
        size_t b = k;
        while (k < cs.size() && !is_python_space(cs[k])) ++k;
        words.push_back(cs.substr(b, k - b));
      }
    } else {
      size_t k = cs.size();
      while (k > 0) {
        while (k > 0 && is_python_space(cs[k - 1])) --k;
        if (k == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) >= maxsplit) {
          size_t b = 0;
          while (b < k && is_python_space(cs[b])) ++b;
          words.push_back(cs.substr(b, k - b));
          break;
        }
        size_t e = k;
        while (k > 0 && !is_python_space(cs[k - 1])) --k;
        words.push_back(cs.substr(k, e - k));
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto& w : words) out.push_back(Value::string(encode_utf8(w)));
    return out;
  }
  std::string sp = need_string(sep, line, "split");
  if (sp.empty()) fail(line, "empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    for (;;) {
      size_t f = s.find(sp, pos);
      if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sp.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    for (;;) {
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
      if (end < sp.size()) break;
      size_t f = s.rfind(sp, end - sp.size());
      if (f == std::string::npos) break;
      parts.push_back(s.substr(f + sp.size(), end - f - sp.size()));
      end = f;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

List splitlines(const std::string& s) {
  List out;
  std::u32string cs = decode_utf8(s);
  std::u32string cur;
  for (size_t k = 0; k < cs.size(); ++k) {
    char32_t c = cs[k];
    bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
              c == 0x2028 || c == 0x2029;
    if (br) {
      if (c == '\r' && k + 1 < cs.size() && cs[k + 1] == '\n') ++k;
      out.push_back(Value::string(encode_utf8(cur)));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(Value::string(encode_utf8(cur)));
  return out;
}

Value unsafe(const std::string& type, const std::string& name) {
  return Value::callable(name, [type, name](Interpreter&, Args&, int line) -> Value {
    fail(line, "access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  });
}

Value bound(const std::string& name, std::function<Value(Args&, int)> fn) {
  return Value::callable(name, [fn = std::move(fn)](Interpreter&, Args& args, int line) { return fn(args, line); });
}

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return bound(name, [s, start](Args& a, int line) {
      Value p = a.get(0, "prefix");
      List options = p.is_list() ? *p.list : List{p};
      for (const auto& o : options) {
        std::string x = need_string(o, line, start ? "startswith" : "endswith");
        if (start ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                  : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) {
          return Value::boolean(true);
        }
      }
      return Value::boolean(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return bound(name, [s, l, r](Args& a, int line) {
      return Value::string(encode_utf8(strip_chars(decode_utf8(s), a.get(0, "chars"), l, r, line)));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return bound(name, [s, right](Args& a, int line) {
      return Value::of_list(split(s, a.get(0, "sep"), to_int(a.get(1, "maxsplit", Value::integer(-1)), line, "maxsplit"), right, line));
    });
  }
  if (name == "splitlines") return bound(name, [s](Args&, int) { return Value::of_list(splitlines(s)); });
  if (name == "replace") {
    return bound(name, [s](Args& a, int line) {
      return Value::string(replace(s, need_string(a.get(0, "old"), line, "replace"),
                                   need_string(a.get(1, "new"), line, "replace"),
                                   to_int(a.get(2, "count", Value::integer(-1)), line, "replace"),
                                   line));
    });
  }
  if (name == "upper") return bound(name, [s](Args&, int) { return Value::string(upper(s)); });
  if (name == "lower") return bound(name, [s](Args&, int) { return Value::string(lower(s)); });
  if (name == "title") return bound(name, [s](Args&, int) { return Value::string(title(s)); });
  if (name == "capitalize") return bound(name, [s](Args&, int) { return Value::string(capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bound(name, [s, name](Args& a, int line) {
      std::string sub = need_string(a.get(0, "sub"), line, "find");
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(decode_utf8(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") fail(line, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(decode_utf8(s.substr(0, p)).size()));
    });
  }
  if (name == "join") {
    return bound(name, [s](Args& a, int line) {
      std::string r;
      bool first = true;
      for (const auto& x : iterate_value(a.get(0, "iterable"), line)) {
        if (!first) r += s;
        first = false;
        r += need_string(x, line, "join");
      }
      return Value::string(std::move(r));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" ||
      name == "isupper") {
    return bound(name, [s, name](Args&, int) {
      if (s.empty()) return Value::boolean(false);
      bool cased = false;
      for (char32_t c : decode_utf8(s)) {
        bool ok;
        if (name == "isdigit") ok = c < 0x80 && std::isdigit(static_cast<int>(c));
        else if (name == "isalpha") ok = is_alpha_cp(c);
        else if (name == "isalnum") ok = is_alpha_cp(c) || (c < 0x80 && std::isdigit(static_cast<int>(c)));
        else if (name == "isspace") ok = is_python_space(c);
        else {
          bool up = c < 0x80 && std::isupper(static_cast<int>(c)), lo = c < 0x80 && std::islower(static_cast<int>(c));
          cased = cased || up || lo;
          ok = name == "islower" ? !up : !lo;
        }
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(name == "islower" || name == "isupper" ? cased : true);
    });
  }
  return Value::undefined();
}

Value items_of(const Value& d) {
  List items;
  for (const auto& [k, v] : *d.dict) items.push_back(Value::of_list({Value::string(k), v}, true));
  return Value::of_list(std::move(items));
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "get") {
    return bound(name, [obj](Args& a, int line) {
      Value key = a.get(0, "key");
      if (a.positional.empty()) fail(line, "get expected at least 1 argument, got 0");
      if (key.is_string()) {
        if (const Value* v = obj.find(key.s)) return *v;
      }
      return a.get(1, "default");
    });
  }
  if (name == "items") {
    return bound(name, [obj](Args&, int) {
      Value v = items_of(obj);
      v.view = Value::View::kItems;
      return v;
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return bound(name, [obj, keys](Args&, int) {
      List r;
      for (const auto& [k, v] : *obj.dict) r.push_back(keys ? Value::string(k) : v);
      Value view = Value::of_list(std::move(r));
      view.view = keys ? Value::View::kKeys : Value::View::kValues;
      return view;
    });
  }
  if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear") {
    return unsafe("dict", name);
  }
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "append" || name == "pop" || name == "insert" || name == "extend" || name == "remove" ||
      name == "clear" || name == "sort" || name == "reverse") {
    return unsafe(obj.tuple ? "tuple" : "list", name);
  }
  if (name == "index" || name == "count") {
    return bound(name, [obj, name](Args& a, int line) {
      Value x = a.get(0, "value");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->size(); ++k) {
        if (equal((*obj.list)[k], x)) {
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
      }
      if (name == "index") fail(line, "value is not in list");
      return Value::integer(n);
    });
  }
  return Value::undefined();
}

std::string attr_missing(const Value& obj, const std::string& name) {
  return "'" + (obj.is_none() ? std::string("None") : type_name(obj) + " object") + "' has no attribute '" + name + "'";
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case Value::Kind::kUndefined: fail(line, undefined_message(obj));
    case Value::Kind::kString: {
      Value m = string_method(obj, name);
      return m.is_undefined() ? Value::undefined(attr_missing(obj, name)) : m;
    }
    case Value::Kind::kDict: {
      if (!obj.ns) {
        Value m = dict_method(obj, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = obj.find(name)) return *v;
      return Value::undefined(attr_missing(obj, name));
    }
    case Value::Kind::kList: {
      Value m = list_method(obj, name);
      return m.is_undefined() ? Value::undefined(attr_missing(obj, name)) : m;
    }
    default: return Value::undefined(attr_missing(obj, name));
  }
}

Value get_item(const Value& obj, const Value& key, int line) {
  switch (obj.kind) {
    case Value::Kind::kUndefined: fail(line, undefined_message(obj));
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.find(key.s)) return *v;
        if (!obj.ns) {
          Value m = dict_method(obj, key.s);
          if (!m.is_undefined()) return m;
        }
      }
      return Value::undefined("'" + type_name(obj) + " object' has no attribute " + repr(key));
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (obj.generator) return Value::undefined("'generator object' has no attribute " + repr(key));
      if (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool) {
        int64_t k = key.kind == Value::Kind::kBool ? key.b : key.i;
        if (obj.is_list()) {
          int64_t n = static_cast<int64_t>(obj.list->size());
          if (k < 0) k += n;
          if (k >= 0 && k < n) return (*obj.list)[k];
        } else {
          std::u32string cs = decode_utf8(obj.s);
          int64_t n = static_cast<int64_t>(cs.size());
          if (k < 0) k += n;
          if (k >= 0 && k < n) return Value::string(encode_utf8(std::u32string(1, cs[k])));
        }
        return Value::undefined(type_name(obj) + " object has no element " + str(key));
      }
      if (key.is_string()) return get_attr(obj, key.s, line);
      return Value::undefined(type_name(obj) + " object has no element " + repr(key));
    case Value::Kind::kNone: return Value::undefined("None has no element " + repr(key));
    default: return Value::undefined("'" + type_name(obj) + " object' has no attribute " + repr(key));
  }
}

namespace {

// Attribute lookup for map/selectattr/sort: dotted paths, items first.
Value attribute_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? get_item(cur, Value::integer(std::stoll(part)), line) : get_item(cur, Value::string(part), line);
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
      return std::isfinite(input.f) ? Value::integer(static_cast<int64_t>(input.f)) : dflt;
    }
    if (input.is_string()) {
      std::string s = encode_utf8(strip_chars(decode_utf8(input.s), Value::none(), true, true, line));
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(v);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
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
    if (input.is_number()) return Value::integer(std::llabs(input.kind == Value::Kind::kBool ? input.b : input.i));
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
