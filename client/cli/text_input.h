// Whole-input reads for the CLI's text arguments: --messages and
// --chat-template files, and --stdin. A read error (a directory given as a
// file or as stdin, an I/O error) is reported, never taken for empty text,
// and never thrown: libstdc++'s filebuf throws std::ios_failure on such a
// read, which is why these use C stdio.
#pragma once

#include <cstdio>
#include <string>

#include "absl/status/statusor.h"

namespace strata::cli {

// The bytes of the file at `path`. Errors: InvalidArgument "PATH: a
// directory, not a file"; NotFound or Unavailable "PATH: cannot read: " and
// the system's reason.
absl::StatusOr<std::string> read_text_file(const std::string& path);

// The bytes of `stream` to its end (stdin: read_stream(stdin, "stdin")).
// Errors: Unavailable "NAME: cannot read: " and the system's reason.
absl::StatusOr<std::string> read_stream(std::FILE* stream, const std::string& name);

}  // namespace strata::cli
