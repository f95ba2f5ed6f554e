// The bearer token that guards the public APIs (HTTP and strata.v1.Inference
// over gRPC): `api_key` in the coordinator's config or `--api-key` of
// `strata serve`, else the environment variable STRATA_API_KEY.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace strata::coordinator {

// The key to require: `configured` when not empty, else $STRATA_API_KEY,
// else "" (no authentication).
std::string resolve_api_key(const std::string& configured);

// OK when `authorization` (the header or metadata value) is "Bearer KEY"
// (the scheme in any case, one or more spaces; RFC 9110 11.1)
// with KEY equal to `expected`; the comparison takes the same time wherever
// the two differ. UNAUTHENTICATED otherwise (the message never echoes what
// was sent). `expected` empty: always OK.
absl::Status check_bearer(std::string_view expected, std::string_view authorization);

}  // namespace strata::coordinator
