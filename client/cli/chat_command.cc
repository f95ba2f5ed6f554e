// `strata chat --server HOST:PORT [--system TEXT] [sampling flags]`: an
// interactive chat with a strata server. Reads one user turn per line from
// stdin, sends the whole conversation so far (the server applies the
// model's chat template), streams the reply, and keeps it in the history.
// An empty line is skipped, and so is one that is not UTF-8 or that the
// server refuses as a message (INVALID_ARGUMENT naming that message, say
// text that spells a control token), saying so; "/exit" or end of input
// ends the chat.
//
// Exit status: 0 the chat ended; 1 the server refused or failed (one line
// naming the server and the gRPC status), or stdin could not be read; 2
// usage.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/commands.h"
#include "client/cli/remote.h"

namespace strata::cli {
namespace {

struct ChatFlags {
  ServerFlags server;
  GenerationFlags generation;
  std::string system;
};

int run_chat(const ChatFlags& f, const CLI::App& cmd) {
  if (!utf8_or_report("chat", "--system", f.system)) return 2;
  if (!generation_flags_utf8_or_report("chat", f.generation)) return 2;
  std::unique_ptr<Client> client = connect_or_report(f.server);
  if (client == nullptr) return 1;
  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::vector<ChatMessage> history;
  if (!f.system.empty()) history.push_back({"system", f.system});
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    // A line the server could not take is skipped, the chat goes on.
    if (!utf8_or_report("chat", "line skipped", line)) continue;
    history.push_back({"user", line});
    GenerateOptions request = generation_options(f.generation, f.server, cmd);
    request.messages = history;
    bool streamed = false;
    auto reply = client->generate_stream(request, [&](const Delta& delta) {
      std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
      std::fflush(stdout);
      streamed = true;
      return true;
    });
    if (reply.ok() || streamed) std::printf("\n");  // ends the reply's line
    std::fflush(stdout);
    // The server refused the new line itself (say, it spells a control
    // token): that turn is dropped and reported, the chat goes on.
    const std::string own = "messages[" + std::to_string(history.size() - 1) + "]";
    if (!reply.ok() && !streamed && reply.status().code() == absl::StatusCode::kInvalidArgument &&
        reply.status().message().find(own) != std::string_view::npos) {
      history.pop_back();
      std::fprintf(stderr, "strata chat: line skipped: %s\n",
                   std::string(reply.status().message()).c_str());
      continue;
    }
    if (!reply.ok()) return report_error(f.server.server, reply.status());
    history.push_back({"assistant", reply->text});
  }
  if (std::ferror(stdin)) {  // a read error is not the end of the chat
    std::fprintf(stderr, "strata chat: stdin: cannot read: %s\n", std::strerror(errno));
    return 1;
  }
  if (interactive) std::printf("\n");
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Chat with a strata server: one user turn per line of stdin, "
              "/exit or end of input to end");
  add_server_flags(cmd, f->server);
  cmd->add_option("--system", f->system, "system message opening the chat");
  add_generation_flags(cmd, f->generation);
  cmd->callback([f, cmd, &exit_code] { exit_code = run_chat(*f, *cmd); });
}

}  // namespace strata::cli
