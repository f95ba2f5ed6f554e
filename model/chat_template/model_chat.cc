#include "model/chat_template/model_chat.h"

#include "absl/status/status.h"

namespace strata::chat_template {

absl::StatusOr<ModelChatPrompt> render_model_chat(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const Message> messages,
    const std::optional<std::string>& template_text, std::string_view source,
    bool add_generation_prompt) {
  std::string text;
  std::string from(source);
  if (template_text) {
    text = *template_text;
  } else {
    auto t = model.get_string("tokenizer.chat_template");
    if (!t.ok()) {
      return absl::NotFoundError("the model has no tokenizer.chat_template");
    }
    text = *std::move(t);
    from = "tokenizer.chat_template";
  }
  auto tmpl = ChatTemplate::parse(text);
  if (!tmpl.ok()) {
    return absl::InvalidArgumentError(from + ": " + std::string(tmpl.status().message()));
  }
  RenderOptions render;
  render.add_generation_prompt = add_generation_prompt;
  const tokenizer::SpecialTokens& special = tok.special();
  if (special.bos && tok.is_valid(*special.bos)) {
    render.bos_token = tok.token_text(*special.bos);
  }
  if (special.eos && tok.is_valid(*special.eos)) {
    render.eos_token = tok.token_text(*special.eos);
  }
  auto prompt = tmpl->render(messages, render);
  if (!prompt.ok()) {
    return absl::FailedPreconditionError(
        "the chat template refused the conversation: " +
        std::string(prompt.status().message()));
  }
  ModelChatPrompt out;
  out.starts_with_bos = !render.bos_token.empty() &&
                        prompt->rfind(render.bos_token, 0) == 0;
  out.text = *std::move(prompt);
  out.family = tmpl->family();
  return out;
}

std::optional<Family> model_chat_family(const gguf::GgufFile& model) {
  auto t = model.get_string("tokenizer.chat_template");
  if (!t.ok()) return std::nullopt;
  auto tmpl = ChatTemplate::parse(*t);
  if (!tmpl.ok()) return std::nullopt;
  return tmpl->family();
}

}  // namespace strata::chat_template
