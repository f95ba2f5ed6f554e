// Sub-commands of the `strata` command line. Each registers itself on the
// CLI11 app; its callback sets the process exit status through `exit_code`
// (0 success, 1 the input was refused or failed, 2 usage error).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "absl/status/status.h"

namespace strata::cli {

// Prints "strata COMMAND: WHAT: MESSAGE" to stderr and returns 1 (the input
// was refused or failed). WHAT is left out when the message already starts
// with it (the GGUF reader's errors name the file themselves).
inline int report_failure(std::string_view command, const std::string& what,
                          const absl::Status& status) {
  const std::string message(status.message());
  const bool named = !what.empty() && message.rfind(what + ":", 0) == 0;
  if (what.empty() || named) {
    std::fprintf(stderr, "strata %.*s: %s\n", static_cast<int>(command.size()),
                 command.data(), message.c_str());
  } else {
    std::fprintf(stderr, "strata %.*s: %s: %s\n", static_cast<int>(command.size()),
                 command.data(), what.c_str(), message.c_str());
  }
  return 1;
}

void add_certs_command(CLI::App& app, int& exit_code);
void add_chat_command(CLI::App& app, int& exit_code);
void add_chat_template_command(CLI::App& app, int& exit_code);
void add_embed_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_hardware_command(CLI::App& app, int& exit_code);
void add_inspect_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_quantize_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_speed_command(CLI::App& app, int& exit_code);
void add_status_command(CLI::App& app, int& exit_code);
void add_synth_command(CLI::App& app, int& exit_code);
void add_tokenize_commands(CLI::App& app, int& exit_code);

}  // namespace strata::cli
