// Chat templates rendered by the Jinja interpreter against Python jinja2's rendering of the
// same template text (data/expected.json, written by make_expected.py).
#include "model/chat_template/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::chat_template {
namespace {

nlohmann::json load_expected() {
  std::ifstream in(std::string(STRATA_CHAT_TEMPLATE_DATA) + "/expected.json");
  EXPECT_TRUE(in.good()) << "missing data/expected.json";
  return nlohmann::json::parse(in);
}

std::vector<Message> messages_of(const nlohmann::json& j) {
  std::vector<Message> out;
  for (const auto& m : j) {
    out.push_back({m.at("role").get<std::string>(),
                   m.at("content").get<std::string>()});
  }
  return out;
}

TEST(ChatTemplate, MatchesJinja2) {
  const nlohmann::json expected = load_expected();
  int checked = 0;
  for (const auto& c : expected.at("cases")) {
    const std::string name = c.at("template").get<std::string>() + "/" +
                             c.at("conversation").get<std::string>() +
                             (c.at("add_generation_prompt").get<bool>()
                                  ? "+gen"
                                  : "");
    SCOPED_TRACE(name);
    const std::string text =
        expected.at("templates").at(c.at("template").get<std::string>());
    auto tmpl = ChatTemplate::parse(text);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    RenderOptions options;
    options.add_generation_prompt = c.at("add_generation_prompt");
    options.bos_token = c.at("bos_token");
    options.eos_token = c.at("eos_token");
    const std::vector<Message> messages = messages_of(c.at("messages"));
    auto prompt = tmpl->render(messages, options);
    if (c.contains("error")) {
      ASSERT_FALSE(prompt.ok()) << "rendered " << *prompt;
      EXPECT_EQ(prompt.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(prompt.status().message(), c.at("error").get<std::string>());
    } else {
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      EXPECT_EQ(*prompt, c.at("prompt").get<std::string>());
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST(ChatTemplate, AnyTemplateOfTheSubsetParses) {
  const nlohmann::json expected = load_expected();
  for (const auto& [name, text] : expected.at("templates").items()) {
    EXPECT_TRUE(ChatTemplate::parse(text.get<std::string>()).ok()) << name;
  }
  for (const char* text : {"", "{{ messages }}", "{% for m in messages %}{{ m.content }}{% endfor %}"}) {
    EXPECT_TRUE(ChatTemplate::parse(text).ok()) << text;
  }
}

TEST(ChatTemplate, TemplateOutsideTheSubsetIsRefusedWithItsLine) {
  for (const char* text : {"{% if %}", "{{ x", "a\n{% include 'other' %}", "{% for x in y %}"}) {
    auto tmpl = ChatTemplate::parse(text);
    ASSERT_FALSE(tmpl.ok()) << text;
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(tmpl.status().message().substr(0, 5), "line ") << tmpl.status();
  }
}

TEST(ChatTemplate, ToolsAndToolCallsReachTheTemplate) {
  auto tmpl = ChatTemplate::parse(
      "{% for t in tools %}{{ t.function.name }}:{{ t.function.parameters | tojson }}\n{% endfor %}"
      "{% for m in messages %}{{ m.role }}"
      "{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.function.name }}({{ c.function.arguments | tojson }})]"
      "{% endfor %}{% else %}={{ m.content }}{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}\n"
      "{% endfor %}{{ enable_thinking }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "21"}])");
  auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  auto out = tmpl->render(messages, tools, {{"enable_thinking", false}}, RenderOptions{});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "get_weather:{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}\n"
            "user=weather?assistant[get_weather({\"city\": \"Paris\"})]tool=21#c1False");  // trim_blocks
  auto reserved = tmpl->render(messages, tools, {{"messages", 1}}, RenderOptions{});
  ASSERT_FALSE(reserved.ok());
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, GemmaRolesMustAlternate) {
  const nlohmann::json expected = load_expected();
  auto tmpl = ChatTemplate::parse(
      expected.at("templates").at("gemma3").get<std::string>());
  ASSERT_TRUE(tmpl.ok());
  const std::vector<Message> messages = {
      {"system", "s"}, {"user", "a"}, {"assistant", "b"}, {"assistant", "c"}};
  auto prompt = tmpl->render(messages, RenderOptions{});
  ASSERT_FALSE(prompt.ok());
  EXPECT_EQ(prompt.status().message(),
            "Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(ChatTemplate, PythonStrip) {
  EXPECT_EQ(python_strip(""), "");
  EXPECT_EQ(python_strip(" \t\n\r\v\f"), "");
  EXPECT_EQ(python_strip("\u3000\u00a0a b\u2028\u0085"), "a b");
  EXPECT_EQ(python_strip(" \xff "), "\xff");     // stray byte kept
  EXPECT_EQ(python_strip("\xe3\x80"), "\xe3\x80");  // truncated: kept
  EXPECT_EQ(python_strip("x\u200b"), "x\u200b");  // zero-width: not space
}

}  // namespace
}  // namespace strata::chat_template
