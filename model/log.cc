#include "model/log.h"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
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

// "2026-12-04T15:49:22.123Z": UTC, milliseconds.
std::string utc_time(spdlog::log_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      t.time_since_epoch())
                      .count();
  const time_t seconds = static_cast<time_t>(ms / 1000);
  struct tm tm;
  gmtime_r(&seconds, &tm);
  char buf[96];  // room for any int the format may print
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

// One JSON object a line: {"time","level","logger","message"}.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const spdlog::string_view_t level =
        spdlog::level::to_string_view(msg.level);
    const nlohmann::json line = {
        {"time", utc_time(msg.time)},
        {"level", std::string(level.data(), level.size())},
        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
        {"message", std::string(msg.payload.data(), msg.payload.size())}};
    std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += '\n';
    dest.append(text.data(), text.data() + text.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// A flag's value, else the environment variable's; `from` names which.
struct Setting {
  std::string_view from;
  std::string value;  // "": neither given
};

Setting flag_or_env(std::string_view flag, std::string_view flag_value,
                    const char* env_name) {
  if (!flag_value.empty()) return {flag, std::string(flag_value)};
  const char* env = std::getenv(env_name);
  if (env == nullptr || *env == '\0') return {flag, ""};
  return {env_name, env};
}

}  // namespace

bool is_log_format(std::string_view name) {
  return name == "text" || name == "json";
}

std::unique_ptr<spdlog::formatter> make_json_log_formatter() {
  return std::make_unique<JsonFormatter>();
}

bool is_log_level(std::string_view name) {
  return parse_level(name).has_value();
}

absl::Status init_logging(std::string_view program, std::string_view flag_level,
                          std::string_view flag_format) {
  // stderr, unbuffered lines (stdout carries "listening on HOST:PORT").
  auto logger = std::make_shared<spdlog::logger>(
      std::string(program), std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %-5l %n: %v");
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);

  const Setting format =
      flag_or_env("--log-format", flag_format, "STRATA_LOG_FORMAT");
  if (format.value == "json") {
    logger->set_formatter(make_json_log_formatter());
  } else if (!format.value.empty() && format.value != "text") {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(format.from), ": '", format.value,
                     "' is not a format (", kLogFormats, ")"));
  }
  const Setting level =
      flag_or_env("--log-level", flag_level, "STRATA_LOG_LEVEL");
  if (level.value.empty()) return absl::OkStatus();
  std::optional<spdlog::level::level_enum> parsed = parse_level(level.value);
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(level.from), ": '", level.value,
                     "' is not a level (", kLogLevels, ")"));
  }
  logger->set_level(*parsed);
  return absl::OkStatus();
}

}  // namespace strata
