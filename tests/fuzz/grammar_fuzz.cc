// libFuzzer target: the GBNF parser and the grammar matcher
// (model/grammar/grammar.h) on a hostile grammar, as a request's `grammar`
// field brings it to the coordinator's check and the last stage's sampler.
//
// Input: the grammar's text, a NUL byte, then the text to generate (no NUL:
// the whole input is the grammar and nothing is generated). The vocabulary
// is fixed: every single byte (so partial UTF-8 characters), a few
// multi-byte pieces (JSON punctuation, words, 2-, 3- and 4-byte characters
// whole and cut), a control token (no bytes) and an end-of-generation
// token. The text is cut into tokens greedily (the longest piece that
// starts it) and generated one token at a time, at most 64 steps.
//
// Asserted at each step, beyond no crash and no sanitizer report: the mask
// (fill_mask: the trie walk over the lazy DFA, with its cache and memo)
// allows exactly the tokens that allows() (the matcher stepped byte by
// byte) allows, but for one whose byte path overflows (accept() then fails
// as too ambiguous); end-of-generation is allowed exactly when complete();
// accept() of the next token succeeds exactly when the mask allowed it; a
// grammar too ambiguous fails with InvalidArgument. A parse error is
// InvalidArgument "line N col M: ...".
// Seeds: corpus/grammar/ (make_fuzz_seeds).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "model/grammar/grammar.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using strata::fuzz::check;
using strata::grammar::GrammarMatcher;
using strata::grammar::TokenMask;
using strata::grammar::TokenTable;

constexpr int32_t kControl = 256, kEog = 257;

const std::vector<std::string>& pieces() {
  static const std::vector<std::string> p = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    v.emplace_back();  // kControl
    v.emplace_back();  // kEog
    for (const char* s : {"{\"", "\":", "\": ", "\",", "\"}", "},", "[]", "{}", "true", "false",
                          "null", "  ", "\n", "\n  ", "abc", "ab", "12", "-0", ".5", "e+",
                          "\\\"", "\\u00", "\xc3\xa9", "\xe6\x97\xa5", "\xe6\x97",
                          "\xf0\x9f\x98\x80", "\xf0\x9f", "a\xc3", "\xa9z", "root", "::="}) {
      v.emplace_back(s);
    }
    return v;
  }();
  return p;
}

const std::shared_ptr<const TokenTable>& table() {
  static const std::shared_ptr<const TokenTable> t = [] {
    std::vector<bool> eog(pieces().size(), false);
    eog[kEog] = true;
    return TokenTable::build(pieces(), eog);
  }();
  return t;
}

// The id of the longest piece that starts `text` (a single byte at least).
int32_t next_token(std::string_view text) {
  int32_t best = static_cast<uint8_t>(text[0]);
  size_t best_len = 1;
  for (size_t id = kEog + 1; id < pieces().size(); ++id) {
    const std::string& p = pieces()[id];
    if (p.size() > best_len && text.substr(0, p.size()) == p) {
      best = static_cast<int32_t>(id);
      best_len = p.size();
    }
  }
  return best;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  auto grammar = strata::grammar::parse_gbnf(source);
  if (!grammar.ok()) {
    check(grammar.status().code() == absl::StatusCode::kInvalidArgument,
          "a parse error is InvalidArgument");
    check(absl::StartsWith(grammar.status().message(), "line "), "a parse error names its line");
    strata::fuzz::note("parse: " + std::string(grammar.status().message()));
    return 0;
  }
  GrammarMatcher m(*grammar, table());
  TokenMask mask;
  const int32_t n = table()->n_tokens();
  for (int step = 0; step < 64; ++step) {
    const absl::Status filled = m.fill_mask(&mask);
    if (!filled.ok()) {
      check(filled.code() == absl::StatusCode::kInvalidArgument, "a mask fails with InvalidArgument");
      strata::fuzz::note("mask: " + std::string(filled.message()));
      return 0;
    }
    check(mask.size() == (static_cast<size_t>(n) + 63) / 64, "the mask has a bit per token");
    for (int32_t t = 0; t < n; ++t) {
      if (strata::grammar::allowed(mask, t) == m.allows(t)) continue;
      // allows() steps byte by byte without the mask's memo, so one token
      // can overflow there (kMaxStepWork, kMaxStacks) where the whole mask
      // did not; it is false then, and accept() of it says why.
      const absl::Status accepted = m.accept(t);
      check(accepted.code() == absl::StatusCode::kInvalidArgument &&
                absl::StrContains(accepted.message(), "ambiguous"),
            "the mask agrees with allows()");
      strata::fuzz::note("allows: " + std::string(accepted.message()));
      return 0;
    }
    check(strata::grammar::allowed(mask, kEog) == m.complete(), "end-of-generation iff complete");
    check(!strata::grammar::allowed(mask, kControl), "a control token is never allowed");
    if (text.empty()) break;
    const int32_t token = next_token(text);
    const bool was_allowed = strata::grammar::allowed(mask, token);
    const absl::Status accepted = m.accept(token);
    if (accepted.code() == absl::StatusCode::kInvalidArgument &&
        absl::StrContains(accepted.message(), "ambiguous")) {
      strata::fuzz::note("accept: " + std::string(accepted.message()));
      return 0;  // the step overflowed: the grammar is at fault
    }
    check(accepted.ok() == was_allowed, "accept() succeeds iff the mask allowed the token");
    if (!accepted.ok()) {
      check(accepted.code() == absl::StatusCode::kInvalidArgument, "a refused token is InvalidArgument");
      strata::fuzz::note("stopped after " + std::to_string(step) + " tokens");
      return 0;
    }
    text.remove_prefix(pieces()[token].size());
  }
  strata::fuzz::note(std::string("generated; complete: ") + (m.complete() ? "yes" : "no"));
  return 0;
}
