// parse_backend_choice (worker/cuda/cuda_backend.h): built with and without
// CUDA, so that a config naming cuda parses the same everywhere and only
// make_cuda_backend says what this build can do.
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_backend.h"

namespace strata::worker {

absl::StatusOr<BackendChoice> parse_backend_choice(std::string_view text) {
  BackendChoice c;
  if (text == "cpu") return c;
  c.kind = BackendChoice::Kind::kCuda;
  if (text == "cuda") return c;
  constexpr std::string_view kPrefix = "cuda:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view n = text.substr(kPrefix.size());
    // Decimal digits only (no sign, no spaces), at most 4 of them.
    const bool digits =
        !n.empty() && n.size() <= 4 &&
        n.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits) {
      c.device = 0;
      for (char ch : n) c.device = c.device * 10 + (ch - '0');
      if (c.device <= 1023) return c;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", std::string(text),
                   "\" is not a backend (cpu, cuda, or cuda:N with N a device "
                   "ordinal 0..1023)"));
}

}  // namespace strata::worker
