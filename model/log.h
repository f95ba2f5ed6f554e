// Logging: spdlog's default logger (stderr), one format for every strata
// process:
//
//   2026-12-04 15:49:22.123 info  strata-coordinator: serving SmolLM2 on 2
//   workers
//
// or, with the JSON format (--log-format json, else STRATA_LOG_FORMAT=json),
// one JSON object a line, for a log collector (nlohmann's escaping; bytes
// that are not UTF-8 become U+FFFD):
//
//   {"time":"2026-12-04T15:49:22.123Z","level":"info",
//    "logger":"strata-coordinator","message":"serving SmolLM2 on 2 workers"}
//
// time is UTC, milliseconds; level is spdlog's name (trace, debug, info,
// warning, error, critical).
//
// The level comes from the process's --log-level flag, else the
// environment variable STRATA_LOG_LEVEL, else info. Levels: trace, debug,
// info, warn, error, critical, off. The coordinator logs one line per
// request at info (id, prompt and generated tokens, TTFT, finish reason or
// status: coordinator/step_scheduler.cc).
//
// Threads: init_logging once at the start of main(), before other threads;
// spdlog's loggers may then be used from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "spdlog/formatter.h"

namespace strata {

// The levels' names, for a flag's help:
// "trace|debug|info|warn|error|critical|off".
inline constexpr char kLogLevels[] = "trace|debug|info|warn|error|critical|off";

// The formats' names, for a flag's help.
inline constexpr char kLogFormats[] = "text|json";

// Whether `name` is a level (as above; "warning" is taken for "warn").
bool is_log_level(std::string_view name);

// Whether `name` is a format (as above).
bool is_log_format(std::string_view name);

// The JSON-lines formatter above (tests give it to their own logger).
std::unique_ptr<spdlog::formatter> make_json_log_formatter();

// Names the default logger `program` and sets its format and level: the
// format `flag_format` when not empty, else $STRATA_LOG_FORMAT when set,
// else text; the level `flag_level` when not empty, else $STRATA_LOG_LEVEL
// when set, else info. InvalidArgument naming the flag or the variable
// (--log-format, STRATA_LOG_FORMAT, --log-level, STRATA_LOG_LEVEL) for an
// unknown value (the logger keeps text / info then).
absl::Status init_logging(std::string_view program, std::string_view flag_level,
                          std::string_view flag_format = "");

}  // namespace strata
