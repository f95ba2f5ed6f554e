// Runs the `strata` binary (STRATA_BINARY) as a user would, capturing its
// output, errors and exit status.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace strata::testing {

struct CommandResult {
  int status = -1;  // exit status; -1 when killed by a signal
  std::string out;
  std::string err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q.push_back(c);
    }
  }
  return q + "'";
}

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `strata ARGS` (ARGS as a shell would split them) in `dir` with
// `input` on standard input.
inline CommandResult run_strata(const std::filesystem::path& dir,
                                const std::string& args,
                                const std::string& input = "") {
  const auto in = dir / "stdin";
  std::ofstream(in, std::ios::binary) << input;
  const auto out = dir / "stdout";
  const auto err = dir / "stderr";
  const std::string cmd = quote(STRATA_BINARY) + " " + args + " < " +
                          quote(in.string()) + " > " + quote(out.string()) +
                          " 2> " + quote(err.string());
  const int raw = std::system(cmd.c_str());
  CommandResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace strata::testing
