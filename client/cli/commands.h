// Sub-commands of the `strata` command line. Each registers itself on the
// CLI11 app; its callback sets the process exit status through `exit_code`
// (0 success, 1 the input was refused or failed, 2 usage error).
#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

void add_chat_command(CLI::App& app, int& exit_code);
void add_chat_template_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_hardware_command(CLI::App& app, int& exit_code);
void add_inspect_command(CLI::App& app, int& exit_code);
void add_quantize_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_speed_command(CLI::App& app, int& exit_code);
void add_status_command(CLI::App& app, int& exit_code);
void add_tokenize_commands(CLI::App& app, int& exit_code);

}  // namespace strata::cli
