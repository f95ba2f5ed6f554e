// The GBNF parser: a recursive descent over the text that builds rules of
// symbolic elements, then resolves names, desugars repetition into helper
// rules (x* -> R ::= x R | "", x{m,n} -> m copies then a chain of n - m
// optional ones) and checks left recursion. Every error carries the line
// and column of the offending byte.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar.h"

namespace strata::grammar {
namespace {

constexpr int kMaxRepeat = 1000;
constexpr int kMaxDepth = 128;          // nested parentheses
constexpr size_t kMaxElements = 1 << 22;  // after desugaring
// Repetitions are desugared into copies and helper rules as they are
// parsed: their total is bounded then (a{0,1000} 6500 times, 65 KB of
// text, made 6.5 million rules, ~3 GB, before the element count refused
// the grammar).
constexpr size_t kMaxRepeatElements = 1 << 20;  // copies and helper references
constexpr size_t kMaxRules = 1 << 17;           // rules, helpers included

// A symbolic element before names are resolved.
struct Sym {
  Grammar::Kind kind = Grammar::Kind::kChars;
  bool negated = false;
  std::vector<Grammar::Range> ranges;  // kChars
  std::string name;                    // kRule (user rule or helper)
  size_t offset = 0;                   // in the text, for errors
};
using Seq = std::vector<Sym>;
struct Rule {
  std::string name;
  std::vector<Seq> alts;
  size_t offset = 0;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-';
}

}  // namespace

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}
  absl::StatusOr<std::shared_ptr<const Grammar>> parse();

 private:
  absl::Status error_at(size_t offset, absl::string_view what) const;
  void skip_space();
  bool at_rule_start() const;  // name ::= ahead
  absl::StatusOr<std::string> parse_name();
  absl::Status parse_alternates(std::vector<Seq>* alts, int depth,
                                const std::string& owner);
  absl::Status parse_sequence(Seq* seq, int depth, const std::string& owner);
  absl::StatusOr<uint32_t> parse_char(bool in_class);  // one (escaped) char
  std::string helper(const std::string& owner, std::vector<Seq> alts,
                     size_t offset);
  absl::Status repeat(Seq* seq, size_t from, int min, int max,
                      const std::string& owner, size_t offset);

  std::string_view text_;
  size_t pos_ = 0;
  std::vector<Rule> rules_;
  std::map<std::string, size_t> helpers_by_owner_;
  size_t repeat_elements_ = 0;  // made by repeat(), in all
};

absl::Status GbnfParser::error_at(size_t offset, absl::string_view what) const {
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "line ", line, " col ", offset - line_start + 1, ": ", what));
}

void GbnfParser::skip_space() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '#') {
      while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

bool GbnfParser::at_rule_start() const {
  size_t p = pos_;
  if (p >= text_.size() || !is_name_char(text_[p])) return false;
  while (p < text_.size() && is_name_char(text_[p])) ++p;
  while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
  return text_.substr(p, 3) == "::=";
}

absl::StatusOr<std::string> GbnfParser::parse_name() {
  const size_t start = pos_;
  while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
  if (pos_ == start) return error_at(start, "expected a rule name");
  return std::string(text_.substr(start, pos_ - start));
}

absl::StatusOr<uint32_t> GbnfParser::parse_char(bool in_class) {
  const size_t start = pos_;
  if (pos_ >= text_.size()) return error_at(start, "unexpected end of text");
  const auto c = static_cast<unsigned char>(text_[pos_]);
  if (c == '\\') {
    if (pos_ + 1 >= text_.size()) return error_at(start, "unterminated escape");
    const char e = text_[pos_ + 1];
    pos_ += 2;
    int digits = 0;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^':
      case '/':
        return static_cast<uint32_t>(e);
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default:
        return error_at(start, absl::StrCat("unknown escape \\", std::string(1, e)));
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size()) return error_at(pos_, "expected a hex digit");
      const char h = text_[pos_];
      uint32_t d;
      if (h >= '0' && h <= '9') d = h - '0';
      else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      else return error_at(pos_, "expected a hex digit");
      v = v * 16 + d;
      ++pos_;
    }
    if (v > 0x10FFFF) return error_at(start, "code point beyond U+10FFFF");
    // A surrogate has no UTF-8 form: no output could ever match it.
    if (v >= 0xD800 && v <= 0xDFFF) {
      return error_at(start, "a surrogate code point (U+D800..U+DFFF) has no UTF-8 form");
    }
    return v;
  }
  (void)in_class;
  // UTF-8.
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0) return error_at(start, "invalid UTF-8");
  uint32_t v = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
  ++pos_;
  for (int i = 0; i < n; ++i) {
    if (pos_ >= text_.size() ||
        (static_cast<unsigned char>(text_[pos_]) & 0xC0) != 0x80) {
      return error_at(start, "invalid UTF-8");
    }
    v = (v << 6) | (static_cast<unsigned char>(text_[pos_]) & 0x3F);
    ++pos_;
  }
  return v;
}

