// Shared by the CLI verbs that talk to a server over gRPC (`strata
// generate`, `chat`, `status`, `tokenize --server`): the --server and
// --deadline-ms flags, the sampling flags (named as `strata run` names
// them), and the one-line error every such verb prints before exiting 1:
//
//   strata: 127.0.0.1:50051: UNAVAILABLE: worker w1 (127.0.0.1:50062) died
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "strata/client.h"

namespace strata::cli {

struct ServerFlags {
  std::string server;   // HOST:PORT
  int deadline_ms = 0;  // 0: none
};

// --server HOST:PORT (required when `required`) and --deadline-ms.
CLI::Option* add_server_flags(CLI::App* cmd, ServerFlags& flags,
                              bool required = true);

// A client of flags.server, or nullptr after printing why.
std::unique_ptr<Client> connect_or_report(const ServerFlags& flags);

// Prints "strata: SERVER: CODE: message" on stderr; returns 1.
int report_error(const std::string& server, const absl::Status& status);

// The request fields of `strata generate` and `strata chat`.
struct GenerationFlags {
  std::string model;  // served model name; empty: the served one
  int n_predict = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int repeat_last_n = 64;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// -n, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --presence-penalty, --frequency-penalty, --repeat-last-n, --seed, --stop,
// --ignore-eos, --model.
void add_generation_flags(CLI::App* cmd, GenerationFlags& flags);

// The request the flags ask for (input left empty). Flags not given on the
// command line are left unset, so the server's defaults apply; `cmd` is the
// sub-command the flags were added to.
GenerateOptions generation_options(const GenerationFlags& flags,
                                   const ServerFlags& server,
                                   const CLI::App& cmd);

}  // namespace strata::cli
