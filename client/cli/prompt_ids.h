// --prompt-ids "ID ID ...": token ids given instead of a prompt, shared by
// `strata run` and `strata generate`.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace strata::cli {

// The ids of `text` (integers separated by white space), or nullopt when a
// word is not an integer or lies outside [0, 2^31 - 1] (an id is never
// wrapped into range). Whether each id is inside the model's vocabulary is
// checked later, against the model.
inline std::optional<std::vector<int32_t>> parse_prompt_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      return std::nullopt;  // not a number, or past long long
    }
    if (used != word.size() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return std::nullopt;
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace strata::cli
