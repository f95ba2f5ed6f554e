// Lexer and parser: template text to the statements of ast.h, with jinja2's
// whitespace rules (trim_blocks, lstrip_blocks, `-` and `+` markers) applied
// to the text between tags.
#include <cctype>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/jinja/ast.h"

namespace strata::jinja {
namespace {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kNumber, kOp, kEof };
  Type type = Type::kEof;
  std::string text;  // kText, kName, kOp; kString: the decoded string
  Value number;      // kNumber
  int line = 1;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip_space(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return std::string(s.substr(0, n));
}

class Lexer {
 public:
  Lexer(std::string_view source, const Options& options) : options_(options) {
    src_.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {  // newlines normalised to \n, as jinja2
      if (source[k] == '\r') {
        src_ += '\n';
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
      } else {
        src_ += source[k];
      }
    }
    if (!options_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool first = true;          // no tag before: the text starts a line
    bool strip_next = false;    // `-` on the previous tag's end
    bool trim_next = false;     // trim_blocks after a block or comment
    while (pos_ < src_.size()) {
      size_t p = src_.find('{', pos_);
      while (p != std::string::npos && p + 1 < src_.size() && !std::strchr("{%#", src_[p + 1])) {
        p = src_.find('{', p + 1);
      }
      if (p != std::string::npos && p + 1 >= src_.size()) p = std::string::npos;
      std::string text = src_.substr(pos_, p == std::string::npos ? std::string::npos : p - pos_);
      size_t skipped = 0;  // leading characters removed from text (for line counting)
      if (strip_next) {
        size_t n = 0;
        while (n < text.size() && is_space(text[n])) ++n;
        skipped = n;
      } else if (trim_next && !text.empty() && text[0] == '\n') {
        skipped = 1;
      }
      for (size_t k = 0; k < skipped; ++k) line_ += text[k] == '\n';
      // jinja2: whether the previous tag's match (with the whitespace it
      // consumed) ended with a newline
      bool line_starting = first || (skipped > 0 && text[skipped - 1] == '\n');
      first = false;
      text.erase(0, skipped);
      strip_next = trim_next = false;
      if (p == std::string::npos) {
        emit_text(text);
        break;
      }
      char kind = src_[p + 1];
      char sign = p + 2 < src_.size() ? src_[p + 2] : '\0';
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_space = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) all_space = all_space && is_space(text[k]);
          if (all_space) text.resize(l_pos);
        }
      }
      emit_text(text);
      // count the lines of the whole original segment
      for (size_t k = pos_ + skipped; k < p; ++k) line_ += src_[k] == '\n';
      pos_ = p + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      char end_sign = '\0';
      if (kind == '#') {
        size_t e = src_.find("#}", pos_);
        if (e == std::string::npos) fail(line_, "comment not closed (missing '#}')");
        end_sign = e > pos_ && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : '\0';
        for (size_t k = pos_; k < e; ++k) line_ += src_[k] == '\n';
        pos_ = e + 2;
      } else {
        tokens_.push_back({kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", {}, line_});
        end_sign = lex_tag(kind == '{' ? '}' : '%');
      }
      if (end_sign == '-') {
        strip_next = true;
      } else if (kind != '{' && end_sign != '+' && options_.trim_blocks) {
        trim_next = true;
      }
    }
    tokens_.push_back({Token::Type::kEof, "", {}, line_});
    return std::move(tokens_);
  }

