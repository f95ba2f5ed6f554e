// jinja2's attribute / item lookup and Python's str, dict and list methods
// (methods.h).
#include "model/jinja/methods.h"

#include <cctype>
#include <functional>

#include "model/jinja/builtins.h"
#include "model/jinja/python_str.h"

namespace strata::jinja {
namespace {

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

Value items_of(const Value& d) {
  List items;
  for (const auto& [k, v] : *d.dict) items.push_back(Value::of_list({Value::string(k), v}, true));
  return Value::of_list(std::move(items));
}

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

}  // namespace strata::jinja
