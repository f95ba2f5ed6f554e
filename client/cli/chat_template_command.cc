// `strata chat-template`: a conversation rendered with the model's chat
// template (tokenizer.chat_template, or its tool_use variant when tools are
// given and the model has one), as the prompt the model would see.
//
//   strata chat-template -m MODEL --messages FILE.json [--tools FILE.json]
//                        [--kwargs JSON] [--no-generation-prompt]
//                        [--chat-template FILE]
//     --messages: the OpenAI messages array, [{"role": "user", "content":
//     "hi"}, ...], with content a string, a list of parts or null, and
//     name, tool_call_id, tool_calls where needed. --tools: the OpenAI
//     tools array. --kwargs: a JSON object of extra template variables
//     (e.g. '{"enable_thinking": false}'). The prompt is printed as is (no
//     newline added). BOS/EOS are the text of the model's BOS/EOS tokens.
//     --chat-template FILE uses the Jinja template in FILE instead of the
//     model's.
//
// Exit status: 0 done; 1 the model, the messages or the template were
// refused, or the template raised (its message is printed); 2 usage.
#include <cstdio>
#include <memory>
#include <string>

#include "client/cli/chat_prompt.h"
#include "client/cli/commands.h"
#include "client/cli/text_input.h"
#include "model/chat_template/model_chat.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;

struct ChatTemplateOptions {
  std::string model;
  std::string messages_file;
  std::string tools_file;
  std::string kwargs;
  std::string template_file;
  bool no_generation_prompt = false;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "strata chat-template: %s\n", message.c_str());
}

// The JSON in `text`, or a message naming `what`.
bool parse_json(const std::string& what, const std::string& text, Json& out) {
  out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    fail(what + ": not valid JSON");
    return false;
  }
  return true;
}

// The messages must be an array of objects with a string role and a
// content that is a string, an array (of parts) or null.
bool check_messages(const std::string& path, const Json& j) {
  if (!j.is_array()) {
    fail(path + ": expected an array of {\"role\", \"content\"} objects");
    return false;
  }
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    const std::string where = path + ": message " + std::to_string(i);
    if (!m.is_object()) {
      fail(where + " is not an object");
      return false;
    }
    if (!m.contains("role")) {
      fail(where + " has no \"role\"");
      return false;
    }
    if (!m["role"].is_string()) {
      fail(where + ": \"role\" is not a string");
      return false;
    }
    if (!m.contains("content") && !m.contains("tool_calls")) {
      fail(where + " has no \"content\"");
      return false;
    }
    if (m.contains("content") && !m["content"].is_string() && !m["content"].is_array() &&
        !m["content"].is_null()) {
      fail(where + ": \"content\" is not a string, an array of parts or null");
      return false;
    }
  }
  return true;
}

int run_chat_template(const ChatTemplateOptions& options) {
  chat_template::ChatRequest request;
  request.add_generation_prompt = !options.no_generation_prompt;
  absl::StatusOr<std::string> messages_text = read_text_file(options.messages_file);
  if (!messages_text.ok()) {
    fail(std::string(messages_text.status().message()));
    return 1;
  }
  if (!parse_json(options.messages_file, *messages_text, request.messages) ||
      !check_messages(options.messages_file, request.messages)) {
    return 1;
  }
  if (!options.tools_file.empty()) {
    absl::StatusOr<std::string> tools_text = read_text_file(options.tools_file);
    if (!tools_text.ok()) {
      fail(std::string(tools_text.status().message()));
      return 1;
    }
    if (!parse_json(options.tools_file, *tools_text, request.tools)) return 1;
    if (!request.tools.is_array()) {
      fail(options.tools_file + ": expected the OpenAI tools array");
      return 1;
    }
  }
  if (!options.kwargs.empty()) {
    if (!parse_json("--kwargs", options.kwargs, request.extra)) return 1;
    if (!request.extra.is_object()) {
      fail("--kwargs: expected a JSON object");
      return 1;
    }
  }
  auto model = gguf::GgufModel::open(options.model);
  if (!model.ok()) {  // the reader's message names the file
    fail(std::string(model.status().message()));
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf((*model)->first());
  if (!tok.ok()) {
    fail(options.model + ": " + std::string(tok.status().message()));
    return 1;
  }
  auto prompt = render_chat_prompt((*model)->first(), **tok, request, options.template_file);
  if (!prompt.ok()) {
    fail(options.model + ": " + std::string(prompt.status().message()));
    return 1;
  }
  std::fwrite(prompt->text.data(), 1, prompt->text.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

void add_chat_template_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ChatTemplateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template", "render a conversation with the model's chat template");
  cmd->add_option("-m,--model", options->model, "GGUF model file")
      ->required();
  cmd->add_option("--messages", options->messages_file,
                  "JSON file: the OpenAI messages array [{\"role\": ..., \"content\": ...}, ...]")
      ->required();
  cmd->add_option("--tools", options->tools_file, "JSON file: the OpenAI tools array");
  cmd->add_option("--kwargs", options->kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "do not open an assistant turn at the end");
  cmd->add_option("--chat-template", options->template_file,
                  "use the Jinja template in FILE instead of the model's");
  cmd->callback([options, &exit_code] {
    exit_code = run_chat_template(*options);
  });
}

}  // namespace strata::cli
