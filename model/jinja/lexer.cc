// Lexer: see lexer.h.
#include "model/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata::jinja {
namespace {


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

}  // namespace

std::vector<Token> lex(std::string_view source, const Options& options) {
  Lexer lexer(source, options);
  return lexer.run();
}

}  // namespace strata::jinja
