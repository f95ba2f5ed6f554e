// Parser: tokens (lexer.h) to the statements and expressions of ast.h, with
// jinja2's precedence (filters and tests bind tighter than arithmetic, `not`
// looser than comparisons).
#include <cctype>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/jinja/ast.h"
#include "model/jinja/lexer.h"

namespace strata::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  NodeP parse() {
    auto root = std::make_shared<Node>();
    root->kind = Node::Kind::kBlock;
    root->line = 1;
    std::string end;
    root->bodies.push_back(parse_body({}, &end));
    return root;
  }

 private:
  struct Depth {
    explicit Depth(Parser* parser) : p(parser) {
      if (++p->depth_ > Limits::kMaxParseDepth) fail(p->cur().line, "template nested too deep");
    }
    ~Depth() { --p->depth_; }
    Parser* p;
  };
  // A left-nested chain built in a loop (a.b.c, x | f | g, a + b + c,
  // a or b, x if c if d): each link is one level more of the tree that
  // evaluating and freeing it recurse through, so the links count with the
  // parser's nesting until the chain's expression is done. (Counted only
  // by recursion, `{{ a.a.a... }}` 100000 links long parsed, then
  // overflowed the stack.)
  struct Chain {
    explicit Chain(Parser* parser) : p(parser) {}
    ~Chain() { p->depth_ -= links; }
    Chain(const Chain&) = delete;
    Chain& operator=(const Chain&) = delete;
    void link() {
      ++links;
      if (++p->depth_ > Limits::kMaxParseDepth) fail(p->cur().line, "template nested too deep");
    }
    Parser* p;
    int links = 0;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Token::Type::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Token::Type::kName && cur().text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().line, absl::StrCat("expected '", op, "', got ", describe(cur())));
    ++i_;
  }
  void expect_block_end() {
    if (cur().type != Token::Type::kBlockEnd) fail(cur().line, "expected '%}', got " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().type != Token::Type::kName) fail(cur().line, "expected a name, got " + describe(cur()));
    return t_[i_++].text;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::Type::kEof: return "end of template";
      case Token::Type::kVarEnd: return "'}}'";
      case Token::Type::kBlockEnd: return "'%}'";
      case Token::Type::kString: return "a string";
      case Token::Type::kNumber: return "a number";
      default: return "'" + t.text + "'";
    }
  }

  // Statements up to a `{% NAME %}` with NAME in `ends` (not consumed beyond
  // its name; *end gets NAME), or the end of the template when `ends` is empty.
  Body parse_body(const std::vector<std::string>& ends, std::string* end) {
    Depth depth(this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Token::Type::kEof) {
        if (!ends.empty()) fail(t.line, "unexpected end of template, expected '{% " + ends.back() + " %}'");
        return body;
      }
      if (t.type == Token::Type::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = t.text;
        body.push_back(n);
        ++i_;
        continue;
      }
      if (t.type == Token::Type::kVarBegin) {
        ++i_;
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = parse_tuple(true);
        if (cur().type != Token::Type::kVarEnd) fail(cur().line, "expected '}}', got " + describe(cur()));
        ++i_;
        body.push_back(n);
        continue;
      }
      // a block
      ++i_;
      int line = cur().line;
      std::string name = expect_name();
      for (const auto& e : ends) {
        if (name == e) {
          *end = name;
          return body;
        }
      }
      body.push_back(parse_statement(name, line));
    }
  }

  NodeP parse_statement(const std::string& name, int line) {
    auto n = std::make_shared<Node>();
    n->line = line;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      n->conds.push_back(parse_tuple(true));
      expect_block_end();
      for (;;) {
        std::string end;
        n->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
        if (end == "elif") {
          n->conds.push_back(parse_tuple(true));
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          n->bodies.push_back(parse_body({"endif"}, &end));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (name == "for") {
      n->kind = Node::Kind::kFor;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        ++i_;
        if (is_name("in")) break;
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail(cur().line, "expected 'in' in for, got " + describe(cur()));
      ++i_;
      n->expr = parse_tuple(false);
      if (is_name("if")) {
        ++i_;
        n->expr2 = parse_expr(true);
      }
      if (is_name("recursive")) fail(cur().line, "unsupported: recursive for loops");
      expect_block_end();
      std::string end;
      n->bodies.push_back(parse_body({"else", "endfor"}, &end));
      expect_block_end();
      if (end == "else") {
        n->bodies.push_back(parse_body({"endfor"}, &end));
        expect_block_end();
      }
    } else if (name == "set") {
      std::string target = expect_name();
      if (is_op(".")) {
        ++i_;
        auto attr = std::make_shared<Expr>();
        attr->kind = Expr::Kind::kAttr;
        attr->line = line;
        auto obj = std::make_shared<Expr>();
        obj->kind = Expr::Kind::kName;
        obj->line = line;
        obj->name = target;
        attr->args.push_back(obj);
        attr->name = expect_name();
        n->kind = Node::Kind::kSet;
        n->expr2 = attr;
        expect_op("=");
        n->expr = parse_tuple(true);
        expect_block_end();
        return n;
      }
      n->targets.push_back(target);
      while (is_op(",")) {
        ++i_;
        n->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++i_;
        n->kind = Node::Kind::kSet;
        n->expr = parse_tuple(true);
        expect_block_end();
        return n;
      }
      if (n->targets.size() != 1) fail(line, "a block set assigns one name");
      n->kind = Node::Kind::kSetBlock;
      if (is_op("|")) n->filter = parse_filters(nullptr);
      expect_block_end();
      std::string end;
      n->bodies.push_back(parse_body({"endset"}, &end));
      expect_block_end();
    } else if (name == "macro") {
      n->kind = Node::Kind::kMacro;
      n->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        n->params.push_back(expect_name());
        if (is_op("=")) {
          ++i_;
          n->defaults.push_back(parse_expr(true));
        } else {
          n->defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op(")");
      expect_block_end();
      std::string end;
      n->bodies.push_back(parse_body({"endmacro"}, &end));
      if (cur().type == Token::Type::kName) ++i_;  // {% endmacro name %}
      expect_block_end();
    } else if (name == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      n->filter = parse_filters(nullptr, /*first_bar=*/false);
      expect_block_end();
      std::string end;
      n->bodies.push_back(parse_body({"endfilter"}, &end));
      expect_block_end();
    } else if (name == "generation") {
      n->kind = Node::Kind::kBlock;
      expect_block_end();
      std::string end;
      n->bodies.push_back(parse_body({"endgeneration"}, &end));
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
    } else {
      fail(line, "unsupported statement '" + name + "'");
    }
    return n;
  }

  ExprP make(Expr::Kind kind, int line, std::vector<ExprP> args = {}, std::string name = {}) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line;
    e->args = std::move(args);
    e->name = std::move(name);
    return e;
  }

  bool at_tuple_end() const {
    return cur().type == Token::Type::kBlockEnd || cur().type == Token::Type::kVarEnd || is_op(")") ||
           is_name("if") || is_name("recursive") || cur().type == Token::Type::kEof;
  }

  ExprP parse_tuple(bool condexpr) {
    int line = cur().line;
    ExprP first = parse_expr(condexpr);
    if (!is_op(",")) return first;
    std::vector<ExprP> items{first};
    while (is_op(",")) {
      ++i_;
      if (at_tuple_end()) break;
      items.push_back(parse_expr(condexpr));
    }
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kList;
    e->line = line;
    e->tuple = true;
    e->args = std::move(items);
    return e;
  }

  ExprP parse_expr(bool condexpr) {
    Depth depth(this);
    if (!condexpr) return parse_or();
    ExprP e = parse_or();
    Chain chain(this);
    while (is_name("if")) {
      chain.link();
      int line = cur().line;
      ++i_;
      ExprP cond = parse_or();
      ExprP other;
      if (is_name("else")) {
        ++i_;
        other = parse_expr(true);
      }
      e = make(Expr::Kind::kCond, line, {cond, e, other});
    }
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    Chain chain(this);
    while (is_name("or")) {
      chain.link();
      int line = cur().line;
      ++i_;
      e = make(Expr::Kind::kBinary, line, {e, parse_and()}, "or");
    }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    Chain chain(this);
    while (is_name("and")) {
      chain.link();
      int line = cur().line;
      ++i_;
      e = make(Expr::Kind::kBinary, line, {e, parse_not()}, "and");
    }
    return e;
  }
  ExprP parse_not() {
    if (is_name("not")) {
      Depth depth(this);
      int line = cur().line;
      ++i_;
      return make(Expr::Kind::kUnary, line, {parse_not()}, "not");
    }
    return parse_compare();
  }
  ExprP parse_compare() {
    int line = cur().line;
    ExprP e = parse_math1();
    std::vector<ExprP> operands{e};
    std::vector<std::string> ops;
    for (;;) {
      if (cur().type == Token::Type::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        ops.push_back(cur().text);
        ++i_;
      } else if (is_name("in")) {
        ops.push_back("in");
        ++i_;
      } else if (is_name("not") && peek().type == Token::Type::kName && peek().text == "in") {
        ops.push_back("notin");
        i_ += 2;
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return e;
    auto c = std::make_shared<Expr>();
    c->kind = Expr::Kind::kCompare;
    c->line = line;
    c->args = std::move(operands);
    c->ops = std::move(ops);
    return c;
  }
  ExprP parse_binary_level(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == 4) return parse_unary(true);
    ExprP e = parse_binary_level(level + 1);
    Chain chain(this);
    for (;;) {
      if (cur().type != Token::Type::kOp) return e;
      bool match = false;
      for (const auto& op : kLevels[level]) match = match || cur().text == op;
      if (!match) return e;
      chain.link();
      std::string op = cur().text;
      int line = cur().line;
      ++i_;
      e = make(Expr::Kind::kBinary, line, {e, parse_binary_level(level + 1)}, op);
    }
  }
  ExprP parse_math1() { return parse_binary_level(0); }

  ExprP parse_unary(bool with_filter) {
    Depth depth(this);
    int line = cur().line;
    ExprP e;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().text;
      ++i_;
      e = make(Expr::Kind::kUnary, line, {parse_unary(false)}, op);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(e);
    if (with_filter) e = parse_filter_expr(e);
    return e;
  }

  ExprP parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == Token::Type::kName) {
      ++i_;
      if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), line);
      if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), line);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), line);
      return make(Expr::Kind::kName, line, {}, t.text);
    }
    if (t.type == Token::Type::kString) {
      std::string s;
      while (cur().type == Token::Type::kString) s += t_[i_++].text;
      return literal(Value::string(std::move(s)), line);
    }
    if (t.type == Token::Type::kNumber) {
      ++i_;
      return literal(t.number, line);
    }
    if (is_op("(")) {
      ++i_;
      if (is_op(")")) {
        ++i_;
        auto e = std::make_shared<Expr>();
        e->kind = Expr::Kind::kList;
        e->line = line;
        e->tuple = true;
        return e;
      }
      ExprP e = parse_tuple(true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++i_;
      std::vector<ExprP> items;
      while (!is_op("]")) {
        items.push_back(parse_expr(true));
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("]");
      return make(Expr::Kind::kList, line, std::move(items));
    }
    if (is_op("{")) {
      ++i_;
      std::vector<ExprP> items;
      while (!is_op("}")) {
        items.push_back(parse_expr(true));
        expect_op(":");
        items.push_back(parse_expr(true));
        if (!is_op(",")) break;
        ++i_;
      }
      expect_op("}");
      return make(Expr::Kind::kDict, line, std::move(items));
    }
    fail(line, "unexpected " + describe(t));
  }

  ExprP literal(Value v, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kLiteral;
    e->line = line;
    e->literal = std::move(v);
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(cur().line, "unsupported: *args / **kwargs in a call");
      if (cur().type == Token::Type::kName && peek().type == Token::Type::kOp && peek().text == "=") {
        e.kwnames.push_back(cur().text);
        i_ += 2;
        e.kwargs.push_back(parse_expr(true));
      } else {
        if (!e.kwnames.empty()) fail(cur().line, "positional argument after keyword argument");
        e.args.push_back(parse_expr(true));
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprP parse_postfix(ExprP e) {
    Chain chain(this);
    for (;;) {
      if (is_op(".") || is_op("[") || is_op("(")) chain.link();
      int line = cur().line;
      if (is_op(".")) {
        ++i_;
        if (cur().type == Token::Type::kNumber && cur().number.kind == Value::Kind::kInt) {
          e = make(Expr::Kind::kItem, line, {e, literal(t_[i_++].number, line)});
        } else {
          e = make(Expr::Kind::kAttr, line, {e}, expect_name());
        }
      } else if (is_op("[")) {
        ++i_;
        std::vector<ExprP> parts{e};
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (is_op(":")) {
            slice = true;
            parts.push_back(nullptr);
          } else if (is_op("]")) {
            parts.push_back(nullptr);
          } else {
            parts.push_back(parse_expr(true));
          }
          if (is_op(":") && k < 2) {
            slice = true;
            ++i_;
          } else {
            break;
          }
        }
        expect_op("]");
        if (slice) {
          while (parts.size() < 4) parts.push_back(nullptr);
          e = make(Expr::Kind::kSlice, line, std::move(parts));
        } else {
          if (parts[1] == nullptr) fail(line, "empty subscript");
          e = make(Expr::Kind::kItem, line, {e, parts[1]});
        }
      } else if (is_op("(")) {
        auto call = std::make_shared<Expr>();
        call->kind = Expr::Kind::kCall;
        call->line = line;
        call->args.push_back(e);
        parse_call_args(*call);
        e = call;
      } else {
        return e;
      }
    }
  }

  // `| name(args) | ...` applied to `e` (null: the body of a filter block).
  ExprP parse_filters(ExprP e, bool first_bar = true) {
    bool need_bar = first_bar;
    Chain chain(this);
    while (!need_bar || is_op("|")) {
      chain.link();
      if (need_bar) ++i_;
      need_bar = true;
      auto f = std::make_shared<Expr>();
      f->kind = Expr::Kind::kFilter;
      f->line = cur().line;
      f->name = expect_name();
      f->args.push_back(e);
      if (is_op("(")) parse_call_args(*f);
      e = f;
    }
    return e;
  }

  ExprP parse_filter_expr(ExprP e) {
    Chain chain(this);
    for (;;) {
      if (is_op("|")) {
        e = parse_filters(e);
      } else if (is_name("is")) {
        chain.link();
        auto t = std::make_shared<Expr>();
        t->kind = Expr::Kind::kTest;
        t->line = cur().line;
        ++i_;
        if (is_name("not")) {
          t->negated = true;
          ++i_;
        }
        t->name = expect_name();
        t->args.push_back(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == Token::Type::kName || cur().type == Token::Type::kString ||
                    cur().type == Token::Type::kNumber || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail(cur().line, "You cannot chain multiple tests with is");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

NodeP parse_template(std::string_view source, const Options& options) {
  Parser parser(lex(source, options));
  return parser.parse();
}

}  // namespace strata::jinja
