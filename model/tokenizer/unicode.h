// Unicode helpers for the tokenizers: UTF-8 decoding the way llama.cpp does
// it (so that invalid input tokenizes the same), codepoint categories, the
// GPT-2 byte-to-unicode alphabet, and a UTF-8 repairer for streaming output.
//
// Sources:
//   - categories: Unicode general categories through utf8proc (Unicode 15
//     for utf8proc 2.8), grouped as llama.cpp's scripts/gen-unicode-data.py
//     groups them (L*, N*, M*, P*, S*, Z*, C*; Cn is "undefined").
//   - whitespace: the Unicode White_Space property (PropList.txt), the same
//     set llama.cpp uses: U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680,
//     U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
//   - byte-to-unicode: GPT-2's encoder.py bytes_to_unicode(): bytes
//     '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves; the other 68
//     bytes, in increasing order, map to U+0100, U+0101, ...
//   - replacement of invalid UTF-8: the WHATWG Encoding Standard's decoder
//     (one U+FFFD per maximal invalid subpart).
//
// Thread-safety: all functions are pure; Utf8Repairer is a value type that
// one thread uses at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer::unicode {

inline constexpr uint32_t kReplacementCharacter = 0xFFFD;
inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

enum class Category : uint8_t {
  kUndefined,    // Cn, and values above U+10FFFF
  kNumber,       // N*
  kLetter,       // L*
  kSeparator,    // Z*
  kMark,         // M*
  kPunctuation,  // P*
  kSymbol,       // S*
  kControl,      // Cc, Cf, Cs, Co
};

struct CodepointFlags {
  Category category = Category::kUndefined;
  bool whitespace = false;

  bool is_letter() const { return category == Category::kLetter; }
  bool is_number() const { return category == Category::kNumber; }
};

CodepointFlags codepoint_flags(uint32_t cp);
bool is_whitespace(uint32_t cp);

// Simple lowercase mapping (UnicodeData.txt field 13); cp itself if none.
uint32_t to_lower(uint32_t cp);

// Bytes in the UTF-8 sequence that `lead` starts, from its high nibble alone
// (0x0-0xB: 1, 0xC-0xD: 2, 0xE: 3, 0xF: 4), as llama.cpp's
// unicode_len_utf8() counts them; continuation bytes count as 1.
size_t sequence_length_from_lead(uint8_t lead);

// Decodes like llama.cpp's unicode_cpts_from_utf8(): a lead byte followed by
// the right number of continuation bytes gives its codepoint (overlong forms
// and surrogates are not refused); any other byte gives one U+FFFD. Values
// above U+10FFFF (leads 0xF5..0xF7) give U+FFFD (llama.cpp throws there).
std::vector<uint32_t> decode_lenient(std::string_view bytes);

// Appends the UTF-8 form of cp (surrogates as their 3-byte form, as
// llama.cpp writes them). cp must be <= U+10FFFF.
void append_utf8(uint32_t cp, std::string* out);

// Offset of the first byte that does not belong to a well-formed UTF-8
// sequence (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF),
// or npos when all of `bytes` is valid.
size_t find_invalid_utf8(std::string_view bytes);

// GPT-2 byte-to-unicode alphabet: the UTF-8 text of the codepoint byte `b`
// stands for, and back (-1 for a codepoint that stands for no byte).
std::string_view byte_to_unicode(uint8_t b);
int unicode_to_byte(uint32_t cp);

// Turns a stream of bytes into valid UTF-8 text: complete sequences pass
// through unchanged, a sequence still incomplete at the end of a push is held
// back until later bytes complete it, and bytes that can no longer form a
// valid sequence become U+FFFD (one per maximal invalid subpart). Feeding the
// same bytes in any split gives the same concatenated output.
class Utf8Repairer {
 public:
  // Appends to *out the text that `bytes` completes.
  void push(std::string_view bytes, std::string* out);
  // Ends the stream: a held-back incomplete sequence becomes one U+FFFD.
  void finish(std::string* out);
  // Bytes held back now (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  void push_byte(uint8_t b, std::string* out);

  std::string pending_;  // bytes of the incomplete sequence
  int needed_ = 0;       // continuation bytes still expected
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
};

// Whole-buffer form of Utf8Repairer: push(bytes) then finish().
std::string repair_utf8(std::string_view bytes);

}  // namespace strata::tokenizer::unicode
