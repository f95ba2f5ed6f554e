// ChatOutput (coordinator/chat_output.h): a fake stream of generated text
// pieces, as SequenceEvents deliver them, becomes content, reasoning and
// OpenAI tool_calls deltas, with the finish reason both front ends send.
#include "coordinator/chat_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "coordinator/cluster.h"
#include "coordinator/cluster_config.h"

namespace strata::coordinator {
namespace {

using json = nlohmann::json;

// Enough of a template for format detection (Hermes / Qwen 2.5, Qwen3 with
// <think>, gpt-oss harmony).
constexpr const char* kHermes =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n{%- endfor %}";
constexpr const char* kQwen3 =
    "{{ '<think>\\n' }}{{ '</think>' }}<tool_call>\n{{ x }}\n</tool_call>";
constexpr const char* kHarmony =
    "<|start|>assistant<|channel|>commentary to=functions.{{ name }}<|message|>";

json tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
}

ChatOutputSpec spec(const char* tmpl, std::string prompt = "<|im_start|>assistant\n") {
  ChatOutputSpec s;
  s.parse_tool_calls = true;
  s.template_text = tmpl;
  s.prompt_text = std::move(prompt);
  s.tools = tools();
  s.id_seed = 7;
  return s;
}

struct Collected {
  std::string content, reasoning;
  json calls = json::array();
  int deltas_with_calls = 0;
};

// Pushes `pieces` as a stream of kDelta texts, then finish().
Collected run(ChatOutput& out, const std::vector<std::string>& pieces) {
  Collected c;
  auto take = [&](const ChatOutput::Delta& d) {
    c.content += d.content;
    c.reasoning += d.reasoning_content;
    for (const json& call : d.tool_calls) c.calls.push_back(call);
    if (!d.tool_calls.empty()) ++c.deltas_with_calls;
  };
  for (const std::string& p : pieces) take(out.push(p));
  take(out.finish());
  return c;
}

TEST(ChatOutput, PassesTextThroughWithoutTools) {
  ChatOutput out;  // no spec: a request without tools
  EXPECT_FALSE(out.parsing());
  Collected c = run(out, {"Hello", " <tool_call>", " world"});
  EXPECT_EQ(c.content, "Hello <tool_call> world");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(out.finish_reason("stop"), "stop");
  EXPECT_EQ(out.tool_calls(), json::array());

  ChatOutputSpec off = spec(kHermes);
  off.parse_tool_calls = false;  // tool_choice "none"
  ChatOutput none(off);
  EXPECT_FALSE(none.parsing());
  EXPECT_EQ(run(none, {"<tool_call>\n{}"}).content, "<tool_call>\n{}");
}

TEST(ChatOutput, HermesCallStreamedTokenByToken) {
  ChatOutput out(spec(kHermes));
  ASSERT_TRUE(out.parsing());
  Collected c = run(out, {"<tool", "_call>", "\n{\"name\": \"get_", "weather\", \"arguments\": {\"city",
                          "\": \"Paris\"}}\n</tool", "_call>"});
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.deltas_with_calls, 1);
  const json& d = c.calls[0];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["type"], "function");
  EXPECT_EQ(d["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(d["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_TRUE(d["id"].get<std::string>().rfind("call_", 0) == 0);

  EXPECT_TRUE(out.has_tool_calls());
  EXPECT_EQ(out.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(out.finish_reason("length"), "length");
  const json all = out.tool_calls();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["id"], d["id"]);
  EXPECT_EQ(all[0]["function"]["name"], "get_weather");
  EXPECT_EQ(out.content(), "");
}

TEST(ChatOutput, ContentThenTwoCalls) {
  ChatOutput out(spec(kHermes));
  Collected c = run(out, {"Let me check.", "\n<tool_call>\n{\"name\": \"get_weather\", "
                          "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n"
                          "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                          "</tool_call>"});
  EXPECT_EQ(c.content, "Let me check.");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[0]["index"], 0);
  EXPECT_EQ(c.calls[1]["index"], 1);
  EXPECT_NE(c.calls[0]["id"], c.calls[1]["id"]);
  EXPECT_EQ(out.content(), "Let me check.");
  EXPECT_EQ(out.tool_calls().size(), 2u);
}

TEST(ChatOutput, MalformedCallIsContent) {
  ChatOutput out(spec(kHermes));
  Collected c = run(out, {"<tool_call>\n{\"name\": oops}\n</tool_call>"});
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "<tool_call>\n{\"name\": oops}\n</tool_call>");
  EXPECT_EQ(out.finish_reason("stop"), "stop");
}

TEST(ChatOutput, UnfinishedCallAtLengthIsContent) {
  ChatOutput out(spec(kHermes));
  Collected c = run(out, {"<tool_call>\n{\"name\": \"get_weather\", \"argu"});
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "<tool_call>\n{\"name\": \"get_weather\", \"argu");
  EXPECT_EQ(out.finish_reason("length"), "length");
}

