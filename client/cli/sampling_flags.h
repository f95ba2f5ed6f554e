// The sampling and stopping flags shared by the commands that generate
// text: `strata run` (the model in this process) and `strata generate` /
// `strata chat` (over gRPC, remote.h). Meanings as llama.cpp's flags of the
// same names.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <sstream>
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
  std::map<int32_t, float> logit_bias;  // token id -> bias (--logit-bias)
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

// The whole of `text` as a number (std::stod's forms); false when it is
// not one or has anything after it.
inline bool whole_number(const std::string& text, double* v) {
  try {
    size_t used = 0;
    *v = std::stod(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

// A number flag's check: a finite value in [lo, hi], or (lo, hi] when
// `lo_open` (lo may be -inf: no lower bound). The sampling flags take the
// bounds of inference.proto's SamplingParams, so `strata run` and a server
// accept the same values (top_k's upper bound, the vocabulary, is the
// server's own check).
inline CLI::Validator number_in(double lo, double hi, bool lo_open = false) {
  const auto bound = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  const std::string range = (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0.0;
        if (!whole_number(text, &v)) return "not a number: " + text;
        const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
        return ok ? "" : text + " is out of range " + range;
      },
      range);
}

// One --logit-bias value, llama.cpp's TOKEN_ID(+|-)BIAS ("15043+1",
// "15043-100"): to *id and *bias; false unless the id is a non-negative
// int32 and the bias a finite number in [-100, 100] (inference.proto's
// bounds; the id's upper bound, the vocabulary, is the server's check).
inline bool parse_logit_bias(const std::string& text, int32_t* id, float* bias) {
  const size_t sign = text.find_first_of("+-");
  if (sign == 0 || sign == std::string::npos) return false;
  const char* end = text.data() + sign;
  const auto [ptr, ec] = std::from_chars(text.data(), end, *id);
  if (ec != std::errc() || ptr != end || *id < 0) return false;
  double v = 0.0;
  if (!whole_number(text.substr(sign), &v)) return false;
  if (!std::isfinite(v) || v < -100.0 || v > 100.0) return false;
  *bias = static_cast<float>(v);
  return true;
}

// -n, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --presence-penalty, --frequency-penalty, --repeat-last-n, --seed, --stop,
// --ignore-eos, --logit-bias (repeatable; a later one for the same id wins). -n takes [n_min, n_max] (`strata run`: 0 .. 2^31 - 1; the
// server's max_tokens: 1 .. 2^20).
inline void add_sampling_flags(CLI::App* cmd, SamplingFlags* f, int n_min = 0,
                               int n_max = std::numeric_limits<int>::max()) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  cmd->add_option("-n,--n-predict", f->n_predict, "tokens to generate (128)")
      ->check(CLI::Range(n_min, n_max));
  cmd->add_option("--temp", f->temperature, "temperature; <= 0 = greedy (0)")
      ->check(number_in(-kInf, 100.0, true));
  cmd->add_option("--top-k", f->top_k, "top-k; 0 = off (0)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("--top-p", f->top_p, "top-p; 1 = off (1)")->check(number_in(0.0, 1.0, true));
  cmd->add_option("--min-p", f->min_p, "min-p; 0 = off (0)")->check(number_in(0.0, 1.0));
  cmd->add_option("--repeat-penalty", f->repeat_penalty, "1 = off (1)")
      ->check(number_in(0.0, 100.0, true));
  cmd->add_option("--presence-penalty", f->presence_penalty, "0 = off (0)")
      ->check(number_in(-100.0, 100.0));
  cmd->add_option("--frequency-penalty", f->frequency_penalty, "0 = off (0)")
      ->check(number_in(-100.0, 100.0));
  cmd->add_option("--repeat-last-n", f->repeat_last_n,
                  "tokens the penalties look back over (64)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--seed", f->seed, "sampling seed, 0 .. 2^64 - 1 (random)")
      ->check(uint64_check());
  cmd->add_option("--stop", f->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", f->ignore_eos,
                "do not stop at end-of-generation tokens");
  cmd->add_option_function<std::vector<std::string>>(
         "--logit-bias",
         [f](const std::vector<std::string>& values) {
           for (const std::string& v : values) {
             int32_t id = 0;
             float bias = 0.0f;
             if (parse_logit_bias(v, &id, &bias)) f->logit_bias.insert_or_assign(id, bias);
           }
         },
         "TOKEN_ID(+|-)BIAS: add BIAS in [-100, 100] to the token's logit, e.g. 15043+1 "
         "or 15043-100 (repeatable)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            int32_t id = 0;
            float bias = 0.0f;
            return parse_logit_bias(text, &id, &bias)
                       ? ""
                       : "not TOKEN_ID(+|-)BIAS with BIAS in [-100, 100]: " + text;
          },
          "TOKEN_ID(+|-)BIAS"));
}

}  // namespace strata::cli
