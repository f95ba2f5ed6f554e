// Chat output: a request's generated text as a chat answer — `content`,
// `reasoning_content` and OpenAI `tool_calls` — in one place that both
// front ends (the OpenAI HTTP API and the gRPC Inference service) use.
//
// When the request has tools and tool_choice is not "none", prompt
// preparation (coordinator/prompt.h) fills a ChatOutputSpec with the chat
// template that rendered the prompt (the tool_use variant or an override),
// the rendered prompt and the tools, and asks for control tokens rendered as
// text (SequenceRequest.render_special), so the template's markers
// (<tool_call>, <|python_tag|>, [TOOL_CALLS], <|channel|>) reach the
// parser (model/chat_template/tool_calls.h). Otherwise the text passes
// through as content, byte for byte.
//
// Usage (one per choice):
//   ChatOutput out(spec);
//   for each SequenceEvent kDelta e:  ChatOutput::Delta d = out.push(e.text);  send d
//   at kDone:  send out.finish();  out.finish_reason(finish_reason_name(e.finish));
//              out.tool_calls() (the OpenAI array), out.content()
//
// Threads: one ChatOutput belongs to one sequence's consumer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/chat_template/tool_calls.h"

namespace strata::coordinator {

struct ChatOutputSpec {
  bool parse_tool_calls = false;
  std::string template_text;  // the template that rendered the prompt
  std::string prompt_text;    // the rendered prompt
  nlohmann::json tools;       // the OpenAI tools array
  std::uint64_t id_seed = 0;  // 0: random call ids (tests: reproducible)
};

class ChatOutput {
 public:
  struct Delta {
    std::string content;
    std::string reasoning_content;
    nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI delta entries
    bool empty() const {
      return content.empty() && reasoning_content.empty() && tool_calls.empty();
    }
  };

  ChatOutput() = default;  // pass-through
  explicit ChatOutput(const ChatOutputSpec& spec);

  bool parsing() const { return parser_ != nullptr; }
  // Generated text as it streams (a kDelta event's text).
  Delta push(std::string_view text);
  // End of generation: what was held back.
  Delta finish();

  // Everything returned so far.
  const std::string& content() const { return content_; }
  const std::string& reasoning_content() const { return reasoning_; }
  // The OpenAI array [{id, type, function: {name, arguments}}]; [] when none.
  nlohmann::json tool_calls() const;
  bool has_tool_calls() const { return parser_ != nullptr && parser_->has_tool_calls(); }
  // "tool_calls" when calls were parsed and the model stopped by itself
  // (base "stop"); `base` otherwise.
  std::string finish_reason(std::string_view base) const;

 private:
  Delta take(chat_template::ToolCallParser::Delta d);

  std::unique_ptr<chat_template::ToolCallParser> parser_;
  std::string content_;
  std::string reasoning_;
};

}  // namespace strata::coordinator
