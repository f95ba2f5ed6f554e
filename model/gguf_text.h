// Message building for the GGUF code. Debian's abseil is built with its own
// absl::string_view (not std::string_view), so absl::StrCat does not take
// std::string_view; these small helpers do.
//
// Thread-safety: pure functions.
#pragma once

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace strata::gguf::text {

inline void append(std::string& out, std::string_view s) { out.append(s); }
inline void append(std::string& out, char c) { out.push_back(c); }

template <typename T>
requires(std::integral<T> || std::floating_point<T>) &&
    (!std::same_as<T, char>)&&(!std::same_as<T, bool>)void append(
        std::string& out, T value) {
  char buffer[64];
  const std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, r.ptr);
}

// Concatenates strings, characters and numbers (decimal, shortest float).
template <typename... Args>
std::string cat(const Args&... args) {
  std::string out;
  (append(out, args), ...);
  return out;
}

// C-style escape of arbitrary bytes: printable ASCII as is (backslash and
// quotes escaped), everything else as \xHH.
inline std::string escape(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

}  // namespace strata::gguf::text
