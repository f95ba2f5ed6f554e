#include "client/cli/remote.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "model/tokenizer/unicode.h"

namespace strata::cli {

CLI::Option* add_server_flags(CLI::App* cmd, ServerFlags& flags,
                              bool required) {
  CLI::Option* server = cmd->add_option(
      "--server", flags.server,
      "server address HOST:PORT (strata serve listens on 127.0.0.1:50051)");
  if (required) server->required();
  server->check(CLI::Validator(
      [](std::string& address) -> std::string {
        const absl::Status st = Client::check_address(address);
        return st.ok() ? "" : std::string(st.message());
      },
      "HOST:PORT"));
  cmd->add_option("--deadline-ms", flags.deadline_ms,
                  "give up on the server after this many ms (0: never)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("--timeout", flags.timeout_s,
                  "give up on the server after this many seconds (default: 600 for a "
                  "generation, 30 for other calls; 0: never)")
      ->check(CLI::Range(0.0, 2e6));
  cmd->add_option("--api-key", flags.api_key,
                  "the server's API key, sent as a bearer token (default: $STRATA_API_KEY)");
  return server;
}

std::unique_ptr<Client> connect_or_report(const ServerFlags& flags) {
  ClientOptions options;
  options.deadline = std::chrono::milliseconds(flags.deadline_ms);
  if (flags.timeout_s >= 0) {
    const auto t = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000));
    options.generate_timeout = t;
    options.call_timeout = t;
  }
  options.api_key = flags.api_key;
  if (options.api_key.empty()) {
    if (const char* key = std::getenv("STRATA_API_KEY")) options.api_key = key;
  }
  auto client = Client::connect(flags.server, options);
  if (!client.ok()) {
    report_error(flags.server, client.status());
    return nullptr;
  }
  return *std::move(client);
}

bool utf8_or_report(const char* command, const char* what, const std::string& text) {
  const size_t bad = tokenizer::unicode::find_invalid_utf8(text);
  if (bad == std::string::npos) return true;
  std::fprintf(stderr, "strata %s: %s: not valid UTF-8 at byte %zu (the server takes UTF-8 text)\n",
               command, what, bad);
  return false;
}

int report_error(const std::string& server, const absl::Status& status) {
  std::fprintf(stderr, "strata: %s: %s: %s\n", server.c_str(),
               absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  return 1;
}

void add_generation_flags(CLI::App* cmd, GenerationFlags& f) {
  cmd->add_option("--model", f.model,
                  "served model name (strata status); default: the served one");
  // -n is the request's max_tokens: inference.proto takes 1 .. 2^20.
  add_sampling_flags(cmd, &f.sampling, 1, 1 << 20);
}

bool generation_flags_utf8_or_report(const char* command, const GenerationFlags& f) {
  if (!utf8_or_report(command, "--model", f.model)) return false;
  for (const std::string& stop : f.sampling.stop) {
    if (!utf8_or_report(command, "--stop", stop)) return false;
  }
  return true;
}

GenerateOptions generation_options(const GenerationFlags& flags,
                                   const ServerFlags& server,
                                   const CLI::App& cmd) {
  const SamplingFlags& f = flags.sampling;
  GenerateOptions o;
  o.model = flags.model;
  if (cmd.count("--n-predict") > 0) o.max_tokens = f.n_predict;
  SamplingOptions& s = o.sampling;
  s.temperature = f.temperature;
  s.top_k = f.top_k;
  if (cmd.count("--top-p") > 0) s.top_p = f.top_p;
  s.min_p = f.min_p;
  if (cmd.count("--repeat-penalty") > 0) s.repeat_penalty = f.repeat_penalty;
  s.presence_penalty = f.presence_penalty;
  s.frequency_penalty = f.frequency_penalty;
  if (cmd.count("--repeat-last-n") > 0) s.repeat_last_n = f.repeat_last_n;
  if (cmd.count("--seed") > 0) s.seed = f.seed;
  s.logit_bias = f.logit_bias;
  o.stop = f.stop;
  o.ignore_eos = f.ignore_eos;
  o.deadline = std::chrono::milliseconds(server.deadline_ms);
  return o;
}

}  // namespace strata::cli
