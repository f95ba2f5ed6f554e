// The OpenAI wire format, without the server: a request body of
// /v1/chat/completions or /v1/completions becomes a v1::GenerateRequest
// (inference.proto) that prompt preparation (coordinator/prompt.h) then
// checks and tokenizes, exactly as for the gRPC API; an absl::Status
// becomes an OpenAI error object with its HTTP status.
//
// Mapping (OpenAI -> GenerateRequest):
//   messages[].role/content (string, or an array of {"type":"text"} parts,
//   joined by "\n")        -> messages
//   prompt (string, [string], [int], [[int]])  -> prompt / prompt_ids (an
//   array of several prompts: more_prompts, at most kMaxChoices choices in
//   all), its special-token text read as the special tokens (parse_special, as
//   llama.cpp's server and vLLM; "parse_special": false -> text)
//   max_completion_tokens | max_tokens -> max_tokens (chat: absent = the rest
//   of the context; completions: absent = 16, as OpenAI)
//   temperature, top_p, top_k (<= 0: off), min_p, presence_penalty,
//   frequency_penalty, repetition_penalty, seed, logit_bias ({"<id>": bias};
//   on llama.cpp's endpoints also its [[id, bias | false]])
//   -> sampling
//   stop (string | [string]) -> stop;  logprobs / top_logprobs (chat),
//   logprobs: k (completions) -> logprobs, top_logprobs;  user -> user
//   tools, tool_choice, chat_template_kwargs, response_format, grammar ->
//   fields 13..18 (prompt preparation says whether they are served)
//   ignore_eos, cache_salt (vLLM's extensions) -> ignore_eos, cache_salt
//   echo (completions) -> OpenAiRequest::echo, and with logprobs: k,
//   prompt_logprobs k
//   suffix (completions, a text prompt, not "") -> infill {prefix: prompt,
//   suffix} (fill in the middle; refused with echo)
//   seed -1 -> a random seed (llama.cpp's reading)
// Refused as OpenAI and vLLM refuse them: temperature < 0 (greedy on
// llama.cpp's endpoints, as its server reads it), presence /
// frequency_penalty outside [-2, 2], stream_options without stream: true.
// /completion (llama.cpp's server): prompt (text or ids, one) and /infill's
// fields below but the FIM ones, and json_schema (its top-level field).
// /infill (llama.cpp's server): input_prefix, input_suffix (required),
// prompt, input_extra [{"filename", "text"}] -> infill; n_predict |
// max_tokens (-1 or -2: absent) -> max_tokens; repeat_penalty, repeat_last_n;
// (0: the prompt evaluated, no text), return_tokens, n_indent,
// t_max_predict_ms, response_fields; spm_infill ->
// infill.suffix_first; the other fields as
// above; sampling defaults llama.cpp's (temperature 0.8, top_k 40, top_p
// 0.95, min_p 0.05); n must be 1.
// Known OpenAI fields that cannot be honoured (best_of > n, image parts)
// are refused with 400 naming them; unknown fields are ignored, as
// OpenAI-compatible servers do.
//
// Errors: InvalidArgument "param: what", the param as OpenAI spells it
// ("messages[2].content", "temperature").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "strata/v1/inference.pb.h"

namespace strata::coordinator::http {

// kInfill: llama.cpp server's /infill (fill-in-the-middle), its field names
// and sampling defaults; answered in llama.cpp's shape (api.h).
// kLlamaCompletion: llama.cpp server's /completion: a prompt (text or ids)
// with /infill's other fields, defaults and answer.
enum class Endpoint { kChat, kCompletion, kInfill, kLlamaCompletion };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kChat;
  v1::GenerateRequest generate;
  // Completions with several prompts (prompt: [string, ...] or [[ids],
  // ...]): generate is the first, these the others, each generate's copy
  // with its own input. Choices are prompt-major: prompt p's choice i is
  // choice p * n + i, as OpenAI numbers them.
  std::vector<v1::GenerateRequest> more_prompts;
  int n = 1;                   // choices of each prompt, each its own sequence
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions: the prompt's text before each choice's (OpenAI's echo);
  // with logprobs the prompt is scored (generate.prompt_logprobs) and its
  // tokens lead the logprobs, the first with null.
  bool echo = false;
  bool return_tokens = false;  // /infill: the generated ids in "tokens"
  // /infill, llama.cpp's code-completion limits (0: off): stop when a new
  // line has fewer than n_indent spaces or tabs (cut before its text), or
  // on a piece with a '\n' once t_max_predict_ms passed since the first
  // token.
  int n_indent = 0;
  int64_t t_max_predict_ms = 0;
  // /infill n_predict 0: the prompt is evaluated (and cached), no text.
  bool prompt_only = false;
  // /infill: only these members of the last object, "a/b" for a nested one
  // under that flat key (llama.cpp's response_fields); empty: all.
  std::vector<std::string> response_fields;
};

inline constexpr int kMaxChoices = 128;            // n
inline constexpr int kCompletionDefaultMaxTokens = 16;

// Parses and maps a request body. InvalidArgument naming the param.
absl::StatusOr<OpenAiRequest> parse_openai_request(Endpoint endpoint, std::string_view body);

// Parses a JSON object body (the other POST endpoints): InvalidArgument
// "invalid JSON: ..." or "expected a JSON object"; nesting deeper than 64
// is refused before parsing.
absl::StatusOr<nlohmann::json> parse_json_object(std::string_view body);

// An OpenAI error: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "authentication_error", ...
  std::string message;
  std::string param;    // "" -> null
  std::string code;     // "" -> null
  int retry_after_s = 0;  // > 0: a Retry-After header
};

// InvalidArgument / FailedPrecondition / OutOfRange -> 400, NotFound -> 404,
// Unauthenticated -> 401, ResourceExhausted -> 429, Unavailable -> 503
// (both with Retry-After), DeadlineExceeded -> 504, Unimplemented -> 501,
// else 500. `param` is the message's leading field, in OpenAI's spelling
// (proto paths such as "sampling.temperature" are renamed).
ApiError to_api_error(const absl::Status& status);
ApiError api_error(int http_status, std::string message, std::string param = "");
std::string error_json(const ApiError& error);

// JSON text that is always valid UTF-8: bytes that are not become U+FFFD.
// ordered_json keeps its members in the order they were added (responses:
// OpenAI's field order, top_logprobs most likely first).
std::string dump_json(const nlohmann::json& value);
std::string dump_json(const nlohmann::ordered_json& value);

}  // namespace strata::coordinator::http
