// The prompt text a model's chat template makes of a conversation: shared by
// `strata chat-template` and `strata run --chat`.
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_template.h"
#include "model/chat_template/model_chat.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"

namespace strata::cli {

struct ChatPrompt {
  std::string text;
  // Whether `text` already starts with the BOS token's text (the template
  // wrote it), so the tokenizer must not add another.
  bool starts_with_bos = false;
};

// Renders `messages` with the template in `template_file` when it is not
// empty, else the model's tokenizer.chat_template, with the model's BOS/EOS
// token texts. Errors (InvalidArgument / FailedPrecondition / NotFound) say
// what to do: no template in the model (give one with --chat-template
// FILE), a template outside the Jinja subset, a file that cannot be read, or the template's own
// message when it refuses the conversation.
absl::StatusOr<ChatPrompt> render_chat_prompt(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const chat_template::Message> messages,
    const std::string& template_file, bool add_generation_prompt);

// The same for a whole chat request (messages with tool calls, tools,
// template kwargs).
absl::StatusOr<ChatPrompt> render_chat_prompt(const gguf::GgufFile& model,
                                              const tokenizer::Tokenizer& tok,
                                              const chat_template::ChatRequest& request,
                                              const std::string& template_file);

}  // namespace strata::cli
