// Logging: spdlog's default logger (stderr), one format for every strata
// process:
//
//   2026-12-04 15:49:22.123 info  strata-coordinator: serving SmolLM2 on 2
//   workers
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

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace strata {

// The levels' names, for a flag's help:
// "trace|debug|info|warn|error|critical|off".
inline constexpr char kLogLevels[] = "trace|debug|info|warn|error|critical|off";

// Whether `name` is a level (as above; "warning" is taken for "warn").
bool is_log_level(std::string_view name);

// Names the default logger `program` and sets its pattern and level:
// `flag_level` when not empty, else $STRATA_LOG_LEVEL when set, else info.
// InvalidArgument naming --log-level or STRATA_LOG_LEVEL for an unknown
// level (the logger keeps info then).
absl::Status init_logging(std::string_view program,
                          std::string_view flag_level);

}  // namespace strata
