// llama.cpp server's /infill answer and its code-completion stop rules,
// without the server (tools/server: server-task.cpp to_json_non_oaicompat
// for the shapes, server-context.cpp process_token for n_indent and
// t_max_predict_ms). The handler is OpenAiApi::infill (api.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::coordinator::http {

// The last object of an /infill answer (streamed or not).
struct InfillDone {
  std::string content;          // "" when streamed (the pieces carried it)
  std::vector<int32_t> tokens;  // the generated ids with return_tokens, else none
  std::string model;
  std::string prompt;           // the prompt's text, special tokens shown
  int tokens_predicted = 0;     // ids generated
  int tokens_evaluated = 0;     // the prompt's ids
  int cache_n = 0;              // prompt ids restored from the prefix cache
  std::string stop_type;        // "eos", "word" or "limit"
  std::string stopping_word;    // the stop string that ended it, or ""
  bool has_new_line = false;    // the generated text has a '\n'
  double prompt_ms = 0;         // prefill
  double predicted_ms = 0;      // after the first token
  nlohmann::ordered_json generation_settings;
};

// {"index", "content", "tokens", "stop": true, "model", "tokens_predicted",
//  "tokens_evaluated", "generation_settings", "prompt", "has_new_line",
//  "truncated": false, "stop_type", "stopping_word", "tokens_cached",
//  "timings": {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms",
//  "prompt_per_second", "predicted_n", "predicted_ms",
//  "predicted_per_token_ms", "predicted_per_second"}}
nlohmann::ordered_json infill_done_json(const InfillDone& done);

// A streamed piece: {"index": 0, "content", "tokens", "stop": false,
// "tokens_predicted", "tokens_evaluated"}.
nlohmann::ordered_json infill_piece_json(std::string_view content, const std::vector<int32_t>& ids,
                                         int tokens_predicted, int tokens_evaluated);

// llama.cpp's response_fields: each path "a/b" that names a member of
// `object` (nested through objects) becomes that member under the flat key
// "a/b"; paths that name nothing are left out.
nlohmann::ordered_json select_response_fields(const nlohmann::ordered_json& object,
                                              const std::vector<std::string>& paths);

// n_indent: where generated `text` must be cut because a line after a
// '\n' has fewer than n_indent ' ' or '\t' before its first other byte
// (an empty line counts: its '\n' is that byte, as in llama.cpp); the cut
// keeps the line's indentation, as llama.cpp's does. npos: no such line
// (yet: a line of only indentation so far waits), or n_indent <= 0.
std::size_t indent_cut(std::string_view text, int n_indent);

}  // namespace strata::coordinator::http