std::string GbnfParser::helper(const std::string& owner, std::vector<Seq> alts,
                               size_t offset) {
  std::string name = absl::StrCat(owner, "_", helpers_by_owner_[owner]++);
  rules_.push_back(Rule{name, std::move(alts), offset});
  return name;
}

// Replaces the elements of `seq` from `from` on (x: one element, or a group
// of them) with x{min,max} (max -1: no bound).
absl::Status GbnfParser::repeat(Seq* seq, size_t from, int min, int max,
                                const std::string& owner, size_t offset) {
  if (from == seq->size()) return absl::OkStatus();  // ""*: nothing
  // What this repetition makes: min copies, and a helper rule (two
  // elements) for each optional one or for the unbounded tail.
  const size_t helpers = max < 0 ? 1 : static_cast<size_t>(max - min);
  repeat_elements_ += static_cast<size_t>(min) + 2 * helpers;
  if (repeat_elements_ > kMaxRepeatElements || rules_.size() + helpers + 1 > kMaxRules) {
    return error_at(offset, absl::StrCat("grammar too large: its repetitions make more than ",
                                         repeat_elements_ > kMaxRepeatElements
                                             ? absl::StrCat(kMaxRepeatElements, " elements")
                                             : absl::StrCat(kMaxRules, " rules")));
  }
  Sym x;
  if (seq->size() - from == 1) {
    x = seq->back();
  } else {
    x.kind = Grammar::Kind::kRule;
    x.offset = offset;
    x.name = helper(owner, {Seq(seq->begin() + from, seq->end())}, offset);
  }
  seq->resize(from);
  for (int i = 0; i < min; ++i) seq->push_back(x);
  if (max < 0) {
    // R ::= x R | ""
    Sym self;
    self.kind = Grammar::Kind::kRule;
    self.offset = offset;
    std::string name = absl::StrCat(owner, "_", helpers_by_owner_[owner]++);
    self.name = name;
    rules_.push_back(Rule{name, {Seq{x, self}, Seq{}}, offset});
    seq->push_back(self);
  } else if (max > min) {
    // opt_1 ::= x | "" ; opt_k ::= x opt_(k-1) | ""
    std::string prev;
    for (int k = 1; k <= max - min; ++k) {
      Seq first{x};
      if (!prev.empty()) {
        Sym r;
        r.kind = Grammar::Kind::kRule;
        r.name = prev;
        r.offset = offset;
        first.push_back(r);
      }
      prev = helper(owner, {first, Seq{}}, offset);
    }
    Sym r;
    r.kind = Grammar::Kind::kRule;
    r.name = prev;
    r.offset = offset;
    seq->push_back(r);
  }
  if (seq->size() > kMaxElements) return error_at(offset, "repetition too large");
  return absl::OkStatus();
}

