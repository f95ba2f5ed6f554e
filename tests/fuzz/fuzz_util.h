// Helpers of the fuzz targets (tests/fuzz/*_fuzz.cc): where the models are,
// and a check that stops the run with a message (a finding) when an
// invariant the target asserts does not hold.
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "tests/test_paths.h"

namespace strata::fuzz {

// ../shared/models/stories260K.gguf (STRATA_SHARED_DIR).
inline std::string stories_path() {
  return (testing::shared_dir() / "models" / "stories260K.gguf").string();
}

// SmolLM2-135M-Instruct Q4_1 (STRATA_MODELS_DIR) when present, else
// stories260K (no chat template: `messages` are refused, the rest is the
// same code).
inline std::string tokenizer_model_path() {
  const std::filesystem::path smol =
      testing::models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (std::filesystem::exists(smol, ec)) return smol.string();
  return stories_path();
}

// Aborts with `what` (the fuzzer saves the input) unless `ok`.
inline void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

// Aborts when a setup step failed (a missing model is not a finding: it
// says which file).
inline void require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz target setup failed: %s\n", what.c_str());
  std::exit(2);
}

// With STRATA_FUZZ_VERBOSE set, prints what each input came to (to check
// that a corpus reaches what it is meant to); else nothing.
inline void note(const std::string& what) {
  static const bool on = std::getenv("STRATA_FUZZ_VERBOSE") != nullptr;
  if (on) std::fprintf(stderr, "  -> %s\n", what.c_str());
}

// The reference for coordinator::check_bearer: the scheme "Bearer" in any
// case (RFC 9110 11.1), one or more spaces, then exactly `key`.
inline bool bearer_matches(std::string_view header, std::string_view key) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  const size_t at = header.find_first_not_of(' ', kScheme.size());
  return at != std::string_view::npos && header.substr(at) == key;
}

}  // namespace strata::fuzz
