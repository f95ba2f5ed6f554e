#include "client/cli/chat_prompt.h"

#include <fstream>
#include <iterator>

#include "absl/status/status.h"

namespace strata::cli {

absl::StatusOr<ChatPrompt> render_chat_prompt(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const chat_template::Message> messages,
    const std::string& template_file, bool add_generation_prompt) {
  std::string template_text;
  std::string template_source;
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(template_file + ": cannot read");
    }
    template_text.assign(std::istreambuf_iterator<char>(in),
                         std::istreambuf_iterator<char>());
    template_source = template_file;
  } else {
    auto text = model.get_string("tokenizer.chat_template");
    if (!text.ok()) {
      return absl::NotFoundError(
          "the model has no tokenizer.chat_template; give one with "
          "--chat-template FILE");
    }
    template_text = *std::move(text);
    template_source = "tokenizer.chat_template";
  }
  auto tmpl = chat_template::ChatTemplate::parse(template_text);
  if (!tmpl.ok()) {
    return absl::InvalidArgumentError(
        template_source + ": " + std::string(tmpl.status().message()) +
        (template_file.empty()
             ? "; give a template of a known family with --chat-template FILE"
             : ""));
  }
  chat_template::RenderOptions render;
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
  ChatPrompt out;
  out.starts_with_bos = !render.bos_token.empty() &&
                        prompt->rfind(render.bos_token, 0) == 0;
  out.text = *std::move(prompt);
  return out;
}

}  // namespace strata::cli
