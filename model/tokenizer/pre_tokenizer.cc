#include "model/tokenizer/pre_tokenizer.h"

#include <array>
#include <utility>

#include "model/tokenizer/text_util.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

// Patterns llama.cpp uses (src/llama-vocab.cpp). Two of them are never run
// as regexes: kGpt2 and kLlama3 name the hand-written splitters below.
constexpr std::string_view kGpt2 = "<gpt2>";
constexpr std::string_view kLlama3 = "<llama3>";
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF"
    "\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F"
    "\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481"
    "\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD"
    "\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A"
    "\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
    "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4"
    "\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4"
    "\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126"
    "\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E"
    "\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
    "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";
constexpr std::string_view kDeepseekLlmPunct =
    "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
constexpr std::string_view kDeepseekCjk =
    "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
constexpr std::string_view kDeepseekV3Cjk =
    "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
constexpr std::string_view kDeepseekV3 =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
    "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
    "\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kBloom =
    " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";
constexpr std::string_view kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
    "\\s+";
constexpr std::string_view kSeedCoder =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kBailing =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?"
    "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|"
    "\\s+";

struct Spec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> steps;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<Spec>& specs() {
  static const auto* table = new std::vector<Spec>{
      {{"default", ""},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"},
       {kLlama3},
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+$", kDeepseekCjk,
        "\\p{N}+"}},
      {{"deepseek-v3"}, {"\\p{N}{1,3}", kDeepseekV3Cjk, kDeepseekV3}},
      {{"deepseek-coder"},
       {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"}},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
        "minerva-7b"},
       {"\\p{N}", kGpt2}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
        "mpt", "olmo", "jais", "trillion"},
       {kGpt2}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan",
        "grok-2"},
       {kQwen2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, "\\p{N}"}},
      {{"tekken"}, {kTekken}, /*ignore_merges=*/true, /*add_bos=*/true},
      {{"gpt-4o", "llama4"}, {kGpt4o}},
      {{"seed-coder"}, {kSeedCoder}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailing}},
  };
  return *table;
}

constexpr uint32_t kOutside = 0xFFFFFFFF;

// The codepoints of one piece [begin, end) as the hand-written splitters see
// them: a position past the piece has no flags at all.
class Piece {
 public:
  Piece(std::span<const uint32_t> cps, size_t begin, size_t end)
      : cps_(cps), begin_(begin), end_(end) {}

  bool inside(size_t p) const { return p >= begin_ && p < end_; }
  uint32_t cp(size_t p) const { return inside(p) ? cps_[p] : kOutside; }
  bool letter(size_t p) const { return inside(p) && flags(p).is_letter(); }
  bool number(size_t p) const { return inside(p) && flags(p).is_number(); }
  bool space(size_t p) const { return inside(p) && flags(p).whitespace; }
  // Inside, and neither whitespace, letter nor number.
  bool other(size_t p) const {
    if (!inside(p)) return false;
    const unicode::CodepointFlags f = flags(p);
    return !f.whitespace && !f.is_letter() && !f.is_number();
  }
  bool newline(size_t p) const {
    const uint32_t c = cp(p);
    return c == '\r' || c == '\n';
  }
  size_t end() const { return end_; }

 private:
  unicode::CodepointFlags flags(size_t p) const {
    return unicode::codepoint_flags(cps_[p]);
  }

  std::span<const uint32_t> cps_;
  size_t begin_, end_;
};

// Length of the English contraction at `pos` ('s 't 'm 'd 're 've 'll), or
// 0. `fold` lowercases the letters first (the Llama-3 pattern's (?i:...)).
size_t contraction_at(const Piece& p, size_t pos, bool fold) {
  if (p.cp(pos) != '\'' || !p.inside(pos + 1)) return 0;
  auto lower = [&](uint32_t c) { return fold ? unicode::to_lower(c) : c; };
  const uint32_t c1 = lower(p.cp(pos + 1));
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (!p.inside(pos + 2)) return 0;
  const uint32_t c2 = lower(p.cp(pos + 2));
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') ||
      (c1 == 'l' && c2 == 'l')) {
    return 3;
  }
  return 0;
}

// Emits piece lengths as a splitter advances.
class Emitter {
 public:
  Emitter(size_t begin, std::vector<size_t>* out) : last_(begin), out_(out) {}
  void cut(size_t to) {
    if (to > last_) out_->push_back(to - last_);
    last_ = to;
  }

 private:
  size_t last_;
  std::vector<size_t>* out_;
};

// Hand-written GPT-2 splitter, as llama.cpp's
// unicode_regex_split_custom_gpt2 behaves.
void split_gpt2(std::span<const uint32_t> cps, size_t begin, size_t end,
                std::vector<size_t>* out) {
  const Piece p(cps, begin, end);
  Emitter emit(begin, out);
  size_t pos = begin;
  while (pos < end) {
    if (const size_t n = contraction_at(p, pos, /*fold=*/false); n > 0) {
      pos += n;
      emit.cut(pos);
      continue;
    }
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
    const size_t head = pos + (p.cp(pos) == ' ' ? 1 : 0);
    if (p.letter(head) || p.number(head) || p.other(head)) {
      auto same = [&](size_t q) {
        return p.letter(head)   ? p.letter(q)
               : p.number(head) ? p.number(q)
                                : p.other(q);
      };
      pos = head;
      while (same(pos)) ++pos;
      emit.cut(pos);
      continue;
    }
    size_t n_space = 0;
    while (p.space(pos + n_space)) ++n_space;
    if (n_space > 1 && p.inside(pos + n_space)) {  // \s+(?!\S)
      pos += n_space - 1;
    } else if (n_space > 0) {  // \s+
      pos += n_space;
    } else {
      ++pos;
    }
    emit.cut(pos);
  }
}

