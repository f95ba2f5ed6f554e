// Test helpers: where the real models are, temporary folders, and the check
// every rejection test makes (InvalidArgument + rule text + byte offset).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "model/gguf_reader.h"
#include "tests/test_paths.h"

namespace strata::gguf::testing {

using strata::testing::models_dir;
using strata::testing::shared_dir;

// A fresh folder under the test temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "strata_gguf_XXXXXX")
            .string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << pattern;
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(std::string_view name) const {
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

// Asserts that parsing `bytes` fails with InvalidArgument, a message holding
// `rule`, and "at offset OFFSET:".
inline void expect_rejected(const std::vector<uint8_t>& bytes,
                            std::string_view rule, uint64_t offset,
                            const ReaderLimits& limits = {}) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::parse(bytes.data(), bytes.size(), limits);
  ASSERT_FALSE(file.ok()) << "accepted a hostile file";
  const std::string message(file.status().message());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument)
      << message;
  EXPECT_NE(message.find(rule), std::string::npos)
      << "expected rule \"" << rule << "\" in: " << message;
  const std::string at = "at offset " + std::to_string(offset) + ":";
  EXPECT_NE(message.find(at), std::string::npos)
      << "expected \"" << at << "\" in: " << message;
}

}  // namespace strata::gguf::testing
