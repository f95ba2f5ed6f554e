#include "client/cli/text_input.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"

namespace strata::cli {

absl::StatusOr<std::string> read_stream(std::FILE* stream, const std::string& name) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const size_t got = std::fread(buf, 1, sizeof buf, stream);
    out.append(buf, got);
    if (got < sizeof buf) break;
  }
  if (std::ferror(stream)) {
    const int err = errno;
    return absl::UnavailableError(name + ": cannot read: " + std::strerror(err));
  }
  return out;
}

absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(path + ": a directory, not a file");
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    return absl::NotFoundError(path + ": cannot read: " + std::strerror(err));
  }
  absl::StatusOr<std::string> text = read_stream(f, path);
  std::fclose(f);
  return text;
}

}  // namespace strata::cli
