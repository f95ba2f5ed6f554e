// The evaluator: statements and expressions of ast.h over Values, with
// jinja2's scoping (a for loop's body and a macro's body are scopes of their
// own; `set` elsewhere writes the enclosing scope) and its Undefined.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "model/jinja/ast.h"
#include "model/jinja/builtins.h"
#include "model/jinja/methods.h"

namespace strata::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

struct Frame {
  Frame* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars) {
      if (k == name) {
        x = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

}  // namespace

struct Interpreter {
  std::time_t now = 0;
  long iterations = 0;
  size_t built_bytes = 0;
  int call_depth = 0;
  Frame* root = nullptr;
  const Value* hole = nullptr;  // the body of a filter block
  std::vector<std::shared_ptr<Frame>> macro_frames;

  void emit(std::string& out, std::string_view text, int line) {
    if (out.size() + text.size() > Limits::kMaxOutputBytes) {
      throw Error{absl::StatusCode::kResourceExhausted,
                  absl::StrCat("line ", line, ": output exceeds ", Limits::kMaxOutputBytes, " bytes")};
    }
    out.append(text);
  }

  void count_iteration(int line) {
    if (++iterations > Limits::kMaxLoopIterations) {
      throw Error{absl::StatusCode::kResourceExhausted,
                  absl::StrCat("line ", line, ": more than ", Limits::kMaxLoopIterations, " loop iterations")};
    }
  }

  Flow exec_body(const Body& body, Frame& frame, std::string& out) {
    for (const auto& node : body) {
      Flow flow = exec(*node, frame, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Node& n, Frame& frame, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText: emit(out, n.text, n.line); return Flow::kNormal;
      case Node::Kind::kOutput: emit(out, str(eval(*n.expr, frame)), n.line); return Flow::kNormal;
      case Node::Kind::kBlock: return exec_body(n.bodies[0], frame, out);
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kIf:
        for (size_t k = 0; k < n.conds.size(); ++k) {
          if (truthy(eval(*n.conds[k], frame))) return exec_body(n.bodies[k], frame, out);
        }
        if (n.bodies.size() > n.conds.size()) return exec_body(n.bodies.back(), frame, out);
        return Flow::kNormal;
      case Node::Kind::kFor: exec_for(n, frame, out); return Flow::kNormal;
      case Node::Kind::kSet: {
        Value v = eval(*n.expr, frame);
        if (n.expr2) {
          Value obj = eval(*n.expr2->args[0], frame);
          if (!obj.is_dict() || !obj.ns) fail(n.line, "cannot assign attribute on non-namespace object");
          // Namespaces are shared and mutable: one set to hold another
          // could chain a million of them (freed by recursion) or hold
          // itself (never freed). Chat templates keep flags, counters,
          // strings and lists of messages in them.
          if (v.holds_namespace) {
            fail(n.line, absl::StrCat("cannot set ", n.expr2->name,
                                      " of a namespace to a namespace or a value holding one"));
          }
          for (auto& [k, x] : *obj.dict) {
            if (k == n.expr2->name) {
              x = std::move(v);
              return Flow::kNormal;
            }
          }
          obj.dict->emplace_back(n.expr2->name, std::move(v));
          return Flow::kNormal;
        }
        assign(n.targets, std::move(v), frame, n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string text;
        exec_body(n.bodies[0], frame, text);
        Value v = Value::string(std::move(text));
        if (n.filter) v = with_hole(*n.filter, frame, v);
        frame.set(n.targets[0], std::move(v));
        return Flow::kNormal;
      }
      case Node::Kind::kFilterBlock: {
        std::string text;
        exec_body(n.bodies[0], frame, text);
        emit(out, str(with_hole(*n.filter, frame, Value::string(std::move(text)))), n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: frame.set(n.targets[0], make_macro(n)); return Flow::kNormal;
    }
    return Flow::kNormal;
  }

  Value with_hole(const Expr& filter, Frame& frame, const Value& v) {
    const Value* saved = hole;
    hole = &v;
    Value result = eval(filter, frame);
    hole = saved;
    return result;
  }

  void assign(const std::vector<std::string>& targets, Value v, Frame& frame, int line) {
    if (targets.size() == 1) {
      frame.set(targets[0], std::move(v));
      return;
    }
    List items = iterate(v, line);
    if (items.size() != targets.size()) {
      fail(line, items.size() > targets.size()
                     ? absl::StrCat("too many values to unpack (expected ", targets.size(), ")")
                     : absl::StrCat("not enough values to unpack (expected ", targets.size(), ", got ",
                                    items.size(), ")"));
    }
    for (size_t k = 0; k < targets.size(); ++k) frame.set(targets[k], items[k]);
  }

  void exec_for(const Node& n, Frame& frame, std::string& out) {
    List all = iterate(eval(*n.expr, frame), n.line);
    List items;
    if (n.expr2) {
      for (auto& item : all) {
        count_iteration(n.line);
        Frame f{&frame, {}};
        assign(n.targets, item, f, n.line);
        if (truthy(eval(*n.expr2, f))) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      if (n.bodies.size() > 1) exec_body(n.bodies[1], frame, out);
      return;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < length; ++k) {
      count_iteration(n.line);
      Frame f{&frame, {}};
      assign(n.targets, items[k], f, n.line);
      Dict loop = {{"index", Value::integer(k + 1)},
                   {"index0", Value::integer(k)},
                   {"revindex", Value::integer(length - k)},
                   {"revindex0", Value::integer(length - k - 1)},
                   {"first", Value::boolean(k == 0)},
                   {"last", Value::boolean(k == length - 1)},
                   {"length", Value::integer(length)},
                   {"depth", Value::integer(1)},
                   {"depth0", Value::integer(0)}};
      const int64_t index0 = k;
      loop.emplace_back("cycle", Value::callable("cycle", [index0](Interpreter&, Args& args, int line) {
        if (args.positional.empty()) fail(line, "no items for cycling given");
        return args.positional[static_cast<size_t>(index0) % args.positional.size()];
      }));
      if (k > 0) loop.emplace_back("previtem", items[k - 1]);
      if (k + 1 < length) loop.emplace_back("nextitem", items[k + 1]);
      f.set("loop", Value::of_dict(std::move(loop)));
      if (exec_body(n.bodies[0], f, out) == Flow::kBreak) break;
    }
  }

  Value make_macro(const Node& n) {
    const Node* node = &n;
    return Value::callable(n.targets[0], [node](Interpreter& in, Args& args, int line) {
      if (++in.call_depth > Limits::kMaxCallDepth) {
        throw Error{absl::StatusCode::kResourceExhausted,
                    absl::StrCat("line ", line, ": macro calls nested deeper than ", Limits::kMaxCallDepth)};
      }
      Frame f{in.root, {}};
      List varargs;
      for (size_t k = 0; k < args.positional.size(); ++k) {
        if (k < node->params.size()) {
          f.set(node->params[k], args.positional[k]);
        } else {
          varargs.push_back(args.positional[k]);
        }
      }
      Dict kwargs;
      for (auto& [name, v] : args.keyword) {
        auto it = std::find(node->params.begin(), node->params.end(), name);
        if (it == node->params.end()) {
          kwargs.emplace_back(name, v);
        } else {
          f.set(name, v);
        }
      }
      for (size_t k = 0; k < node->params.size(); ++k) {
        bool given = false;
        for (auto& [name, v] : f.vars) given = given || name == node->params[k];
        if (given) continue;
        f.set(node->params[k], node->defaults[k] ? in.eval(*node->defaults[k], f)
                                                 : Value::undefined("'" + node->params[k] + "' is undefined"));
      }
      f.set("varargs", Value::of_list(std::move(varargs), true));
      f.set("kwargs", Value::of_dict(std::move(kwargs)));
      std::string text;
      in.exec_body(node->bodies[0], f, text);
      --in.call_depth;
      return Value::string(std::move(text));
    });
  }

  static List iterate(const Value& v, int line) {
    switch (v.kind) {
      case Value::Kind::kUndefined: return {};
      case Value::Kind::kList: return *v.list;
      case Value::Kind::kDict: {
        List keys;
        for (const auto& [k, x] : *v.dict) keys.push_back(Value::string(k));
        return keys;
      }
      case Value::Kind::kString: {
        List chars;
        for (char32_t c : decode_utf8(v.s)) chars.push_back(Value::string(encode_utf8(std::u32string(1, c))));
        return chars;
      }
      default: fail(line, "'" + type_name(v) + "' object is not iterable");
    }
  }

  Value lookup(const std::string& name) const;

  Value eval(const Expr& e, Frame& frame) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: {
        if (const Value* v = frame.lookup(e.name)) return *v;
        Value g = global(e.name);
        if (!g.is_undefined()) return g;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::kList: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, frame));
        return Value::of_list(std::move(items), e.tuple);
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], frame);
          std::string ks = key.is_string() ? key.s : str(key);
          Value v = eval(*e.args[k + 1], frame);
          bool found = false;
          for (auto& [dk, dv] : d) {
            if (dk == ks) {
              dv = v;
              found = true;
            }
          }
          if (!found) d.emplace_back(ks, std::move(v));
        }
        return Value::of_dict(std::move(d));
      }
      case Expr::Kind::kAttr: return get_attr(eval(*e.args[0], frame), e.name, e.line);
      case Expr::Kind::kItem: return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame), e.line);
      case Expr::Kind::kSlice: return slice(e, frame);
      case Expr::Kind::kCall: {
        Value callee = eval(*e.args[0], frame);
        Args args = eval_args(e, frame);
        if (callee.is_undefined()) fail(e.line, undefined_message(callee));
        if (callee.kind != Value::Kind::kCallable) fail(e.line, "'" + type_name(callee) + "' object is not callable");
        return callee.fn->fn(*this, args, e.line);
      }
      case Expr::Kind::kFilter: {
        Value input = e.args[0] ? eval(*e.args[0], frame) : (hole ? *hole : Value::undefined());
        Args args = eval_args(e, frame);
        return apply_filter(*this, e.name, input, args, e.line);
      }
      case Expr::Kind::kTest: {
        Value input = eval(*e.args[0], frame);
        Args args = eval_args(e, frame);
        bool r = apply_test(*this, e.name, input, args, e.line);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.args[0], frame);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) fail(e.line, undefined_message(v));
        if (!v.is_number()) fail(e.line, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind == Value::Kind::kBool ? Value::integer(v.b) : v;
        if (v.kind == Value::Kind::kFloat) return Value::real(-v.f);
        return Value::integer(-(v.kind == Value::Kind::kBool ? v.b : v.i));
      }
      case Expr::Kind::kBinary: {
        if (e.name == "and") {
          Value a = eval(*e.args[0], frame);
          return truthy(a) ? eval(*e.args[1], frame) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.args[0], frame);
          return truthy(a) ? a : eval(*e.args[1], frame);
        }
        return binary(e.name, eval(*e.args[0], frame), eval(*e.args[1], frame), e.line);
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0], frame);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1], frame);
          if (!compare_op(e.ops[k], left, right, e.line)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCond:
        if (truthy(eval(*e.args[0], frame))) return eval(*e.args[1], frame);
        return e.args[2] ? eval(*e.args[2], frame) : Value::undefined("the inline if's else");
    }
    return Value::undefined();
  }

  Args eval_args(const Expr& e, Frame& frame) {
    Args args;
    for (size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k], frame));
    for (size_t k = 0; k < e.kwnames.size(); ++k) args.keyword.emplace_back(e.kwnames[k], eval(*e.kwargs[k], frame));
    return args;
  }

  Value global(const std::string& name);

  Value slice(const Expr& e, Frame& frame) {
    Value obj = eval(*e.args[0], frame);
    auto part = [&](int k) -> std::optional<int64_t> {
      if (!e.args[k]) return std::nullopt;
      Value v = eval(*e.args[k], frame);
      if (v.is_none()) return std::nullopt;
      if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) fail(e.line, "slice indices must be integers or None");
      return v.kind == Value::Kind::kBool ? v.b : v.i;
    };
    std::optional<int64_t> start = part(1), stop = part(2), step_opt = part(3);
    int64_t step = step_opt.value_or(1);
    if (step == 0) fail(e.line, "slice step cannot be zero");
    if (obj.is_undefined()) fail(e.line, undefined_message(obj));
    std::u32string chars;
    int64_t len;
    if (obj.is_string()) {
      chars = decode_utf8(obj.s);
      len = static_cast<int64_t>(chars.size());
    } else if (obj.is_list()) {
      len = static_cast<int64_t>(obj.list->size());
    } else {
      fail(e.line, "'" + type_name(obj) + "' object is not subscriptable");
    }
    auto adjust = [&](std::optional<int64_t> v, int64_t dflt, bool is_start) {
      (void)is_start;
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) {
        x += len;
        if (x < 0) x = step < 0 ? -1 : 0;
      } else if (x >= len) {
        x = step < 0 ? len - 1 : len;
      }
      return x;
    };
    int64_t lo = adjust(start, step < 0 ? len - 1 : 0, true);
    int64_t hi = adjust(stop, step < 0 ? -1 : len, false);
    std::vector<int64_t> idx;
    if (step > 0) {
      for (int64_t k = lo; k < hi; k += step) idx.push_back(k);
    } else {
      for (int64_t k = lo; k > hi; k += step) idx.push_back(k);
    }
    if (obj.is_string()) {
      std::u32string r;
      for (int64_t k : idx) r += chars[k];
      return Value::string(encode_utf8(r));
    }
    List r;
    for (int64_t k : idx) r.push_back((*obj.list)[k]);
    return Value::of_list(std::move(r), obj.tuple);
  }

  bool compare_op(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return contains(b, a, line);
    if (op == "notin") return !contains(b, a, line);
    if (a.is_undefined()) fail(line, undefined_message(a));
    if (b.is_undefined()) fail(line, undefined_message(b));
    int c = compare(a, b, line);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value built(Value v, int line) {
    built_bytes += v.s.size();
    if (built_bytes > Limits::kMaxBuiltBytes) {
      throw Error{absl::StatusCode::kResourceExhausted,
                  absl::StrCat("line ", line, ": more than ", Limits::kMaxBuiltBytes,
                               " bytes of strings built")};
    }
    return v;
  }

  Value binary(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") return built(Value::string(str(a) + str(b)), line);
    if (a.is_undefined()) fail(line, undefined_message(a));
    if (b.is_undefined()) fail(line, undefined_message(b));
    auto unsupported = [&]() {
      if (op == "+" && a.is_string()) fail(line, "can only concatenate str (not \"" + type_name(b) + "\") to str");
      if (op == "+" && a.is_list() && !a.tuple) fail(line, "can only concatenate list (not \"" + type_name(b) + "\") to list");
      fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (a.is_number() && b.is_number()) {
      bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
      int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i, y = b.kind == Value::Kind::kBool ? b.b : b.i;
      double fx = a.as_double(), fy = b.as_double();
      int64_t r;
      if (op == "+") {
        if (ints && !__builtin_add_overflow(x, y, &r)) return Value::integer(r);
        if (ints) fail(line, "integer overflow");
        return Value::real(fx + fy);
      }
      if (op == "-") {
        if (ints && !__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
        if (ints) fail(line, "integer overflow");
        return Value::real(fx - fy);
      }
      if (op == "*") {
        if (ints && !__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
        if (ints) fail(line, "integer overflow");
        return Value::real(fx * fy);
      }
      if (op == "/") {
        if (fy == 0) fail(line, "division by zero");
        return Value::real(fx / fy);
      }
      if (op == "//" || op == "%") {
        if (fy == 0) fail(line, ints ? "integer division or modulo by zero" : "float floor division by zero");
        if (ints) {
          if (x == INT64_MIN && y == -1) fail(line, "integer overflow");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return Value::integer(op == "//" ? q : m);
        }
        double m = std::fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
        if (op == "%") return Value::real(m);
        return Value::real(std::floor(fx / fy));
      }
      if (op == "**") {
        if (ints && y >= 0) {
          int64_t acc = 1;
          for (int64_t k = 0; k < y; ++k) {
            if (__builtin_mul_overflow(acc, x, &acc)) fail(line, "integer overflow");
            if (acc == 0 || acc == 1) break;
          }
          return Value::integer(acc);
        }
        return Value::real(std::pow(fx, fy));
      }
    }
    if (op == "+" && a.is_string() && b.is_string()) {
      if (!a.markup && !b.markup) return built(Value::string(a.s + b.s), line);
      Value r = Value::string((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)));
      r.markup = true;
      return r;
    }
    if (op == "+" && a.is_list() && b.is_list() && a.tuple == b.tuple) {
      List r = *a.list;
      r.insert(r.end(), b.list->begin(), b.list->end());
      return Value::of_list(std::move(r), a.tuple);
    }
    if (op == "*" && (a.is_string() || a.is_list()) && (b.kind == Value::Kind::kInt || b.kind == Value::Kind::kBool)) {
      int64_t n = b.kind == Value::Kind::kBool ? b.b : b.i;
      size_t unit = a.is_string() ? a.s.size() : a.list->size();
      // Divided, not multiplied: unit * n wrapped past 2^64 ('a' * 2^62
      // passed), and an empty unit repeated 10^18 times looped that often.
      if (unit == 0 || n <= 0) n = 0;
      if (n > 0 && static_cast<uint64_t>(n) > Limits::kMaxOutputBytes / unit) {
        throw Error{absl::StatusCode::kResourceExhausted, absl::StrCat("line ", line, ": repetition too large")};
      }
      if (a.is_string()) {
        std::string r;
        for (int64_t k = 0; k < n; ++k) r += a.s;
        return Value::string(std::move(r));
      }
      List r;
      for (int64_t k = 0; k < n; ++k) r.insert(r.end(), a.list->begin(), a.list->end());
      return Value::of_list(std::move(r), a.tuple);
    }
    if (op == "%" && a.is_string()) fail(line, "unsupported: printf-style string formatting (%)");
    unsupported();
    return Value::undefined();
  }
};

std::string undefined_message(const Value& v) {
  return v.s.empty() ? "value is undefined" : v.s;
}

bool contains(const Value& container, const Value& needle, int line) {
  switch (container.kind) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string()) fail(line, "'in <string>' requires string as left operand, not " + type_name(needle));
      return container.s.find(needle.s) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& x : *container.list) {
        if (equal(x, needle)) return true;
      }
      return false;
    case Value::Kind::kDict: return needle.is_string() && container.find(needle.s) != nullptr;
    default: fail(line, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

List iterate_value(const Value& v, int line) { return Interpreter::iterate(v, line); }

Value Interpreter::global(const std::string& name) {
  if (name == "range") {
    return Value::callable("range", [](Interpreter&, Args& args, int line) {
      auto as_int = [&](const Value& v) {
        if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kBool) {
          fail(line, "'" + type_name(v) + "' object cannot be interpreted as an integer");
        }
        return v.kind == Value::Kind::kBool ? static_cast<int64_t>(v.b) : v.i;
      };
      int64_t start = 0, stop = 0, step = 1;
      if (args.positional.size() == 1) {
        stop = as_int(args.positional[0]);
      } else if (args.positional.size() >= 2) {
        start = as_int(args.positional[0]);
        stop = as_int(args.positional[1]);
        if (args.positional.size() > 2) step = as_int(args.positional[2]);
      } else {
        fail(line, "range expected at least 1 argument, got 0");
      }
      if (step == 0) fail(line, "range() arg 3 must not be zero");
      List r;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (r.size() >= 100000) fail(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        r.push_back(Value::integer(k));
      }
      return Value::of_list(std::move(r));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::callable(name, [ns](Interpreter&, Args& args, int line) {
      Dict d;
      for (const auto& p : args.positional) {
        if (!p.is_dict()) fail(line, "namespace() / dict() takes a mapping or keyword arguments");
        for (const auto& item : *p.dict) d.push_back(item);
      }
      for (auto& [k, v] : args.keyword) {
        bool found = false;
        for (auto& [dk, dv] : d) {
          if (dk == k) {
            dv = v;
            found = true;
          }
        }
        if (!found) d.emplace_back(k, v);
      }
      Value v = Value::of_dict(std::move(d));
      v.ns = ns;
      v.holds_namespace = v.holds_namespace || ns;
      return v;
    });
  }
  if (name == "raise_exception") {
    return Value::callable(name, [](Interpreter&, Args& args, int) -> Value {
      throw Error{absl::StatusCode::kFailedPrecondition, str(args.get(0, "message", Value::string("")))};
    });
  }
  if (name == "strftime_now") {
    return Value::callable(name, [](Interpreter& in, Args& args, int line) {
      Value fmt = args.get(0, "format");
      if (!fmt.is_string()) fail(line, "strftime_now: the format must be a string");
      std::tm tm{};
      gmtime_r(&in.now, &tm);
      char buf[512];
      size_t n = fmt.s.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.s.c_str(), &tm);
      if (n == 0 && !fmt.s.empty()) fail(line, "strftime_now: format too long or empty result");
      return Value::string(std::string(buf, n));
    });
  }
  return Value::undefined();
}

Value call_value(Interpreter& in, const Value& fn, Args& args, int line) {
  return fn.fn->fn(in, args, line);
}

std::string render_template(const Node& root, const Value& context, std::time_t now) {
  Interpreter in;
  in.now = now;
  Frame globals;
  if (context.is_dict()) {
    for (const auto& [k, v] : *context.dict) globals.vars.emplace_back(k, v);
  }
  in.root = &globals;
  std::string out;
  in.exec_body(root.bodies[0], globals, out);
  return out;
}

}  // namespace strata::jinja
