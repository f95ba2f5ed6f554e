// Chat templates: a conversation rendered into the prompt text the model was
// trained on, as the Jinja template in `tokenizer.chat_template` would.
//
// There is no Jinja interpreter here. Instead the template text is matched
// against known families (by distinctive substrings) and each family is
// rendered natively, byte for byte what Python's jinja2 gives for that
// template (tests/chat_template compares against jinja2's output):
//   - ChatML (`<|im_start|>ROLE\nCONTENT<|im_end|>\n`), with the default
//     system message some templates (SmolLM2) insert when the conversation
//     does not start with one;
//   - Gemma 2 and 3 (`<start_of_turn>`; assistant is `model`; roles must
//     alternate; Gemma 3 folds the system message into the first turn);
//   - Llama 3 (`<|start_header_id|>ROLE<|end_header_id|>\n\n...<|eot_id|>`);
//   - Mistral / Llama 2 style `[INST] ... [/INST]` without a system prompt;
//   - Phi-3 (`<|user|>\nCONTENT<|end|>\n`; eos when no generation prompt).
// A template that is none of these is refused (the caller may substitute a
// known template's text, e.g. with `strata chat-template --chat-template`).
// Where the template would `raise_exception`, render() fails with exactly the
// template's message.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::chat_template {

struct Message {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

struct RenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token;  // the text of the model's BOS / EOS tokens
  std::string eos_token;
};

enum class Family { kChatMl, kGemma, kLlama3, kMistral, kPhi3 };

std::string_view family_name(Family family);

class ChatTemplate {
 public:
  // Recognises the family of `text`; InvalidArgument when it is unknown.
  static absl::StatusOr<ChatTemplate> parse(std::string_view text);

  Family family() const { return family_; }

  // The prompt; FailedPrecondition with the template's own message where
  // the template raises (e.g. roles not alternating).
  absl::StatusOr<std::string> render(std::span<const Message> messages,
                                     const RenderOptions& options) const;

 private:
  ChatTemplate() = default;

  absl::StatusOr<std::string> render_chatml(std::span<const Message> messages,
                                            const RenderOptions& options) const;
  absl::StatusOr<std::string> render_gemma(std::span<const Message> messages,
                                           const RenderOptions& options) const;
  absl::StatusOr<std::string> render_llama3(std::span<const Message> messages,
                                            const RenderOptions& options) const;
  absl::StatusOr<std::string> render_mistral(
      std::span<const Message> messages, const RenderOptions& options) const;
  absl::StatusOr<std::string> render_phi3(std::span<const Message> messages,
                                          const RenderOptions& options) const;

  Family family_ = Family::kChatMl;
  // ChatML: the system message inserted when the first is not a system one.
  bool has_default_system_ = false;
  std::string default_system_;
  // Gemma: whether a leading system message is folded into the first turn
  // (Gemma 3) or refused (Gemma 2).
  bool gemma_system_prefix_ = true;
  // Mistral: whether an assistant turn is followed by eos + " ".
  bool mistral_space_after_eos_ = false;
};

// Python's str.strip() (Jinja's `trim`): removes leading and trailing
// Unicode whitespace.
std::string python_strip(std::string_view text);

}  // namespace strata::chat_template
