// Chat templates: a conversation rendered into the prompt text the model was
// trained on, by the Jinja template in `tokenizer.chat_template` (or a
// template given instead), interpreted by model/jinja byte for byte as
// Python's jinja2 renders it in transformers' apply_chat_template.
//
// The template sees: messages (OpenAI-style: role, content as a string, a
// list of parts or null, name, tool_call_id, tool_calls), tools (the OpenAI
// tools array, or none), documents (none unless the kwargs give them),
// add_generation_prompt, bos_token and eos_token (the text of the model's
// BOS / EOS tokens), and every extra keyword (chat_template_kwargs, e.g.
// enable_thinking, reasoning_effort).
//
// Errors: parse gives InvalidArgument "line N: ..." for a template outside
// the Jinja subset; render gives FailedPrecondition with exactly the
// template's own message where it calls raise_exception (e.g. roles not
// alternating), InvalidArgument "line N: ..." where the template fails on
// the conversation another way (e.g. content null where it wants a string,
// as jinja2 would), ResourceExhausted past the interpreter's limits.
//
// A ChatTemplate is immutable and may be rendered from many threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/jinja/jinja.h"
#include "nlohmann/json.hpp"

namespace strata::chat_template {

struct Message {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

struct RenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token;  // the text of the model's BOS / EOS tokens
  std::string eos_token;
  std::optional<std::time_t> now;  // strftime_now's clock; now when unset
};

class ChatTemplate {
 public:
  // InvalidArgument "line N: ..." for a syntax error or a construct outside
  // the Jinja subset (model/jinja/jinja.h).
  static absl::StatusOr<ChatTemplate> parse(std::string_view text);

  // `messages`: the OpenAI messages array; `tools`: the OpenAI tools array
  // or null (an empty array is passed as none, as transformers does);
  // `extra`: an object of further template variables, or null.
  absl::StatusOr<std::string> render(const nlohmann::ordered_json& messages,
                                     const nlohmann::ordered_json& tools,
                                     const nlohmann::ordered_json& extra,
                                     const RenderOptions& options) const;
  // Plain {role, content} messages, no tools.
  absl::StatusOr<std::string> render(std::span<const Message> messages,
                                     const RenderOptions& options) const;

 private:
  ChatTemplate() = default;
  std::shared_ptr<const jinja::Template> template_;
};

// Python's str.strip() (Jinja's `trim`): removes leading and trailing
// Unicode whitespace.
std::string python_strip(std::string_view text);

}  // namespace strata::chat_template
