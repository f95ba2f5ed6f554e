#include "coordinator/api_key.h"

#include <cstdlib>

#include "absl/strings/match.h"

namespace strata::coordinator {

std::string resolve_api_key(const std::string& configured) {
  if (!configured.empty()) return configured;
  const char* env = std::getenv("STRATA_API_KEY");
  return env != nullptr ? std::string(env) : std::string();
}

absl::Status check_bearer(std::string_view expected, std::string_view authorization) {
  if (expected.empty()) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "no API key: send the header `Authorization: Bearer KEY`");
  }
  // RFC 9110 11.1 and 11.4: the scheme is case-insensitive, one or more
  // spaces before the credentials.
  const size_t space = authorization.find(' ');
  if (space == std::string_view::npos ||
      !absl::EqualsIgnoreCase(absl::string_view(authorization.data(), space), "Bearer")) {
    return absl::UnauthenticatedError("authorization: expected `Bearer KEY`");
  }
  std::string_view given = authorization.substr(space);
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  // Constant time in the position of the first difference: every byte of
  // the expected key is looked at, whatever was sent.
  unsigned diff = given.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g =
        i < given.size() ? static_cast<unsigned char>(given[i]) : 0u;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  if (diff != 0) return absl::UnauthenticatedError("incorrect API key");
  return absl::OkStatus();
}

}  // namespace strata::coordinator
