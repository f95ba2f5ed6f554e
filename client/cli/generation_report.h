// What `strata run` (local) and `strata generate` (over gRPC) print when a
// generation ends: one JSON object (--json) or one summary line for stderr.
// Both commands fill a GenerationReport, so the two outputs keep the same
// keys and can be compared field by field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::cli {

struct GenerationReport {
  std::vector<int32_t> prompt_ids;  // the prompt as tokenized
  std::vector<int32_t> ids;         // generated ids
  std::string text;                 // generated text
  std::string finish_reason;        // "stop" or "length"
  uint64_t seed = 0;                // the sampler's seed
  int prompt_tokens = 0;
  int generated_tokens = 0;
  int decode_steps = 0;             // forward passes after the prefill
  double prefill_s = 0;
  double prefill_tok_s = 0;
  double decode_s = 0;
  double decode_tok_s = 0;
  std::optional<int> threads;       // local runs: the CPU threads used
  std::optional<double> ttft_s;     // remote: request -> first token
  std::optional<double> queue_s;    // remote: request -> first forward pass
};

// {"prompt_ids":[...],"ids":[...],"text":"...","finish_reason":"...",
//  "seed":N,"timings":{"prompt_tokens","prefill_s","prefill_tok_s",
//  "generated_tokens","decode_s","decode_tok_s"[,"threads"][,"ttft_s",
//  "queue_s"]}} and a newline. Invalid UTF-8 in the text becomes U+FFFD.
std::string generation_json(const GenerationReport& report);

// "[stop] prefill: 5 tokens in 0.010 s, 500.0 tok/s | decode: ... tok/s |
// 2 threads" (or "| TTFT 12.3 ms" when remote) and a newline.
std::string generation_summary(const GenerationReport& report);

}  // namespace strata::cli
