#include "kernels/cpu/env_switch.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/ascii.h"

namespace strata::kernels {

std::optional<bool> env_switch(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  const std::string v = absl::AsciiStrToLower(raw);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  // Once per name and value: a switch is read several times per command.
  static std::mutex mutex;
  static std::set<std::string> reported;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!reported.insert(std::string(name) + "=" + raw).second) return std::nullopt;
  }
  std::fprintf(stderr,
               "strata: ignoring %s=%s: expected 1/true/yes/on or 0/false/no/off\n",
               name, raw);
  return std::nullopt;
}

}  // namespace strata::kernels