 private:
  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, text, {}, line_});
  }

  // Tokens up to the tag's end (`close` then `}`); returns the sign before it.
  char lex_tag(char close) {
    int braces = 0;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) fail(line_, close == '}' ? "expected '}}'" : "expected '%}'");
      std::string_view rest(src_.data() + pos_, src_.size() - pos_);
      if (braces == 0) {
        for (char sign : {'-', '+', '\0'}) {
          std::string end = sign ? std::string(1, sign) : "";
          end += close;
          end += '}';
          if (rest.substr(0, end.size()) == end && (sign != '+' || close == '%')) {
            pos_ += end.size();
            tokens_.push_back({close == '}' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", {}, line_});
            return sign;
          }
        }
      }
      char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        tokens_.push_back({Token::Type::kName, std::string(rest.substr(0, n)), {}, line_});
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(rest);
      } else if (c == '\'' || c == '"') {
        lex_string(rest);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                     ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        bool found = false;
        for (const char* op : kOps) {
          size_t n = std::strlen(op);
          if (rest.substr(0, n) == op) {
            if (*op == '{') ++braces;
            if (*op == '}') --braces;
            tokens_.push_back({Token::Type::kOp, op, {}, line_});
            pos_ += n;
            found = true;
            break;
          }
        }
        if (!found) fail(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
    }
  }

  void lex_number(std::string_view rest) {
    size_t n = 0;
    std::string digits;
    bool is_float = false;
    while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) {
      if (rest[n] != '_') digits += rest[n];
      ++n;
    }
    if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      is_float = true;
      digits += rest[n++];
      while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) digits += rest[n++];
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
        is_float = true;
        digits += std::string(rest.substr(n, m - n));
        n = m;
        while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) digits += rest[n++];
      }
    }
    Token t{Token::Type::kNumber, digits, {}, line_};
    if (is_float) {
      t.number = Value::real(std::strtod(digits.c_str(), nullptr));
    } else {
      errno = 0;
      long long v = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(line_, "integer literal too large: " + digits);
      t.number = Value::integer(v);
    }
    tokens_.push_back(std::move(t));
    pos_ += n;
  }

  void lex_string(std::string_view rest) {
    char quote = rest[0];
    std::u32string out;
    size_t n = 1;
    int start_line = line_;
    auto hex = [&](size_t count) {
      if (n + count > rest.size()) fail(line_, "truncated escape in string");
      char32_t v = 0;
      for (size_t k = 0; k < count; ++k) {
        char h = rest[n + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail(line_, "bad escape in string");
        v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      n += count;
      return v;
    };
    std::string raw;
    for (;;) {
      if (n >= rest.size()) fail(start_line, "string literal not closed");
      char c = rest[n];
      if (c == quote) {
        ++n;
        break;
      }
      if (c == '\n') ++line_;
      if (c != '\\') {
        raw += c;
        ++n;
        continue;
      }
      out += decode_utf8(raw);
      raw.clear();
      if (n + 1 >= rest.size()) fail(start_line, "string literal not closed");
      char e = rest[n + 1];
      n += 2;
      switch (e) {
        case 'n': out += U'\n'; break;
        case 't': out += U'\t'; break;
        case 'r': out += U'\r'; break;
        case '\\': out += U'\\'; break;
        case '\'': out += U'\''; break;
        case '"': out += U'"'; break;
        case 'a': out += U'\a'; break;
        case 'b': out += U'\b'; break;
        case 'f': out += U'\f'; break;
        case 'v': out += U'\v'; break;
        case '\n': ++line_; break;
        case 'x': out += hex(2); break;
        case 'u': out += hex(4); break;
        case 'U': out += hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int k = 0; k < 2 && n < rest.size() && rest[n] >= '0' && rest[n] <= '7'; ++k) v = v * 8 + (rest[n++] - '0');
            out += v;
          } else {
            out += U'\\';
            out += static_cast<char32_t>(static_cast<unsigned char>(e));
          }
      }
    }
    out += decode_utf8(raw);
    tokens_.push_back({Token::Type::kString, encode_utf8(out), {}, start_line});
    pos_ += n;
  }

  Options options_;
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

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
    while (is_name("if")) {
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
    while (is_name("or")) {
      int line = cur().line;
      ++i_;
      e = make(Expr::Kind::kBinary, line, {e, parse_and()}, "or");
    }
    return e;
  }
  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
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
    for (;;) {
      if (cur().type != Token::Type::kOp) return e;
      bool match = false;
      for (const auto& op : kLevels[level]) match = match || cur().text == op;
      if (!match) return e;
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
    for (;;) {
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
    while (!need_bar || is_op("|")) {
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
    for (;;) {
      if (is_op("|")) {
        e = parse_filters(e);
      } else if (is_name("is")) {
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
  Lexer lexer(source, options);
  Parser parser(lexer.run());
  return parser.parse();
}

}  // namespace strata::jinja
