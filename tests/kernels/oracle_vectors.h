// Access to the oracle vectors that make_quant_vectors.py writes (the ctest
// fixture kernels.MakeQuantVectors): raw blocks with the gguf Python
// package's and ggml's own outputs. Tests that need them skip, saying why,
// when the vectors or a package are missing.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::testing {

struct OracleStatus {
  std::string dir;
  bool gguf_ok = false;
  bool ggml_ok = false;
  std::string gguf_why;  // why gguf vectors are unavailable (when !gguf_ok)
  std::string ggml_why;
};

// Reads <dir>/status.txt once. The directory is $STRATA_QUANT_VECTORS_DIR
// or the build-time default.
const OracleStatus& oracle_status();

// The bytes of <dir>/<name>, or nullopt when the file is absent.
std::optional<std::vector<uint8_t>> read_vector(const std::string& name);

// Reinterprets little-endian bytes as an array of T.
template <typename T>
std::vector<T> as_array(const std::vector<uint8_t>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace strata::testing

// Skip the current test (with the reason) unless gguf / ggml vectors exist.
#define STRATA_REQUIRE_GGUF_VECTORS()                              \
  do {                                                             \
    if (!::strata::testing::oracle_status().gguf_ok)               \
      GTEST_SKIP() << ::strata::testing::oracle_status().gguf_why; \
  } while (0)
#define STRATA_REQUIRE_GGML_VECTORS()                              \
  do {                                                             \
    if (!::strata::testing::oracle_status().ggml_ok)               \
      GTEST_SKIP() << ::strata::testing::oracle_status().ggml_why; \
  } while (0)
