// The sampling and stopping flags shared by the commands that generate
// text: `strata run` (the model in this process) and `strata generate` /
// `strata chat` (over gRPC, remote.h). Meanings as llama.cpp's flags of the
// same names.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace strata::cli {

struct SamplingFlags {
  // --seed not given: run draws a random seed, generate leaves it to the
  // server (which checks cmd.count("--seed")).
  static constexpr uint64_t kRandomSeed = 0xFFFFFFFFu;

  int n_predict = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int repeat_last_n = 64;
  uint64_t seed = kRandomSeed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// A uint64 flag's text: 0 .. 2^64 - 1 in decimal; "-1" or 2^64 is refused,
// not wrapped to 2^64 - 1 as CLI11 would.
inline CLI::Validator uint64_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || ec != std::errc() || ptr != end) {
          return "not an integer from 0 to 18446744073709551615: " + text;
        }
        return "";
      },
      "UINT64");
}

// -n, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --presence-penalty, --frequency-penalty, --repeat-last-n, --seed, --stop,
// --ignore-eos.
inline void add_sampling_flags(CLI::App* cmd, SamplingFlags* f) {
  cmd->add_option("-n,--n-predict", f->n_predict, "tokens to generate (128)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("--temp", f->temperature, "temperature; 0 = greedy (0)");
  cmd->add_option("--top-k", f->top_k, "top-k; 0 = off (0)");
  cmd->add_option("--top-p", f->top_p, "top-p; 1 = off (1)");
  cmd->add_option("--min-p", f->min_p, "min-p; 0 = off (0)");
  cmd->add_option("--repeat-penalty", f->repeat_penalty, "1 = off (1)");
  cmd->add_option("--presence-penalty", f->presence_penalty, "0 = off (0)");
  cmd->add_option("--frequency-penalty", f->frequency_penalty, "0 = off (0)");
  cmd->add_option("--repeat-last-n", f->repeat_last_n,
                  "tokens the penalties look back over (64)");
  cmd->add_option("--seed", f->seed, "sampling seed, 0 .. 2^64 - 1 (random)")
      ->check(uint64_check());
  cmd->add_option("--stop", f->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", f->ignore_eos,
                "do not stop at end-of-generation tokens");
}

}  // namespace strata::cli
