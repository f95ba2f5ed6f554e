// Small string helpers for model/tokenizer/. (Debian's Abseil is built with
// its own string_view type, so absl::StrCat and absl's hash maps do not take
// std::string_view; these do.)
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

namespace strata::tokenizer {

namespace text_internal {
inline void append(std::string* out, std::string_view s) { out->append(s); }
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, char> &&
         !std::is_same_v<T, bool>) void append(std::string* out, T v) {
  out->append(std::to_string(v));
}
}  // namespace text_internal

// Concatenates strings and integers: cat("id ", 3, " of ", name).
template <typename... Args>
std::string cat(const Args&... args) {
  std::string out;
  (text_internal::append(&out, args), ...);
  return out;
}

// Hash that lets std::unordered_map<std::string, ...> be searched with a
// std::string_view (C++20 heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return std::hash<std::string_view>{}(s);
  }
};

template <typename V>
using StringMap =
    std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace strata::tokenizer