TEST(ChatOutput, ThinkBlockIsReasoning) {
  ChatOutput out(spec(kQwen3));
  Collected c = run(out, {"<think>", "\nThe user wants", " weather.\n</think>", "\n\nSure."});
  EXPECT_EQ(c.reasoning, "The user wants weather.");
  EXPECT_EQ(c.content, "Sure.");
  EXPECT_EQ(out.reasoning_content(), "The user wants weather.");
  EXPECT_EQ(out.finish_reason("stop"), "stop");

  // A prompt that opened the block: the output starts inside it.
  ChatOutput opened(spec(kQwen3, "<|im_start|>assistant\n<think>\n"));
  Collected o = run(opened, {"hmm", "</think>", "Yes."});
  EXPECT_EQ(o.reasoning, "hmm");
  EXPECT_EQ(o.content, "Yes.");
}

TEST(ChatOutput, HarmonyChannels) {
  ChatOutput out(spec(kHarmony, "<|start|>assistant"));
  Collected c = run(out, {"<|channel|>analysis<|message|>Need weather.<|end|>",
                          "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                          "<|constrain|>json<|message|>{\"city\": \"Lima\"}", "<|call|>"});
  EXPECT_EQ(c.reasoning, "Need weather.");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(c.calls[0]["function"]["arguments"].get<std::string>())["city"], "Lima");
  EXPECT_EQ(out.finish_reason("stop"), "tool_calls");
}

TEST(ChatOutput, AnySplitGivesTheSameResult) {
  const std::string text =
      "Hi.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}\n</tool_call>";
  ChatOutput whole(spec(kHermes));
  Collected w = run(whole, {text});
  for (size_t cut = 1; cut < text.size(); cut += 3) {
    ChatOutput split(spec(kHermes));
    Collected s = run(split, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(s.content, w.content) << cut;
    ASSERT_EQ(s.calls.size(), 1u) << cut;
    EXPECT_EQ(s.calls[0]["function"], w.calls[0]["function"]) << cut;
  }
}

// --chat-template FILE / `chat_template:`: read and checked at startup.
TEST(ChatTemplateOverride, ConfigKeyAndFileChecks) {
  const std::string workers = "workers:\n  - address: 127.0.0.1:1\n";
  auto c = parse_cluster_config("model: m\nchat_template: /t/x.jinja\n" + workers, "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->chat_template, "/t/x.jinja");
  auto empty = parse_cluster_config("model: m\nchat_template: \"\"\n" + workers, "t.yaml");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("chat_template"), std::string::npos);

  ServedModel model;
  const std::string dir = ::testing::TempDir();
  absl::Status missing = set_chat_template(model, dir + "/no-such.jinja");
  EXPECT_TRUE(absl::IsInvalidArgument(missing));
  EXPECT_NE(missing.message().find("chat_template: " + dir + "/no-such.jinja"), std::string::npos)
      << missing;
  EXPECT_FALSE(model.chat_template.has_value());

  const std::string bad = dir + "/bad.jinja";
  std::ofstream(bad) << "{% for m in messages %}{{ m.content }}";  // no endfor
  absl::Status refused = set_chat_template(model, bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_NE(refused.message().find("line"), std::string::npos) << refused;

  const std::string good = dir + "/good.jinja";
  std::ofstream(good) << kHermes;
  ASSERT_TRUE(set_chat_template(model, good).ok());
  EXPECT_EQ(model.chat_template, std::string(kHermes));
  EXPECT_EQ(model.chat_template_source, good);
}

}  // namespace
}  // namespace strata::coordinator
