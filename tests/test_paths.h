// Where tests find data from outside the tree: the real models assembled by
// scripts/fetch-models.sh and ../shared. Each is the environment variable of
// the same name when set, else the CMake cache variable (tests/CMakeLists.txt)
// compiled in. Tests that use them skip, saying why, when a file is absent.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace strata::testing {

inline std::filesystem::path models_dir() {
  if (const char* env = std::getenv("STRATA_MODELS_DIR")) return env;
  return STRATA_MODELS_DIR;
}

inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("STRATA_SHARED_DIR")) return env;
  return STRATA_SHARED_DIR;
}

}  // namespace strata::testing