absl::Status GbnfParser::parse_sequence(Seq* seq, int depth,
                                        const std::string& owner) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t last = kNone;  // where the last primary's elements start
  for (;;) {
    skip_space();
    if (pos_ >= text_.size()) return absl::OkStatus();
    const char c = text_[pos_];
    const size_t start = pos_;
    if (c == '|' || c == ')') return absl::OkStatus();
    if (depth == 0 && at_rule_start()) return absl::OkStatus();
    const bool postfix = c == '*' || c == '+' || c == '?' || c == '{';
    if (!postfix) last = seq->size();
    if (c == '"') {
      ++pos_;
      Seq lit;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\n') return error_at(pos_, "newline in a literal");
        absl::StatusOr<uint32_t> cp = parse_char(false);
        if (!cp.ok()) return cp.status();
        Sym s;
        s.ranges.push_back({*cp, *cp});
        s.offset = start;
        lit.push_back(std::move(s));
      }
      if (pos_ >= text_.size()) return error_at(start, "unterminated literal");
      ++pos_;
      // Inline; a postfix applies to the whole literal (repeat()).
      for (Sym& s : lit) seq->push_back(std::move(s));
    } else if (c == '[') {
      ++pos_;
      Sym s;
      s.offset = start;
      if (pos_ < text_.size() && text_[pos_] == '^') {
        s.negated = true;
        ++pos_;
      }
      while (pos_ < text_.size() && text_[pos_] != ']') {
        absl::StatusOr<uint32_t> lo = parse_char(true);
        if (!lo.ok()) return lo.status();
        uint32_t hi = *lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          const size_t at = pos_;
          absl::StatusOr<uint32_t> h = parse_char(true);
          if (!h.ok()) return h.status();
          hi = *h;
          if (hi < *lo) return error_at(at, "range end before its start");
        }
        s.ranges.push_back({*lo, hi});
      }
      if (pos_ >= text_.size()) return error_at(start, "unterminated character class");
      ++pos_;
      seq->push_back(std::move(s));
    } else if (c == '.') {
      ++pos_;
      Sym s;
      s.negated = true;  // not in the empty set: any character
      s.offset = start;
      seq->push_back(std::move(s));
    } else if (c == '(') {
      if (depth + 1 > kMaxDepth) return error_at(start, "parentheses nested too deep");
      ++pos_;
      std::vector<Seq> alts;
      if (absl::Status st = parse_alternates(&alts, depth + 1, owner); !st.ok()) return st;
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        return error_at(pos_ >= text_.size() ? start : pos_, "expected ')'");
      }
      ++pos_;
      Sym r;
      r.kind = Grammar::Kind::kRule;
      r.offset = start;
      r.name = helper(owner, std::move(alts), start);
      seq->push_back(std::move(r));
    } else if (is_name_char(c)) {
      absl::StatusOr<std::string> name = parse_name();
      if (!name.ok()) return name.status();
      Sym r;
      r.kind = Grammar::Kind::kRule;
      r.name = *std::move(name);
      r.offset = start;
      seq->push_back(std::move(r));
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (last == kNone) {
        return error_at(start, absl::StrCat("'", std::string(1, c), "' follows nothing"));
      }
      ++pos_;
      int min = 0, max = -1;
      if (c == '+') min = 1;
      if (c == '?') max = 1;
      if (c == '{') {
        auto number = [&](int* out) -> absl::Status {
          skip_space();
          const size_t at = pos_;
          int64_t v = 0;
          while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            v = v * 10 + (text_[pos_] - '0');
            if (v > kMaxRepeat) {
              return error_at(at, absl::StrCat("repetition count above ", kMaxRepeat));
            }
            ++pos_;
          }
          if (pos_ == at) return error_at(at, "expected a number");
          *out = static_cast<int>(v);
          skip_space();
          return absl::OkStatus();
        };
        if (absl::Status st = number(&min); !st.ok()) return st;
        if (pos_ < text_.size() && text_[pos_] == '}') {
          max = min;
        } else if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          skip_space();
          if (pos_ < text_.size() && text_[pos_] != '}') {
            if (absl::Status st = number(&max); !st.ok()) return st;
            if (max < min) return error_at(start, absl::StrCat("{", min, ",", max, "}: max below min"));
          }
        }
        if (pos_ >= text_.size() || text_[pos_] != '}') return error_at(pos_ < text_.size() ? pos_ : start, "expected '}'");
        ++pos_;
      }
      if (absl::Status st = repeat(seq, last, min, max, owner, start); !st.ok()) return st;
      last = kNone;
    } else {
      return error_at(start, absl::StrCat("unexpected '", std::string(1, c), "'"));
    }
  }
}

