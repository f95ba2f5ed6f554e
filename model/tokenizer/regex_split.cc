#include "model/tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <array>
#include <utility>

#include "model/tokenizer/text_util.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

using unicode::Category;

// Collapsed codes (llama.cpp unicode_regex_split, k_ucat_cpt).
constexpr uint32_t kCodeOther = 0xD0;
constexpr uint32_t kCodeNumber = 0xD1;
constexpr uint32_t kCodeLetter = 0xD2;
constexpr uint32_t kCodePunctuation = 0xD3;
constexpr uint32_t kCodeMark = 0xD4;
constexpr uint32_t kCodeSymbol = 0xD5;
constexpr uint32_t kFoldedWhitespace = 0x0B;

struct CategoryName {
  std::string_view name;  // as written in a pattern
  uint32_t code;
  std::string_view ascii;  // the ASCII members, as class text
};

// The ASCII members of each class are those of llama.cpp's k_ucat_map (note:
// its symbol class leaves out '~').
constexpr std::array<CategoryName, 10> kCategories = {{
    {"\\p{N}", kCodeNumber, "0-9"},
    {"\\p{L}", kCodeLetter, "A-Za-z"},
    {"\\p{P}", kCodePunctuation, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", kCodeMark, ""},
    {"\\p{S}", kCodeSymbol, "\\$\\+<->^`\\|"},
    {"\\p{Lu}", kCodeLetter, "A-Za-z"},
    {"\\p{Ll}", kCodeLetter, "A-Za-z"},
    {"\\p{Lt}", kCodeLetter, "A-Za-z"},
    {"\\p{Lm}", kCodeLetter, "A-Za-z"},
    {"\\p{Lo}", kCodeLetter, "A-Za-z"},
}};

bool names_a_category(std::string_view pattern) {
  for (const CategoryName& c : kCategories) {
    if (pattern.find(c.name) != std::string_view::npos) return true;
  }
  return false;
}

// Rewrites a category pattern for the collapsed text; the result is one
// unit per pattern byte (codes above 0x7F included).
absl::StatusOr<std::vector<uint32_t>> collapse_pattern(
    std::string_view pattern) {
  for (char c : pattern) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return absl::InvalidArgumentError(
          cat("pre-tokenizer pattern '", pattern,
              "' mixes Unicode categories with non-ASCII text"));
    }
  }
  std::vector<uint32_t> out;
  auto add_text = [&out](std::string_view s) {
    for (char c : s) out.push_back(static_cast<unsigned char>(c));
  };
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const bool escaped = i > 0 && pattern[i - 1] == '\\';
    if (c == '[' && !escaped) {
      in_class = true;
      out.push_back('[');
      continue;
    }
    if (c == ']' && in_class && !escaped) {
      in_class = false;
      out.push_back(']');
      continue;
    }
    if (c == '\\' && pattern.substr(i + 1, 2) == "p{") {
      const size_t close = pattern.find('}', i + 3);
      if (close != std::string_view::npos && close <= i + 10) {
        const std::string_view name = pattern.substr(i, close - i + 1);
        bool found = false;
        for (const CategoryName& cat : kCategories) {
          if (cat.name != name) continue;
          if (!in_class) out.push_back('[');
          out.push_back(cat.code);
          add_text(cat.ascii);
          if (!in_class) out.push_back(']');
          found = true;
          break;
        }
        if (found) {
          i = close;
          continue;
        }
      }
    }
    out.push_back(static_cast<unsigned char>(c));
  }
  return out;
}

std::vector<uint32_t> wide_pattern(std::string_view pattern) {
  return unicode::decode_lenient(pattern);
}

}  // namespace

