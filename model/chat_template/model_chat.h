// A conversation rendered with a GGUF model's own chat template
// (`tokenizer.chat_template`, or a template text given instead), with the
// model's BOS / EOS token texts: what `strata run --chat`, `strata
// chat-template` and the coordinator's Generate with messages share.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat_template/chat_template.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"

namespace strata::chat_template {

struct ModelChatPrompt {
  std::string text;
  // Whether `text` already starts with the BOS token's text (the template
  // wrote it), so the tokenizer must not add another.
  bool starts_with_bos = false;
  Family family = Family::kChatMl;
};

// Renders `messages` with `template_text` when given (named `source` in
// messages), else the model's tokenizer.chat_template. Errors: NotFound (no
// template in the model), InvalidArgument (a template of no known family),
// FailedPrecondition with the template's own message when it refuses the
// conversation. The messages name no flag: callers that take a template
// file say so (client/cli/chat_prompt.h).
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

// The family of the model's own template, or nullopt (none or unknown).
std::optional<Family> model_chat_family(const gguf::GgufFile& model);

}  // namespace strata::chat_template