absl::Status GbnfParser::parse_alternates(std::vector<Seq>* alts, int depth,
                                          const std::string& owner) {
  for (;;) {
    Seq seq;
    if (absl::Status st = parse_sequence(&seq, depth, owner); !st.ok()) return st;
    alts->push_back(std::move(seq));
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '|') {
      ++pos_;
      continue;
    }
    return absl::OkStatus();
  }
}

absl::StatusOr<std::shared_ptr<const Grammar>> GbnfParser::parse() {
  std::map<std::string, size_t> defined;  // user rule -> offset
  for (;;) {
    skip_space();
    if (pos_ >= text_.size()) break;
    const size_t start = pos_;
    absl::StatusOr<std::string> name = parse_name();
    if (!name.ok()) return name.status();
    skip_space();
    if (text_.substr(pos_, 3) != "::=") return error_at(pos_, "expected '::='");
    pos_ += 3;
    if (defined.count(*name)) {
      return error_at(start, absl::StrCat("rule '", *name, "' is defined twice"));
    }
    defined[*name] = start;
    std::vector<Seq> alts;
    if (absl::Status st = parse_alternates(&alts, 0, *name); !st.ok()) return st;
    skip_space();
    if (pos_ < text_.size() && !at_rule_start()) {
      return error_at(pos_, absl::StrCat("unexpected '", std::string(1, text_[pos_]), "'"));
    }
    rules_.push_back(Rule{*name, std::move(alts), start});
  }
  if (!defined.count("root")) {
    return error_at(text_.size(), "no rule named 'root'");
  }
  // Resolve names. Helper names may collide with user rules ("a_0"): a
  // collision is an error rather than a silent merge.
  auto g = std::make_shared<Grammar>();
  std::map<std::string, uint32_t> index;
  for (const Rule& r : rules_) {
    if (!index.emplace(r.name, static_cast<uint32_t>(index.size())).second) {
      return error_at(r.offset, absl::StrCat("rule name '", r.name,
                                             "' collides with a generated rule; rename it"));
    }
    g->names_.push_back(r.name);
  }
  g->alts_.resize(rules_.size());
  for (size_t i = 0; i < rules_.size(); ++i) {
    for (const Seq& seq : rules_[i].alts) {
      g->alts_[i].push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Sym& s : seq) {
        Grammar::Element e;
        e.kind = s.kind;
        if (s.kind == Grammar::Kind::kRule) {
          auto it = index.find(s.name);
          if (it == index.end()) {
            return error_at(s.offset, absl::StrCat("undefined rule '", s.name, "'"));
          }
          e.rule = it->second;
        } else {
          // Sorted and merged (disjoint, never adjacent): matches() and
          // matches_any() search them in O(log n). A class is as long as
          // the request allows: scanning 18000 ranges for each of 2000
          // stacks (quadratically inside a character, negated) took a
          // 63 KB grammar's mask 113 s.
          std::vector<Grammar::Range> ranges = s.ranges;
          std::sort(ranges.begin(), ranges.end(),
                    [](const Grammar::Range& a, const Grammar::Range& b) { return a.lo < b.lo; });
          e.negated = s.negated;
          e.first = static_cast<uint32_t>(g->ranges_.size());
          for (const Grammar::Range& r : ranges) {
            if (g->ranges_.size() > e.first && r.lo <= g->ranges_.back().hi + 1) {
              g->ranges_.back().hi = std::max(g->ranges_.back().hi, r.hi);
            } else {
              g->ranges_.push_back(r);
            }
          }
          e.count = static_cast<uint32_t>(g->ranges_.size() - e.first);
        }
        g->elements_.push_back(e);
      }
      g->elements_.push_back(Grammar::Element{});  // kEnd
      if (g->elements_.size() > kMaxElements) {
        return error_at(rules_[i].offset, "grammar too large");
      }
    }
  }
  g->root_ = index.at("root");

  // Left recursion: a rule that can reach itself through references that
  // come after only nullable elements. Reaching it in tail position
  // (a ::= b; b ::= a "x" | ...) with the same continuation is harmless
  // (the matcher's expansion guard), so only a cycle through a non-tail
  // reference is refused.
  const size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (uint32_t p : g->alts_[r]) {
        bool all = true;
        for (; g->elements_[p].kind != Grammar::Kind::kEnd; ++p) {
          const auto& e = g->elements_[p];
          if (e.kind == Grammar::Kind::kChars || !nullable[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  struct Edge {
    uint32_t to;
    bool tail;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    for (uint32_t p : g->alts_[r]) {
      for (; g->elements_[p].kind == Grammar::Kind::kRule; ++p) {
        const auto& e = g->elements_[p];
        edges[r].push_back({e.rule, g->elements_[p + 1].kind == Grammar::Kind::kEnd});
        if (!nullable[e.rule]) break;
      }
    }
  }
  // r -> to (not in tail position) closes a cycle when `to` can reach r,
  // i.e. when both are in one strongly connected component: Tarjan's
  // algorithm, iterative, O(rules + edges). (A search from every edge's
  // end was O(edges x rules): seconds for a 9 KB grammar of repetitions.)
  constexpr uint32_t kUnvisited = ~uint32_t{0};
  std::vector<uint32_t> order(n, kUnvisited), low(n, 0), component(n, kUnvisited);
  std::vector<uint32_t> stack;
  std::vector<bool> on_stack(n, false);
  struct Frame {
    uint32_t rule;
    size_t next;  // its next edge to follow
  };
  std::vector<Frame> calls;
  uint32_t visited = 0, components = 0;
  for (uint32_t start = 0; start < n; ++start) {
    if (order[start] != kUnvisited) continue;
    calls.push_back({start, 0});
    order[start] = low[start] = visited++;
    stack.push_back(start);
    on_stack[start] = true;
    while (!calls.empty()) {
      Frame& f = calls.back();
      const uint32_t u = f.rule;
      if (f.next < edges[u].size()) {
        const uint32_t v = edges[u][f.next++].to;
        if (order[v] == kUnvisited) {
          order[v] = low[v] = visited++;
          stack.push_back(v);
          on_stack[v] = true;
          calls.push_back({v, 0});  // f is not used after this
        } else if (on_stack[v]) {
          low[u] = std::min(low[u], order[v]);
        }
        continue;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().rule] = std::min(low[calls.back().rule], low[u]);
      if (low[u] == order[u]) {
        for (uint32_t w = kUnvisited; w != u;) {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = components;
        }
        ++components;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (!e.tail && component[e.to] == component[r]) {
        // Name the user rule the cycle belongs to (helpers carry it).
        return error_at(rules_[r].offset,
                        absl::StrCat("rule '", rules_[r].name,
                                     "' is left-recursive (it can reach itself "
                                     "before consuming input)"));
      }
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

absl::StatusOr<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text) {
  GbnfParser parser(text);
  return parser.parse();
}

namespace {
// The first of a class's ranges (sorted, merged) that ends at or after
// `cp`; `end` if none does.
const Grammar::Range* first_ending_at_or_after(const Grammar::Range* begin,
                                               const Grammar::Range* end, uint32_t cp) {
  return std::lower_bound(begin, end, cp,
                          [](const Grammar::Range& r, uint32_t c) { return r.hi < c; });
}
}  // namespace

bool Grammar::matches(uint32_t pos, uint32_t cp) const {
  const Element& e = elements_[pos];
  const Range* end = ranges_.data() + e.first + e.count;
  const Range* r = first_ending_at_or_after(ranges_.data() + e.first, end, cp);
  const bool in = r != end && r->lo <= cp;
  return in != e.negated;
}

bool Grammar::matches_any(uint32_t pos, uint32_t lo, uint32_t hi) const {
  const Element& e = elements_[pos];
  const Range* end = ranges_.data() + e.first + e.count;
  const Range* r = first_ending_at_or_after(ranges_.data() + e.first, end, lo);
  if (!e.negated) return r != end && r->lo <= hi;
  // Negated: some code point of [lo, hi] lies outside every range. The
  // ranges are merged (never adjacent), so one that covers lo but ends
  // before hi leaves the code point after it uncovered.
  return r == end || r->lo > lo || r->hi < hi;
}

}  // namespace strata::grammar
