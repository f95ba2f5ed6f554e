// Prompt preparation: a v1::GenerateRequest (inference.proto) becomes what
// the Scheduler runs — the model check, every field against the bounds
// inference.proto states, tokenization of `prompt` or the chat template's
// rendering of `messages`, the sampling parameters and the seed. The gRPC
// Inference service and the OpenAI HTTP front end (coordinator/http/) both
// call it, so both accept and refuse the same requests with the same
// message.
//
// The request's total text is bounded first (check_request_size), so an
// oversized request costs a size count, not a rendering.
//
// Errors name the field as inference.proto spells it: INVALID_ARGUMENT
// ("max_tokens: 10000000 exceeds 1048576"; "tools_json: only with
// messages"), NOT_FOUND for another model, OUT_OF_RANGE with both numbers for a
// prompt longer than the context, FAILED_PRECONDITION when the served model
// cannot take `messages` (no usable chat template).
//
// Threads: pure functions of their arguments; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/chat_output.h"
#include "coordinator/cluster.h"
#include "coordinator/step_scheduler.h"
#include "strata/v1/inference.pb.h"
#include "worker/sampler.h"

namespace strata::coordinator {

// inference.proto's bounds that more than one request kind shares: a text
// (prompt, message content, an embedding input) and a cache_salt.
inline constexpr size_t kMaxTextBytes = 4u << 20;
inline constexpr size_t kMaxCacheSaltBytes = 256;

// OK when `model` is empty or names the served model; else NOT_FOUND
// "model: 'x' is not served here; this server serves 'y'".
absl::Status check_model_name(const v1::ModelInfo& served,
                              const std::string& model);

// Checks a GenerateRequest against inference.proto's bounds for a model of
// n_vocab tokens (no tokenization). INVALID_ARGUMENT naming the field. On
// success *sampling, when given, receives the request's sampling parameters
// (worker::sampling_from_proto: absent fields take their defaults; seed 0
// when absent).
absl::Status check_generate_request(const v1::GenerateRequest& request,
                                    int n_vocab,
                                    worker::SamplingParams* sampling = nullptr);

// The most bytes of text one request may carry in all, for a context of
// n_ctx tokens: n_ctx x 64 bytes (a token is a few bytes of text; 64 leaves
// room for markup the template drops), at least 1 MiB, at most 8 MiB.
size_t request_text_limit(int64_t n_ctx);

// The request's text in all — prompt; every message's role, content, name,
// tool_call_id and tool_calls_json; tools_json, tool_choice,
// chat_template_kwargs_json, grammar, json_schema, stop and user — against
// request_text_limit(n_ctx), before anything is parsed, rendered or
// tokenized (their cost grows with the size). INVALID_ARGUMENT naming the
// largest field and both numbers:
// "request: 15360000 bytes of text exceed 1048576, the bound for a context
// of 2048 tokens (largest field: messages.messages[0].content, 15360000 bytes)".
absl::Status check_request_size(const v1::GenerateRequest& request, int64_t n_ctx);

struct PromptOptions {
  // max_tokens when the request has none; 0: the rest of the context.
  int default_max_tokens = 128;
};

// The request checked and tokenized: `prompt`, `params` (max_tokens, the
// sampling parameters with a random seed when none was given, stop,
// ignore_eos) and the logprob flags, ready for Scheduler::submit.
// With messages, tools and tool_choice other than "none", *chat_output
// (when given) receives what ChatOutput needs to parse the answer's tool
// calls and the request renders control tokens as text; tool_choice
// "required" or a named function becomes the request's grammar (the
// template's call format: tool_call_gbnf), INVALID_ARGUMENT naming
// tool_choice when response_format / grammar is given too or the template
// has no call format this server parses.
absl::StatusOr<SequenceRequest> prepare_prompt(
    const ServedModel& model, const v1::GenerateRequest& request,
    const PromptOptions& options = {}, ChatOutputSpec* chat_output = nullptr);

}  // namespace strata::coordinator
