#include "model/log.h"

#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

std::optional<spdlog::level::level_enum> parse_level(std::string_view name) {
  using spdlog::level::level_enum;
  if (name == "trace") return level_enum::trace;
  if (name == "debug") return level_enum::debug;
  if (name == "info") return level_enum::info;
  if (name == "warn" || name == "warning") return level_enum::warn;
  if (name == "error") return level_enum::err;
  if (name == "critical") return level_enum::critical;
  if (name == "off") return level_enum::off;
  return std::nullopt;
}

}  // namespace

bool is_log_level(std::string_view name) {
  return parse_level(name).has_value();
}

absl::Status init_logging(std::string_view program,
                          std::string_view flag_level) {
  // stderr, unbuffered lines (stdout carries "listening on HOST:PORT").
  auto logger = std::make_shared<spdlog::logger>(
      std::string(program), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %-5l %n: %v");
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);

  std::string_view from = "--log-level";
  std::string_view value = flag_level;
  if (value.empty()) {
    const char* env = std::getenv("STRATA_LOG_LEVEL");
    if (env == nullptr || *env == '\0') return absl::OkStatus();
    from = "STRATA_LOG_LEVEL";
    value = env;
  }
  std::optional<spdlog::level::level_enum> level = parse_level(value);
  if (!level) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(from), ": '", std::string(value),
                     "' is not a level (", kLogLevels, ")"));
  }
  logger->set_level(*level);
  return absl::OkStatus();
}

}  // namespace strata
