#include "client/cli/generation_report.h"

#include <cstdio>

#include "nlohmann/json.hpp"

namespace strata::cli {

std::string generation_json(const GenerationReport& r) {
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_ids;
  j["ids"] = r.ids;
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  j["seed"] = r.seed;
  nlohmann::json t = {{"prompt_tokens", r.prompt_tokens},
                      {"prefill_s", r.prefill_s},
                      {"prefill_tok_s", r.prefill_tok_s},
                      {"generated_tokens", r.generated_tokens},
                      {"decode_s", r.decode_s},
                      {"decode_tok_s", r.decode_tok_s}};
  if (r.threads.has_value()) t["threads"] = *r.threads;
  if (r.ttft_s.has_value()) t["ttft_s"] = *r.ttft_s;
  if (r.queue_s.has_value()) t["queue_s"] = *r.queue_s;
  j["timings"] = std::move(t);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::string generation_summary(const GenerationReport& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "[%s] prefill: %d tokens in %.3f s, %.1f tok/s | decode: %d "
                "tokens in %.3f s, %.1f tok/s",
                r.finish_reason.c_str(), r.prompt_tokens, r.prefill_s,
                r.prefill_tok_s, r.decode_steps, r.decode_s, r.decode_tok_s);
  std::string out = line;
  if (r.threads.has_value()) {
    std::snprintf(line, sizeof line, " | %d threads", *r.threads);
    out += line;
  }
  if (r.ttft_s.has_value()) {
    std::snprintf(line, sizeof line, " | TTFT %.1f ms", *r.ttft_s * 1e3);
    out += line;
  }
  return out + "\n";
}

}  // namespace strata::cli
