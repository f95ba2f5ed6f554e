#include "coordinator/chat_output.h"

#include <utility>

namespace strata::coordinator {

ChatOutput::ChatOutput(const ChatOutputSpec& spec) {
  if (!spec.parse_tool_calls) return;
  // As make_tool_call_parser, with the spec's id seed.
  chat_template::ToolCallParser::Options o;
  o.tools = spec.tools;
  o.think_tags = chat_template::template_uses_think_tags(spec.template_text);
  o.starts_in_reasoning = o.think_tags && chat_template::prompt_opens_reasoning(spec.prompt_text);
  o.id_seed = spec.id_seed;
  parser_ = std::make_unique<chat_template::ToolCallParser>(
      chat_template::detect_tool_call_format(spec.template_text), std::move(o));
}

ChatOutput::Delta ChatOutput::take(chat_template::ToolCallParser::Delta d) {
  Delta out;
  out.content = std::move(d.content);
  out.reasoning_content = std::move(d.reasoning_content);
  for (const chat_template::ToolCallDelta& c : d.tool_calls) {
    out.tool_calls.push_back(chat_template::tool_call_delta_json(c));
  }
  content_ += out.content;
  reasoning_ += out.reasoning_content;
  return out;
}

ChatOutput::Delta ChatOutput::push(std::string_view text) {
  if (parser_ == nullptr) {
    Delta out;
    out.content = std::string(text);
    content_ += out.content;
    return out;
  }
  return take(parser_->push(text));
}

ChatOutput::Delta ChatOutput::finish() {
  if (parser_ == nullptr) return Delta{};
  return take(parser_->finish());
}

nlohmann::json ChatOutput::tool_calls() const {
  return parser_ != nullptr ? parser_->tool_calls() : nlohmann::json::array();
}

std::string ChatOutput::finish_reason(std::string_view base) const {
  if (parser_ == nullptr) return std::string(base);
  return chat_template::finish_reason(base, *parser_);
}

}  // namespace strata::coordinator
