#include "model/chat_template/model_chat.h"

#include <algorithm>
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

namespace {

// Every string under `j` whose text spells a control token: InvalidArgument
// naming its path.
absl::Status check_strings(const tokenizer::Tokenizer& tok, const nlohmann::ordered_json& j,
                           const std::string& path, int depth) {
  if (depth > 64) return absl::InvalidArgumentError(path + ": nested too deep");
  if (j.is_string()) {
    const std::optional<tokenizer::TokenId> id = spelled_control_token(tok, j.get<std::string>());
    if (!id) return absl::OkStatus();
    return absl::InvalidArgumentError(path + ": contains the text of control token '" +
                                      tok.token_text(*id) + "' (id " + std::to_string(*id) +
                                      "), which a message may not carry");
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      absl::Status st = check_strings(tok, j[i], path + "[" + std::to_string(i) + "]", depth + 1);
      if (!st.ok()) return st;
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      absl::Status st = check_strings(tok, value, path + "." + key, depth + 1);
      if (!st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

constexpr std::string_view kTemplateKey = "tokenizer.chat_template";

}  // namespace

absl::Status check_request_text(const tokenizer::Tokenizer& tok, const ChatRequest& request) {
  if (absl::Status st = check_strings(tok, request.messages, "messages", 0); !st.ok()) return st;
  return check_strings(tok, request.tools, "tools", 0);
}

absl::StatusOr<ModelChatPrompt> render_model_chat(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok, const ChatRequest& request,
    const std::optional<std::string>& template_text, std::string_view source) {
  std::string text;
  std::string from(source);
  if (template_text) {
    text = *template_text;
  } else {
    const bool has_tools = request.tools.is_array() && !request.tools.empty();
    const std::string tool_use = std::string(kTemplateKey) + ".tool_use";
    auto variant = has_tools ? model.get_string(tool_use) : absl::NotFoundError("");
    if (variant.ok()) {
      text = *std::move(variant);
      from = tool_use;
    } else {
      auto t = model.get_string(kTemplateKey);
      if (!t.ok()) return absl::NotFoundError("the model has no tokenizer.chat_template");
      text = *std::move(t);
      from = std::string(kTemplateKey);
    }
  }
  auto tmpl = ChatTemplate::parse(text);
  if (!tmpl.ok()) {
    return absl::InvalidArgumentError(from + ": " + std::string(tmpl.status().message()));
  }
  RenderOptions render;
  render.add_generation_prompt = request.add_generation_prompt;
  render.now = request.now;
  const tokenizer::SpecialTokens& special = tok.special();
  if (special.bos && tok.is_valid(*special.bos)) render.bos_token = tok.token_text(*special.bos);
  if (special.eos && tok.is_valid(*special.eos)) render.eos_token = tok.token_text(*special.eos);
  auto prompt = tmpl->render(request.messages, request.tools, request.extra, render);
  if (!prompt.ok()) {
    if (absl::IsFailedPrecondition(prompt.status())) {
      return absl::FailedPreconditionError("the chat template refused the conversation: " +
                                           std::string(prompt.status().message()));
    }
    return absl::Status(prompt.status().code(),
                        from + ": " + std::string(prompt.status().message()));
  }
  ModelChatPrompt out;
  out.starts_with_bos = !render.bos_token.empty() && prompt->rfind(render.bos_token, 0) == 0;
  out.text = *std::move(prompt);
  out.template_name = from;
  out.template_text = std::move(text);
  return out;
}

absl::StatusOr<ModelChatPrompt> render_model_chat(
    const gguf::GgufFile& model, const tokenizer::Tokenizer& tok,
    std::span<const Message> messages,
    const std::optional<std::string>& template_text, std::string_view source,
    bool add_generation_prompt) {
  ChatRequest request;
  request.messages = nlohmann::ordered_json::array();
  for (const Message& m : messages) {
    request.messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  request.add_generation_prompt = add_generation_prompt;
  return render_model_chat(model, tok, request, template_text, source);
}

namespace {

absl::StatusOr<nlohmann::ordered_json> parse_json(std::string_view text, const std::string& field) {
  // nlohmann's parser keeps its own stack, so deep nesting costs memory, not
  // the call stack; the template refuses values nested too deep.
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(field + ": not valid JSON");
  return j;
}

absl::Status check_function(const nlohmann::ordered_json& item, const std::string& where,
                            bool arguments) {
  if (!item.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
  if (item.contains("type") && item["type"] != "function") {
    return absl::InvalidArgumentError(where + ".type: expected \"function\"");
  }
  if (!item.contains("function") || !item["function"].is_object()) {
    return absl::InvalidArgumentError(where + ".function: expected an object");
  }
  const auto& fn = item["function"];
  if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
    return absl::InvalidArgumentError(where + ".function.name: expected a non-empty string");
  }
  if (arguments && fn.contains("arguments") && !fn["arguments"].is_string() &&
      !fn["arguments"].is_object()) {
    return absl::InvalidArgumentError(where + ".function.arguments: expected a string or an object");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatRequest> chat_request_from_wire(std::span<const WireMessage> messages,
                                                   std::string_view tools_json,
                                                   std::string_view tool_choice,
                                                   std::string_view chat_template_kwargs_json,
                                                   bool add_generation_prompt) {
  ChatRequest request;
  request.add_generation_prompt = add_generation_prompt;
  request.messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const WireMessage& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls_json.empty()) {
      auto calls = parse_json(m.tool_calls_json, where + ".tool_calls_json");
      if (!calls.ok()) return calls.status();
      if (!calls->is_array()) return absl::InvalidArgumentError(where + ".tool_calls_json: expected an array");
      for (size_t k = 0; k < calls->size(); ++k) {
        absl::Status st = check_function((*calls)[k], where + ".tool_calls_json[" + std::to_string(k) + "]", true);
        if (!st.ok()) return st;
        // OpenAI sends arguments as JSON text; templates index and tojson a
        // dict (as transformers passes them), so text that is a JSON object
        // becomes that object; other text stays a string.
        auto& fn = (*calls)[k]["function"];
        if (fn.contains("arguments") && fn["arguments"].is_string()) {
          nlohmann::ordered_json args = nlohmann::ordered_json::parse(
              fn["arguments"].get<std::string>(), nullptr, /*allow_exceptions=*/false);
          if (!args.is_discarded() && args.is_object()) fn["arguments"] = std::move(args);
        }
      }
      if (!calls->empty()) {
        j["tool_calls"] = *std::move(calls);
        if (m.content.empty()) j["content"] = nullptr;
      }
    }
    request.messages.push_back(std::move(j));
  }
  std::vector<std::string> tool_names;
  if (!tools_json.empty()) {
    auto tools = parse_json(tools_json, "tools_json");
    if (!tools.ok()) return tools.status();
    if (!tools->is_array()) return absl::InvalidArgumentError("tools_json: expected an array");
    for (size_t k = 0; k < tools->size(); ++k) {
      absl::Status st = check_function((*tools)[k], "tools_json[" + std::to_string(k) + "]", false);
      if (!st.ok()) return st;
      tool_names.push_back((*tools)[k]["function"]["name"].get<std::string>());
    }
    if (!tools->empty()) request.tools = *std::move(tools);
  }
  if (!tool_choice.empty() && tool_choice != "auto" && tool_choice != "none") {
    if (tool_choice == "required") {
      if (tool_names.empty()) return absl::InvalidArgumentError("tool_choice: \"required\" but no tools are given");
    } else {
      auto choice = parse_json(tool_choice, "tool_choice");
      if (!choice.ok()) {
        return absl::InvalidArgumentError(
            "tool_choice: expected \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
      }
      absl::Status st = check_function(*choice, "tool_choice", false);
      if (!st.ok()) return st;
      const std::string name = (*choice)["function"]["name"].get<std::string>();
      if (std::find(tool_names.begin(), tool_names.end(), name) == tool_names.end()) {
        return absl::InvalidArgumentError("tool_choice: function '" + name + "' is not among the tools");
      }
    }
  }
  if (!chat_template_kwargs_json.empty()) {
    auto kwargs = parse_json(chat_template_kwargs_json, "chat_template_kwargs_json");
    if (!kwargs.ok()) return kwargs.status();
    if (!kwargs->is_object()) return absl::InvalidArgumentError("chat_template_kwargs_json: expected an object");
    for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
      if (kwargs->contains(reserved)) {
        return absl::InvalidArgumentError(std::string("chat_template_kwargs_json: '") + reserved +
                                          "' is set by the request itself");
      }
    }
    request.extra = *std::move(kwargs);
  }
  return request;
}

std::vector<std::string> model_chat_templates(const gguf::GgufFile& model) {
  std::vector<std::string> names;
  const std::string prefix = std::string(kTemplateKey) + ".";
  for (const auto& kv : model.metadata()) {
    if (kv.key != kTemplateKey && kv.key.rfind(prefix, 0) != 0) continue;
    auto text = model.get_string(kv.key);
    if (text.ok() && ChatTemplate::parse(*text).ok()) names.push_back(kv.key);
  }
  return names;
}

}  // namespace strata::chat_template
