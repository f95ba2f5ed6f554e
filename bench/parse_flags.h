// Flag parsing shared by the C++ benches: usage errors exit 2, as strata's
// own commands do (CLI11_PARSE would exit with CLI11's codes, 105, 109, ...).
#pragma once

#include <optional>

#include "CLI/CLI.hpp"

namespace strata::bench {

// Parses argv into `app`. nullopt when the benchmark should run; else the
// exit status: 0 after --help, 2 after a usage error (CLI11 printed it).
inline std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace strata::bench
