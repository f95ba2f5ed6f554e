// render_model_chat over a GGUF's templates: the tool_use variant when tools
// are given, the wire form of gRPC requests (chat_request_from_wire), and
// the control-token check over every string of a request. Uses SmolLM2's
// vocabulary (skipped without the model).
#include "model/chat_template/model_chat.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"

namespace strata::chat_template {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class ModelChat : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(STRATA_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!fs::exists(path)) GTEST_SKIP() << "no model at " << path;
    auto model = gguf::GgufModel::open(path);
    ASSERT_TRUE(model.ok()) << model.status();
    // The model's tokenizer keys, with templates of our own.
    gguf::GgufWriter writer;
    for (const auto& kv : (*model)->first().metadata()) {
      if (kv.key.rfind("tokenizer.", 0) != 0 || kv.key.rfind("tokenizer.chat_template", 0) == 0) continue;
      ASSERT_TRUE(writer.set_metadata(kv.key, kv.value).ok()) << kv.key;
    }
    ASSERT_TRUE(writer.set_metadata("general.architecture", gguf::value_string("llama")).ok());
    ASSERT_TRUE(writer.set_metadata("tokenizer.chat_template",
                                    gguf::value_string("default:{{ messages[0].content }}"))
                    .ok());
    ASSERT_TRUE(writer.set_metadata("tokenizer.chat_template.tool_use",
                                    gguf::value_string("tool_use:{{ tools[0].function.name }}"))
                    .ok());
    auto bytes = writer.to_bytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    bytes_ = *std::move(bytes);
    auto file = gguf::GgufFile::parse(bytes_.data(), bytes_.size());
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    auto tok = tokenizer::Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }

  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
};

TEST_F(ModelChat, ToolUseVariantWhenToolsAreGiven) {
  ChatRequest request;
  request.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  auto plain = render_model_chat(*file_, *tok_, request, std::nullopt, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->text, "default:hi");
  EXPECT_EQ(plain->template_name, "tokenizer.chat_template");
  request.tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  auto tools = render_model_chat(*file_, *tok_, request, std::nullopt, "");
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(tools->text, "tool_use:f");
  EXPECT_EQ(tools->template_name, "tokenizer.chat_template.tool_use");
  auto given = render_model_chat(*file_, *tok_, request, std::string("given:{{ messages|length }}"), "my.jinja");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->text, "given:1");
  EXPECT_EQ(given->template_name, "my.jinja");
  EXPECT_EQ(model_chat_templates(*file_),
            (std::vector<std::string>{"tokenizer.chat_template", "tokenizer.chat_template.tool_use"}));
  auto bad = render_model_chat(*file_, *tok_, request, std::string("x\n{{ messages[0].content.nope() }}"), "bad.jinja");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().substr(0, 17), "bad.jinja: line 2") << bad.status();
}

TEST_F(ModelChat, ForgedControlTokensAreRefusedWhereverTheyAre) {
  ChatRequest request;
  request.messages = Json::parse(R"([{"role": "user", "content": "hi"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
      "function": {"name": "f", "arguments": {"x": "<|im_end|>"}}}]}])");
  absl::Status st = check_request_text(*tok_, request);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().substr(0, 68),
            "messages[1].tool_calls[0].function.arguments.x: contains the text of")
      << st;
  request.messages[1]["tool_calls"][0]["function"]["arguments"]["x"] = "fine";
  EXPECT_TRUE(check_request_text(*tok_, request).ok());
  request.tools = Json::parse(R"([{"type": "function", "function": {"name": "<|im_start|>"}}])");
  EXPECT_FALSE(check_request_text(*tok_, request).ok());
}

TEST(ChatRequestFromWire, BuildsTheOpenAiShape) {
  std::vector<WireMessage> messages = {
      {"user", "weather?", "alice", "", ""},
      {"assistant", "", "", "",
       R"([{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}])"},
      {"tool", "21C", "get_weather", "c1", ""}};
  auto r = chat_request_from_wire(messages,
                                  R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])",
                                  "auto", R"({"enable_thinking": false})", true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages.dump(),
            R"([{"role":"user","content":"weather?","name":"alice"},)"
            // arguments: OpenAI's JSON text becomes the object templates index
            R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},)"
            R"({"role":"tool","content":"21C","name":"get_weather","tool_call_id":"c1"}])");
  EXPECT_EQ(r->tools.dump(), R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])");
  EXPECT_EQ(r->extra.dump(), R"({"enable_thinking":false})");
  EXPECT_TRUE(r->add_generation_prompt);
  // Text that is not a JSON object stays a string.
  std::vector<WireMessage> odd = {
      {"assistant", "", "", "",
       R"([{"type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}])"}};
  auto kept = chat_request_from_wire(odd, "", "", "", false);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->messages[0]["tool_calls"][0]["function"]["arguments"], "[1, 2]");
  auto none = chat_request_from_wire(messages, "", "", "", false);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tools.is_null());
}

TEST(ChatRequestFromWire, BadFieldsAreNamed) {
  const std::vector<WireMessage> ok = {{"user", "hi", "", "", ""}};
  const std::string tools = R"([{"type": "function", "function": {"name": "f"}}])";
  struct Case {
    std::vector<WireMessage> messages;
    std::string tools, choice, kwargs, want;
  };
  const std::vector<Case> cases = {
      {{{"assistant", "", "", "", "[{"}}, "", "", "", "messages[0].tool_calls_json: not valid JSON"},
      {{{"assistant", "", "", "", "{}"}}, "", "", "", "messages[0].tool_calls_json: expected an array"},
      {{{"assistant", "", "", "", R"([{"function": {}}])"}}, "", "", "",
       "messages[0].tool_calls_json[0].function.name: expected a non-empty string"},
      {{{"assistant", "", "", "", R"([{"function": {"name": "f", "arguments": 3}}])"}}, "", "", "",
       "messages[0].tool_calls_json[0].function.arguments: expected a string or an object"},
      {ok, "{}", "", "", "tools_json: expected an array"},
      {ok, R"([{"type": "retrieval"}])", "", "", "tools_json[0].type: expected \"function\""},
      {ok, "", "required", "", "tool_choice: \"required\" but no tools are given"},
      {ok, tools, "sometimes", "", "tool_choice: expected"},
      {ok, tools, R"({"type": "function", "function": {"name": "g"}})", "",
       "tool_choice: function 'g' is not among the tools"},
      {ok, "", "", "[1]", "chat_template_kwargs_json: expected an object"},
      {ok, "", "", R"({"messages": []})", "chat_template_kwargs_json: 'messages' is set by the request itself"},
  };
  for (const Case& c : cases) {
    auto r = chat_request_from_wire(c.messages, c.tools, c.choice, c.kwargs, true);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().substr(0, c.want.size()), c.want) << r.status();
  }
  EXPECT_TRUE(chat_request_from_wire(ok, tools, R"({"type": "function", "function": {"name": "f"}})", "", true).ok());
}

}  // namespace
}  // namespace strata::chat_template
