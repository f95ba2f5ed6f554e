// `strata chat-template`: a conversation rendered with the model's chat
// template (tokenizer.chat_template), as the prompt the model would see.
//
//   strata chat-template -m MODEL --messages FILE.json
//                        [--no-generation-prompt] [--chat-template FILE]
//     FILE.json is [{"role": "user", "content": "hi"}, ...]. The prompt is
//     printed as is (no newline added). BOS/EOS are the text of the model's
//     BOS/EOS tokens. --chat-template FILE uses the template text in FILE
//     instead of the model's (for a model without one, or with a template
//     of a family that is not recognised).
//
// Exit status: 0 done; 1 the model, the messages or the template were
// refused, or the template raised (its message is printed); 2 usage.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/chat_prompt.h"
#include "client/cli/commands.h"
#include "client/cli/text_input.h"
#include "model/chat_template/chat_template.h"
#include "model/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace strata::cli {
namespace {

struct ChatTemplateOptions {
  std::string model;
  std::string messages_file;
  std::string template_file;
  bool no_generation_prompt = false;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "strata chat-template: %s\n", message.c_str());
}

// The messages in `text`; false (with a message printed) when malformed.
bool parse_messages(const std::string& path, const std::string& text,
                    std::vector<chat_template::Message>& out) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": not valid JSON: " + e.what());
    return false;
  }
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
    for (const char* field : {"role", "content"}) {
      if (!m.contains(field)) {
        fail(where + " has no \"" + field + "\"");
        return false;
      }
      if (!m.at(field).is_string()) {
        fail(where + ": \"" + field + "\" is not a string");
        return false;
      }
    }
    out.push_back({m.at("role").get<std::string>(),
                   m.at("content").get<std::string>()});
  }
  return true;
}

int run_chat_template(const ChatTemplateOptions& options) {
  absl::StatusOr<std::string> messages_text = read_text_file(options.messages_file);
  if (!messages_text.ok()) {
    fail(std::string(messages_text.status().message()));
    return 1;
  }
  std::vector<chat_template::Message> messages;
  if (!parse_messages(options.messages_file, *messages_text, messages)) {
    return 1;
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
  auto prompt = render_chat_prompt((*model)->first(), **tok, messages,
                                   options.template_file,
                                   !options.no_generation_prompt);
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
                  "JSON file: [{\"role\": ..., \"content\": ...}, ...]")
      ->required();
  cmd->add_flag("--no-generation-prompt", options->no_generation_prompt,
                "do not open an assistant turn at the end");
  cmd->add_option("--chat-template", options->template_file,
                  "use the template text in FILE instead of the model's");
  cmd->callback([options, &exit_code] {
    exit_code = run_chat_template(*options);
  });
}

}  // namespace strata::cli