std::vector<uint32_t> collapse_codepoints(std::span<const uint32_t> cps) {
  std::vector<uint32_t> out(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    if (cp < 0x80) {
      out[i] = cp;
      continue;
    }
    const unicode::CodepointFlags flags = unicode::codepoint_flags(cp);
    if (flags.whitespace) {
      out[i] = kFoldedWhitespace;
      continue;
    }
    switch (flags.category) {
      case Category::kNumber:
        out[i] = kCodeNumber;
        break;
      case Category::kLetter:
        out[i] = kCodeLetter;
        break;
      case Category::kPunctuation:
        out[i] = kCodePunctuation;
        break;
      case Category::kMark:
        out[i] = kCodeMark;
        break;
      case Category::kSymbol:
        out[i] = kCodeSymbol;
        break;
      default:
        out[i] = kCodeOther;
        break;
    }
  }
  return out;
}

std::vector<uint32_t> fold_whitespace(std::span<const uint32_t> cps) {
  std::vector<uint32_t> out(cps.begin(), cps.end());
  for (uint32_t& cp : out) {
    if (cp > 0x7F && unicode::is_whitespace(cp)) cp = kFoldedWhitespace;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RegexSplit>> RegexSplit::compile(
    std::string_view pattern) {
  std::unique_ptr<RegexSplit> split(new RegexSplit());
  split->pattern_ = std::string(pattern);
  split->collapsed_ = names_a_category(pattern);
  std::vector<uint32_t> units;
  if (split->collapsed_) {
    absl::StatusOr<std::vector<uint32_t>> collapsed = collapse_pattern(pattern);
    if (!collapsed.ok()) return collapsed.status();
    units = *std::move(collapsed);
  } else {
    units = wide_pattern(pattern);
  }
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // ECMAScript semantics: '$' only at the very end; no (*UTF)/(*UCP) from
  // inside the pattern.
  const uint32_t options =
      PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP;
  pcre2_code* code = pcre2_compile(units.data(), units.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    const int n = pcre2_get_error_message(error, message, 256);
    std::string text;
    for (int i = 0; i < n; ++i) {
      text.push_back(message[i] < 0x80 ? static_cast<char>(message[i]) : '?');
    }
    return absl::InvalidArgumentError(cat("pre-tokenizer pattern '", pattern,
                                          "' at offset ", error_offset, ": ",
                                          text));
  }
  // JIT is an optimisation only; the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  split->code_ = code;
  return split;
}

RegexSplit::~RegexSplit() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

absl::StatusOr<std::vector<size_t>> RegexSplit::split(
    std::span<const uint32_t> text, std::span<const size_t> pieces) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) return absl::ResourceExhaustedError("pcre2 match data");
  std::vector<size_t> out;
  out.reserve(pieces.size() * 2);
  size_t start = 0;
  absl::Status status;
  for (size_t piece : pieces) {
    if (piece == 0) continue;  // an empty piece has no words
    const uint32_t* subject = text.data() + start;
    size_t last_end = 0;  // end of the previous match, relative to `subject`
    size_t offset = 0;
    uint32_t extra = 0;
    while (offset <= piece) {
      int rc = pcre2_match(code, subject, piece, offset, extra, md, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // the interpreter uses the heap
        rc = pcre2_match(code, subject, piece, offset, extra | PCRE2_NO_JIT,
                         md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) {
        if (extra == 0 || offset >= piece) break;
        // An empty match could not be followed by a non-empty one at the
        // same place: move one unit on (as std::regex_iterator does).
        extra = 0;
        ++offset;
        continue;
      }
      if (rc < 0) {
        status = absl::ResourceExhaustedError(
            cat("pre-tokenizer pattern '", pattern_, "': PCRE2 error ", rc));
        break;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t m_begin = ov[0];
      const size_t m_end = ov[1];
      if (m_begin > last_end) out.push_back(m_begin - last_end);
      out.push_back(m_end - m_begin);
      last_end = m_end;
      if (m_end == m_begin) {
        if (m_end >= piece) break;
        extra = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        offset = m_end;
      } else {
        extra = 0;
        offset = m_end;
      }
    }
    if (!status.ok()) break;
    if (last_end < piece) out.push_back(piece - last_end);
    start += piece;
  }
  pcre2_match_data_free(md);
  if (!status.ok()) return status;
  return out;
}

}  // namespace strata::tokenizer
