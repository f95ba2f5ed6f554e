#include "client/cli/chat_prompt.h"

#include <optional>

#include "absl/status/status.h"
#include "client/cli/text_input.h"
#include "model/chat_template/model_chat.h"

namespace strata::cli {

absl::StatusOr<ChatPrompt> render_chat_prompt(const gguf::GgufFile& model,
                                              const tokenizer::Tokenizer& tok,
                                              const chat_template::ChatRequest& request,
                                              const std::string& template_file) {
  std::optional<std::string> template_text;
  if (!template_file.empty()) {
    absl::StatusOr<std::string> text = read_text_file(template_file);
    if (!text.ok()) return text.status();
    template_text = std::move(*text);
  }
  auto prompt = chat_template::render_model_chat(model, tok, request, template_text, template_file);
  if (!prompt.ok()) {
    // The model's own template missing or outside the subset: this command
    // takes one from a file.
    const absl::Status& st = prompt.status();
    if (!template_text && absl::IsNotFound(st)) {
      return absl::Status(st.code(), std::string(st.message()) +
                                         "; give a template with --chat-template FILE");
    }
    return st;
  }
  ChatPrompt out;
  out.text = std::move(prompt->text);
  out.starts_with_bos = prompt->starts_with_bos;
  return out;
}

absl::StatusOr<ChatPrompt> render_chat_prompt(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const chat_template::Message> messages,
    const std::string& template_file, bool add_generation_prompt) {
  chat_template::ChatRequest request;
  request.messages = nlohmann::ordered_json::array();
  for (const auto& m : messages) request.messages.push_back({{"role", m.role}, {"content", m.content}});
  request.add_generation_prompt = add_generation_prompt;
  return render_chat_prompt(model, tok, request, template_file);
}

}  // namespace strata::cli
