// Chat templates rendered natively against Python jinja2's rendering of the
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

TEST(ChatTemplate, DetectsFamilies) {
  const nlohmann::json expected = load_expected();
  const auto& t = expected.at("templates");
  EXPECT_EQ(ChatTemplate::parse(t.at("smollm2").get<std::string>())->family(),
            Family::kChatMl);
  EXPECT_EQ(ChatTemplate::parse(t.at("chatml").get<std::string>())->family(),
            Family::kChatMl);
  EXPECT_EQ(ChatTemplate::parse(t.at("gemma3").get<std::string>())->family(),
            Family::kGemma);
  EXPECT_EQ(ChatTemplate::parse(t.at("gemma2").get<std::string>())->family(),
            Family::kGemma);
  EXPECT_EQ(ChatTemplate::parse(t.at("llama3").get<std::string>())->family(),
            Family::kLlama3);
  EXPECT_EQ(ChatTemplate::parse(t.at("mistral").get<std::string>())->family(),
            Family::kMistral);
  EXPECT_EQ(ChatTemplate::parse(t.at("phi3").get<std::string>())->family(),
            Family::kPhi3);
}

TEST(ChatTemplate, UnknownTemplateIsRefused) {
  for (const char* text :
       {"", "{{ messages }}", "{% for m in messages %}{{ m.content }}{% endfor %}",
        "<<SYS>>[INST] [/INST]"}) {
    auto tmpl = ChatTemplate::parse(text);
    ASSERT_FALSE(tmpl.ok()) << text;
    EXPECT_EQ(tmpl.status().code(), absl::StatusCode::kInvalidArgument);
  }
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
