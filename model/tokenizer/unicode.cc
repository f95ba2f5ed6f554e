#include "model/tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>

namespace strata::tokenizer::unicode {
namespace {

Category category_of(utf8proc_category_t c) {
  switch (c) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Category::kLetter;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return Category::kMark;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Category::kNumber;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return Category::kPunctuation;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
      return Category::kSymbol;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return Category::kSeparator;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return Category::kControl;
    case UTF8PROC_CATEGORY_CN:
      return Category::kUndefined;
  }
  return Category::kUndefined;
}

// The 256-entry GPT-2 alphabet, built once.
struct ByteAlphabet {
  std::array<std::string, 256> text;    // byte -> UTF-8 of its codepoint
  std::array<int16_t, 324> byte_of_cp;  // codepoint (< 324) -> byte or -1

  ByteAlphabet() {
    byte_of_cp.fill(-1);
    auto keeps_itself = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
             (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = keeps_itself(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(cp, &text[b]);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

bool is_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x0085:
    case 0x00A0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

CodepointFlags codepoint_flags(uint32_t cp) {
  CodepointFlags flags;
  flags.whitespace = is_whitespace(cp);
  if (cp < 0x80) {
    // Fast path; utf8proc agrees on ASCII.
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
      flags.category = Category::kLetter;
    } else if (cp >= '0' && cp <= '9') {
      flags.category = Category::kNumber;
    } else if (cp < 0x20 || cp == 0x7F) {
      flags.category = Category::kControl;
    } else if (cp == ' ') {
      flags.category = Category::kSeparator;
    } else if (cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' ||
               cp == '^' || cp == '`' || cp == '|' || cp == '~') {
      flags.category = Category::kSymbol;
    } else {
      flags.category = Category::kPunctuation;
    }
    return flags;
  }
  if (cp > kMaxCodepoint) return flags;
  if (cp >= 0xD800 && cp <= 0xDFFF) {  // utf8proc reports surrogates as Cn
    flags.category = Category::kControl;
    return flags;
  }
  flags.category =
      category_of(utf8proc_category(static_cast<utf8proc_int32_t>(cp)));
  return flags;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return cp;
  return static_cast<uint32_t>(
      utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

size_t sequence_length_from_lead(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                           1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

std::vector<uint32_t> decode_lenient(std::string_view bytes) {
  std::vector<uint32_t> cps;
  cps.reserve(bytes.size());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    size_t len = 0;
    uint32_t cp = 0;
    if (b0 < 0x80) {
      len = 1;
      cp = b0;
    } else if (b0 < 0xC0) {
      len = 0;  // lone continuation byte
    } else if (b0 < 0xE0) {
      len = 2;
      cp = b0 & 0x1F;
    } else if (b0 < 0xF0) {
      len = 3;
      cp = b0 & 0x0F;
    } else if (b0 < 0xF8) {
      len = 4;
      cp = b0 & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if (!is_continuation(p[i + k])) {
        ok = false;
      } else {
        cp = (cp << 6) | (p[i + k] & 0x3F);
      }
    }
    if (!ok) {
      cps.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    cps.push_back(cp <= kMaxCodepoint ? cp : kReplacementCharacter);
    i += len;
  }
  return cps;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t find_invalid_utf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (!is_continuation(p[i + k])) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

std::string_view byte_to_unicode(uint8_t b) { return byte_alphabet().text[b]; }

int unicode_to_byte(uint32_t cp) {
  const ByteAlphabet& a = byte_alphabet();
  return cp < a.byte_of_cp.size() ? a.byte_of_cp[cp] : -1;
}

void Utf8Repairer::push_byte(uint8_t b, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  if (needed_ == 0) {
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
    } else if (b >= 0xC2 && b <= 0xDF) {
      needed_ = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      if (b == 0xE0) lower_ = 0xA0;
      if (b == 0xED) upper_ = 0x9F;
      needed_ = 2;
    } else if (b >= 0xF0 && b <= 0xF4) {
      if (b == 0xF0) lower_ = 0x90;
      if (b == 0xF4) upper_ = 0x8F;
      needed_ = 3;
    } else {
      out->append(kReplacement);
      return;
    }
    if (needed_ > 0) pending_.push_back(static_cast<char>(b));
    return;
  }
  if (b < lower_ || b > upper_) {
    // The sequence so far is a maximal invalid subpart: one U+FFFD, then
    // `b` starts afresh.
    pending_.clear();
    needed_ = 0;
    lower_ = 0x80;
    upper_ = 0xBF;
    out->append(kReplacement);
    push_byte(b, out);
    return;
  }
  lower_ = 0x80;
  upper_ = 0xBF;
  pending_.push_back(static_cast<char>(b));
  if (--needed_ == 0) {
    out->append(pending_);
    pending_.clear();
  }
}

void Utf8Repairer::push(std::string_view bytes, std::string* out) {
  for (char c : bytes) push_byte(static_cast<uint8_t>(c), out);
}

void Utf8Repairer::finish(std::string* out) {
  if (needed_ != 0) {
    out->append("\xEF\xBF\xBD");
    pending_.clear();
    needed_ = 0;
    lower_ = 0x80;
    upper_ = 0xBF;
  }
}

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8Repairer repairer;
  repairer.push(bytes, &out);
  repairer.finish(&out);
  return out;
}

}  // namespace strata::tokenizer::unicode
