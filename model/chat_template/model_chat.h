// A conversation rendered with a GGUF model's own chat template
// (`tokenizer.chat_template`, its named variants, or a template text given
// instead), with the model's BOS / EOS token texts: what `strata run
// --chat`, `strata chat-template` and the coordinator's Generate with
// messages share.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_template.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::chat_template {

// A chat request as the OpenAI API has it. Objects keep their key order
// (tojson prints tool schemas in the order given, as Python does); a
// nlohmann::json assigned here converts.
struct ChatRequest {
  nlohmann::ordered_json messages;  // array: role, content (string|parts|null),
                                    // name, tool_call_id, tool_calls
  nlohmann::ordered_json tools;     // null or the OpenAI tools array
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // chat_template_kwargs
  std::optional<std::time_t> now;   // strftime_now's clock; now when unset (tests pin it)
};

struct ModelChatPrompt {
  std::string text;
  // Whether `text` already starts with the BOS token's text (the template
  // wrote it), so the tokenizer must not add another.
  bool starts_with_bos = false;
  // Which template rendered it: the GGUF key ("tokenizer.chat_template",
  // "tokenizer.chat_template.tool_use") or the given template's source.
  std::string template_name;
  // The template's text itself (what a tool-call parser is made from).
  std::string template_text;
};

// Renders `request` with `template_text` when given (named `source` in
// messages), else the model's template: `tokenizer.chat_template.tool_use`
// when the request has tools and the model has that variant (as
// transformers picks a named template), else `tokenizer.chat_template`.
// Errors: NotFound (no template in the model), InvalidArgument (the template
// is outside the Jinja subset, named with its source and line; or the
// request's messages / tools / kwargs malformed; or the template failed on
// this conversation), FailedPrecondition with the template's own message
// when it raises (refuses the conversation).
absl::StatusOr<ModelChatPrompt> render_model_chat(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok, const ChatRequest& request,
    const std::optional<std::string>& template_text, std::string_view source);

// The same for plain {role, content} messages without tools (callers of
// the earlier API).
absl::StatusOr<ModelChatPrompt> render_model_chat(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const Message> messages,
    const std::optional<std::string>& template_text, std::string_view source,
    bool add_generation_prompt);

// A rendered chat is tokenized with control tokens parsed, so that the
// template's turn markers become those tokens; a message's own text must
// then not contain a control token's text, or a user could forge a turn
// ("<|im_end|>\n<|im_start|>system\n..."). InvalidArgument naming the
// message, the field (role or content) and the token, e.g.
// "messages[0].content: contains the text of control token '<|im_end|>'
// (id 2)"; OK otherwise. Cost: two encodings of each role and content.
absl::Status check_message_text(const tokenizer::Tokenizer& tok,
                                std::span<const Message> messages);
// The same over every string in a request's messages and tools (content,
// parts' text, names, tool call arguments...), naming its path, e.g.
// "messages[2].tool_calls[0].function.arguments".
absl::Status check_request_text(const tokenizer::Tokenizer& tok, const ChatRequest& request);

// A chat message as the gRPC API carries it (strata.v1.ChatMessage).
struct WireMessage {
  std::string role;
  std::string content;
  std::string name;             // "" for none
  std::string tool_call_id;     // "" for none
  std::string tool_calls_json;  // the OpenAI tool_calls array as JSON; "" for none
};

// The ChatRequest of a gRPC GenerateRequest's messages, tools_json,
// tool_choice and chat_template_kwargs_json. An assistant message with tool
// calls and empty content gets content null (as the OpenAI API sends it);
// a call's arguments given as JSON text of an object become that object (as
// transformers passes them: templates index them and tojson them).
// InvalidArgument naming the field: "messages[1].tool_calls_json: ..." (not
// JSON, not an array of {id?, type: "function", function: {name: string,
// arguments: string|object}}), "tools_json: ..." (not an array of
// {type: "function", function: {name: string, ...}}), "tool_choice: ..."
// (not auto / none / required / a function among the tools),
// "chat_template_kwargs_json: ..." (not a JSON object).
absl::StatusOr<ChatRequest> chat_request_from_wire(std::span<const WireMessage> messages,
                                                   std::string_view tools_json,
                                                   std::string_view tool_choice,
                                                   std::string_view chat_template_kwargs_json,
                                                   bool add_generation_prompt);

// The GGUF keys of the model's chat templates that parse
// ("tokenizer.chat_template", "tokenizer.chat_template.tool_use", ...);
// empty when it has none.
std::vector<std::string> model_chat_templates(const gguf::GgufFile& model);

}  // namespace strata::chat_template
