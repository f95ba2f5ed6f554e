// Python's str operations over UTF-8 text (python_str.h).
#include "model/jinja/python_str.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "model/jinja/jinja.h"

namespace strata::jinja {

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

namespace {

std::string ascii_map(const std::string& s, int (*f)(int)) {
  std::string r = s;
  for (char& c : r) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  }
  return r;
}
}  // namespace

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

}  // namespace strata::jinja
