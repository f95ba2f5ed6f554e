// `strata generate --server HOST:PORT (-p PROMPT | --prompt-ids IDS) [-n N]
// [sampling flags] [--chat] [--json]`: `strata run` against a server. It
// prints what `strata run` prints: the text as it streams in, then prefill
// and decode tok/s on stderr; --json prints one object of the same shape
// instead (generation_report.h), its timings from the server's clock.
//
// Exit status: 0 done; 1 the server refused or failed (one line naming the
// server and the gRPC status); 2 usage.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "client/cli/commands.h"
#include "client/cli/prompt_ids.h"
#include "client/cli/generation_report.h"
#include "client/cli/remote.h"

namespace strata::cli {
namespace {

struct GenerateFlags {
  ServerFlags server;
  GenerationFlags generation;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  bool json = false;
};

GenerationReport make_report(const GenerateResult& r) {
  GenerationReport report;
  report.prompt_ids = r.prompt_ids;
  report.ids = r.ids;
  report.text = r.text;
  report.finish_reason = r.finish_reason;
  report.seed = r.seed;
  report.prompt_tokens = r.usage.prompt_tokens;
  report.generated_tokens = static_cast<int>(r.ids.size());
  report.prefill_s = r.timings.prefill_ms / 1e3;
  report.prefill_tok_s = r.timings.prefill_tok_s;
  report.decode_s = r.timings.decode_ms / 1e3;
  report.decode_tok_s = r.timings.decode_tok_s;
  // The server reports the rate; the steps are rate x time.
  report.decode_steps = static_cast<int>(
      std::lround(r.timings.decode_tok_s * report.decode_s));
  report.ttft_s = r.timings.ttft_ms / 1e3;
  report.queue_s = r.timings.queue_ms / 1e3;
  return report;
}

int run_generate(const GenerateFlags& f, const CLI::App& cmd) {
  const bool has_prompt = cmd.count("--prompt") > 0;
  if (has_prompt == !f.prompt_ids.empty()) {
    std::fprintf(stderr,
                 "strata generate: give exactly one of -p and --prompt-ids\n");
    return 2;
  }
  // `strata run` tokenizes any bytes; the server, UTF-8 text (or ids).
  if (has_prompt && !utf8_or_report("generate", "-p", f.prompt)) return 2;
  if (!generation_flags_utf8_or_report("generate", f.generation)) return 2;
  GenerateOptions request = generation_options(f.generation, f.server, cmd);
  if (!f.prompt_ids.empty()) {
    if (f.chat) {
      std::fprintf(stderr, "strata generate: --chat needs -p, not ids\n");
      return 2;
    }
    std::optional<std::vector<int32_t>> ids = parse_prompt_ids(f.prompt_ids);
    if (!ids) {
      std::fprintf(stderr, "strata generate: --prompt-ids: not a list of token ids "
                           "(integers from 0 to 2147483647)\n");
      return 2;
    }
    request.prompt_ids = std::move(*ids);
  } else if (f.chat) {
    request.messages = std::vector<ChatMessage>{{"user", f.prompt}};
  } else {
    request.prompt = f.prompt;
  }

  std::unique_ptr<Client> client = connect_or_report(f.server);
  if (client == nullptr) return 1;
  bool streamed = false;  // text went out: a failure ends its line first
  DeltaCallback stream;
  if (!f.json) {
    stream = [&streamed](const Delta& delta) {
      std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
      std::fflush(stdout);
      streamed = streamed || !delta.text.empty();
      return true;
    };
  }
  auto result = client->generate_stream(request, stream);
  if (!f.json && (result.ok() || streamed)) {
    std::printf("\n");
    std::fflush(stdout);  // the text before the timings, even when piped
  }
  if (!result.ok()) return report_error(f.server.server, result.status());
  const GenerationReport report = make_report(*result);
  if (f.json) {
    std::cout << generation_json(report) << std::flush;
  } else {
    std::fputs(generation_summary(report).c_str(), stderr);
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text from a prompt on a strata server (gRPC)");
  add_server_flags(cmd, f->server);
  cmd->add_option("-p,--prompt", f->prompt, "prompt text");
  cmd->add_option("--prompt-ids", f->prompt_ids,
                  "prompt as token ids, e.g. \"1 403 407\" (instead of -p)");
  add_generation_flags(cmd, f->generation);
  cmd->add_flag("--chat", f->chat,
                "send -p as one user turn, through the model's chat template");
  cmd->add_flag("--json", f->json, "print one JSON object at the end");
  cmd->callback([f, cmd, &exit_code] { exit_code = run_generate(*f, *cmd); });
}

}  // namespace strata::cli