// Hand-written Llama-3 splitter, as llama.cpp's
// unicode_regex_split_custom_llama3 behaves.
void split_llama3(std::span<const uint32_t> cps, size_t begin, size_t end,
                  std::vector<size_t>* out) {
  const Piece p(cps, begin, end);
  Emitter emit(begin, out);
  size_t pos = begin;
  while (pos < end) {
    if (const size_t n = contraction_at(p, pos, /*fold=*/true); n > 0) {
      pos += n;
      emit.cut(pos);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!p.newline(pos) && !p.number(pos) &&
        (p.letter(pos) || p.letter(pos + 1))) {
      ++pos;
      while (p.letter(pos)) ++pos;
      emit.cut(pos);
      continue;
    }
    // \p{N}{1,3}
    if (p.number(pos)) {
      size_t run = 0;
      while (p.number(pos)) {
        ++pos;
        if (++run == 3) {
          emit.cut(pos);
          run = 0;
        }
      }
      emit.cut(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*". llama.cpp tests the codepoint after a
    // leading space but accepts it even past the end of the piece, so a
    // final lone space is cut here (the same cut \s+ would make).
    const bool lead_space = p.cp(pos) == ' ';
    const size_t head = pos + (lead_space ? 1 : 0);
    if (p.other(head) || (lead_space && !p.inside(head))) {
      pos = head;
      while (p.other(pos)) ++pos;
      while (p.newline(pos)) ++pos;
      emit.cut(pos);
      continue;
    }
    size_t n_space = 0;
    size_t after_newline = 0;  // just past the last \r or \n of the run
    while (p.space(pos + n_space)) {
      if (p.newline(pos + n_space)) after_newline = pos + n_space + 1;
      ++n_space;
    }
    if (after_newline > 0) {  // \s*[\r\n]+
      pos = after_newline;
    } else if (n_space > 1 && p.inside(pos + n_space)) {  // \s+(?!\S)
      pos += n_space - 1;
    } else if (n_space > 0) {  // \s+
      pos += n_space;
    } else {
      ++pos;
    }
    emit.cut(pos);
  }
}

}  // namespace

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::known_names() {
  std::vector<std::string_view> names;
  for (const Spec& spec : specs()) {
    for (std::string_view name : spec.names) {
      if (!name.empty()) names.push_back(name);
    }
  }
  return names;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::create(
    std::string_view name) {
  const Spec* found = nullptr;
  for (const Spec& spec : specs()) {
    for (std::string_view n : spec.names) {
      if (n == name) found = &spec;
    }
  }
  if (found == nullptr) {
    std::string known;
    for (std::string_view n : known_names()) {
      known += known.empty() ? "" : ", ";
      known += n;
    }
    return absl::UnimplementedError(
        cat("tokenizer.ggml.pre: unknown pre-tokenizer '", name,
            "'; known: ", known));
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->name_ = name.empty() ? "default" : std::string(name);
  pre->ignore_merges_ = found->ignore_merges;
  pre->add_bos_ = found->add_bos;
  for (std::string_view step : found->steps) {
    if (step == kGpt2) {
      pre->steps_.push_back({StepKind::kGpt2, nullptr});
    } else if (step == kLlama3) {
      pre->steps_.push_back({StepKind::kLlama3, nullptr});
    } else {
      absl::StatusOr<std::unique_ptr<RegexSplit>> regex =
          RegexSplit::compile(step);
      if (!regex.ok()) return regex.status();
      if ((*regex)->uses_collapsed_text()) {
        pre->needs_collapsed_ = true;
      } else {
        pre->needs_folded_ = true;
      }
      pre->steps_.push_back({StepKind::kRegex, *std::move(regex)});
    }
  }
  return pre;
}

absl::StatusOr<std::vector<size_t>> PreTokenizer::split_codepoints(
    std::span<const uint32_t> cps) const {
  std::vector<uint32_t> collapsed, folded;
  if (needs_collapsed_) collapsed = collapse_codepoints(cps);
  if (needs_folded_) folded = fold_whitespace(cps);
  std::vector<size_t> pieces = {cps.size()};
  for (const Step& step : steps_) {
    std::vector<size_t> next;
    next.reserve(pieces.size() * 2);
    if (step.kind == StepKind::kRegex) {
      absl::StatusOr<std::vector<size_t>> cut = step.regex->split(
          step.regex->uses_collapsed_text() ? collapsed : folded, pieces);
      if (!cut.ok()) return cut.status();
      next = *std::move(cut);
    } else {
      size_t begin = 0;
      for (size_t len : pieces) {
        if (step.kind == StepKind::kGpt2) {
          split_gpt2(cps, begin, begin + len, &next);
        } else {
          split_llama3(cps, begin, begin + len, &next);
        }
        begin += len;
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

absl::StatusOr<std::vector<std::string>> PreTokenizer::split_words(
    std::string_view text) const {
  const std::vector<uint32_t> cps = unicode::decode_lenient(text);
  absl::StatusOr<std::vector<size_t>> pieces = split_codepoints(cps);
  if (!pieces.ok()) return pieces.status();
  std::vector<std::string> words;
  words.reserve(pieces->size());
  std::string utf8;
  size_t begin = 0;
  for (size_t len : *pieces) {
    if (len == 0) continue;
    utf8.clear();
    for (size_t i = begin; i < begin + len; ++i) {
      unicode::append_utf8(cps[i], &utf8);
    }
    std::string word;
    word.reserve(utf8.size() * 2);
    for (char c : utf8) {
      word.append(unicode::byte_to_unicode(static_cast<uint8_t>(c)));
    }
    words.push_back(std::move(word));
    begin += len;
  }
  return words;
}

}  // namespace strata::tokenizer
