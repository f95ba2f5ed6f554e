#include "model/chat_template/model_chat.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace strata::chat_template {

namespace {

// The first control token that `text` spells, or nullopt.
std::optional<tokenizer::TokenId> spelled_control_token(const tokenizer::Tokenizer& tok,
                                                        const std::string& text) {
  tokenizer::EncodeOptions plain;
  plain.add_special = false;
  tokenizer::EncodeOptions special = plain;
  special.parse_special = true;
  auto a = tok.encode(text, plain);
  auto b = tok.encode(text, special);
  if (!a.ok() || !b.ok() || *a == *b) return std::nullopt;
  size_t i = 0;
  while (i < a->size() && i < b->size() && (*a)[i] == (*b)[i]) ++i;
  return i < b->size() ? std::optional<tokenizer::TokenId>((*b)[i]) : std::nullopt;
}

}  // namespace

absl::Status check_message_text(const tokenizer::Tokenizer& tok,
                                std::span<const Message> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    for (const auto& [field, text] : {std::pair<const char*, const std::string*>{
                                          "role", &messages[i].role},
                                      {"content", &messages[i].content}}) {
      const std::optional<tokenizer::TokenId> id = spelled_control_token(tok, *text);
      if (!id) continue;
      return absl::InvalidArgumentError(
          "messages[" + std::to_string(i) + "]." + field +
          ": contains the text of control token '" + tok.token_text(*id) + "' (id " +
          std::to_string(*id) + "), which a message may not carry");
    }
  }
  return absl::OkStatus();
}

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
