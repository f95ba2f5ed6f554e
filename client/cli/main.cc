// `strata`: the command line. Sub-commands live in *_command.cc.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "client/cli/commands.h"
#include "model/log.h"
#include "strata_version.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: serve and inspect LLMs from GGUF files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", strata::version_line("strata"));
  int exit_code = 0;
  // Logging of the commands that serve (spdlog): given before or after
  // the command's name (`strata serve M --log-level debug`).
  std::string log_level;
  app.add_option("--log-level", log_level,
                 std::string("log level: ") + strata::kLogLevels +
                     " (else STRATA_LOG_LEVEL, else info)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return strata::is_log_level(v) ? ""
                                           : "'" + v + "' is not a level (" +
                                                 strata::kLogLevels + ")";
          },
          "LEVEL"));
  std::string log_format;
  app.add_option("--log-format", log_format,
                 std::string("log lines: ") + strata::kLogFormats +
                     " (else STRATA_LOG_FORMAT, else text)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return strata::is_log_format(v) ? ""
                                            : "'" + v + "' is not a format (" +
                                                  strata::kLogFormats + ")";
          },
          "FORMAT"));
  app.fallthrough();
  app.parse_complete_callback([&log_level, &log_format] {
    if (absl::Status st = strata::init_logging("strata", log_level, log_format);
        !st.ok()) {
      throw CLI::ValidationError(std::string(st.message()));
    }
  });
  strata::cli::add_certs_command(app, exit_code);
  strata::cli::add_chat_command(app, exit_code);
  strata::cli::add_chat_template_command(app, exit_code);
  strata::cli::add_embed_command(app, exit_code);
  strata::cli::add_generate_command(app, exit_code);
  strata::cli::add_hardware_command(app, exit_code);
  strata::cli::add_inspect_command(app, exit_code);
  strata::cli::add_plan_command(app, exit_code);
  strata::cli::add_quantize_command(app, exit_code);
  strata::cli::add_run_command(app, exit_code);
  strata::cli::add_serve_command(app, exit_code);
  strata::cli::add_speed_command(app, exit_code);
  strata::cli::add_status_command(app, exit_code);
  strata::cli::add_synth_command(app, exit_code);
  strata::cli::add_tokenize_commands(app, exit_code);
  // A first word that names no command gets its own message (CLI11 would
  // say only that a subcommand is required).
  bool known = argc < 2 || argv[1][0] == '-';
  if (!known) {
    try {
      app.get_subcommand(std::string(argv[1]));
      known = true;
    } catch (const CLI::OptionNotFound&) {
    }
  }
  if (!known) {
    std::string names;
    for (const CLI::App* sub :
         app.get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    std::fprintf(
        stderr,
        "strata: unknown command '%s' (commands: %s; see strata --help)\n",
        argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
