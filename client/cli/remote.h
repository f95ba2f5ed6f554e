// Shared by the CLI verbs that talk to a server over gRPC (`strata
// generate`, `chat`, `status`, `tokenize --server`): the --server,
// --deadline-ms, --timeout and --api-key flags, the sampling flags (named as `strata run` names
// them), and the one-line error every such verb prints before exiting 1:
//
//   strata: 127.0.0.1:50051: UNAVAILABLE: worker w1 (127.0.0.1:50062) died
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/sampling_flags.h"
#include "strata/client.h"

namespace strata::cli {

struct ServerFlags {
  std::string server;       // HOST:PORT
  int deadline_ms = 0;      // 0: the client's defaults (or --timeout)
  double timeout_s = -1;    // < 0: the defaults (generate 600 s, others 30 s); 0: none
  std::string api_key;      // --api-key, else $STRATA_API_KEY; "": none
};

// --server HOST:PORT (required when `required`), --deadline-ms, --timeout
// and --api-key.
CLI::Option* add_server_flags(CLI::App* cmd, ServerFlags& flags,
                              bool required = true);

// A client of flags.server, or nullptr after printing why.
std::unique_ptr<Client> connect_or_report(const ServerFlags& flags);

// True when `text` is UTF-8; else prints "strata COMMAND: WHAT: not valid
// UTF-8 at byte N (...)" and returns false. The server takes UTF-8 text (a
// proto3 string): other bytes would fail to serialize, with no message.
bool utf8_or_report(const char* command, const char* what, const std::string& text);

// Prints "strata: SERVER: CODE: message" on stderr; returns 1.
int report_error(const std::string& server, const absl::Status& status);

// The request fields of `strata generate` and `strata chat`.
struct GenerationFlags {
  std::string model;  // served model name; empty: the served one
  SamplingFlags sampling;
};

// --model and the sampling flags (sampling_flags.h).
void add_generation_flags(CLI::App* cmd, GenerationFlags& flags);

// False, after one line on stderr naming the flag and the byte, when
// --model or a --stop is not UTF-8 (proto3 strings must be; gRPC would fail
// the call with an empty INTERNAL error).
bool generation_flags_utf8_or_report(const char* command, const GenerationFlags& flags);

// The request the flags ask for (input left empty). Flags not given on the
// command line are left unset, so the server's defaults apply; `cmd` is the
// sub-command the flags were added to.
GenerateOptions generation_options(const GenerationFlags& flags,
                                   const ServerFlags& server,
                                   const CLI::App& cmd);

}  // namespace strata::cli
