// On/off switches read from the environment (STRATA_JIT, STRATA_NO_TUNE,
// STRATA_PIN, STRATA_PERF_MAP; the cuda backend's STRATA_WGMMA, STRATA_PDL,
// ...), all spelled the same way.
#pragma once

#include <optional>

namespace strata::kernels {

// The switch `name` of the environment: std::nullopt when it is unset or
// empty; true for 1, true, yes or on; false for 0, false, no or off (ASCII
// case ignored). Any other value is reported on stderr ("strata: ignoring
// NAME=VALUE: expected 1/true/yes/on or 0/false/no/off"), once per name and
// value in a process, and read as unset, so a typo leaves the default in
// force and says so.
// Thread-safety: reads the environment (std::getenv) on each call; safe
// from several threads while nobody changes the environment.
std::optional<bool> env_switch(const char* name);

}  // namespace strata::kernels
