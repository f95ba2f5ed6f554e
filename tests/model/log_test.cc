// Logging (model/log.h): the JSON-lines format parses line by line and
// carries time, level, logger and message, escaped; bad formats and levels
// are refused naming the flag or the variable.
#include "model/log.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace strata {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(JsonLog, OneObjectALineWithEscapedFields) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  spdlog::logger logger("strata-worker", sink);
  logger.set_formatter(make_json_log_formatter());
  logger.set_level(spdlog::level::trace);
  logger.info("loaded {} blocks", 3);
  logger.warn("quote \" backslash \\ newline\nand tab\t");
  logger.error("not UTF-8: \xff end");
  logger.debug("debug line");

  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  const std::vector<std::string> levels = {"info", "warning", "error", "debug"};
  const std::vector<std::string> messages = {
      "loaded 3 blocks", "quote \" backslash \\ newline\nand tab\t",
      "not UTF-8: \xef\xbf\xbd end", "debug line"};
  const std::regex time_re(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)");
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    ASSERT_TRUE(j.is_object()) << lines[i];
    EXPECT_EQ(j.size(), 4u) << lines[i];
    EXPECT_EQ(j.at("level"), levels[i]);
    EXPECT_EQ(j.at("logger"), "strata-worker");
    EXPECT_EQ(j.at("message"), messages[i]);
    const std::string time = j.at("time");
    EXPECT_TRUE(std::regex_match(time, time_re)) << time;
  }
}

class InitLogging : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("STRATA_LOG_FORMAT");
    unsetenv("STRATA_LOG_LEVEL");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(InitLogging, RefusesAnUnknownFormatNamingTheFlagOrVariable) {
  absl::Status st = init_logging("test", "", "xml");
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_EQ(st.message(), "--log-format: 'xml' is not a format (text|json)");

  setenv("STRATA_LOG_FORMAT", "yaml", 1);
  st = init_logging("test", "", "");
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_EQ(st.message(),
            "STRATA_LOG_FORMAT: 'yaml' is not a format (text|json)");
  // The flag wins over the variable.
  EXPECT_TRUE(init_logging("test", "", "json").ok());
}

TEST_F(InitLogging, RefusesAnUnknownLevelNamingTheFlagOrVariable) {
  absl::Status st = init_logging("test", "loud", "");
  EXPECT_EQ(st.message(),
            "--log-level: 'loud' is not a level "
            "(trace|debug|info|warn|error|critical|off)");
  setenv("STRATA_LOG_LEVEL", "verbose", 1);
  st = init_logging("test", "", "");
  EXPECT_EQ(st.message(),
            "STRATA_LOG_LEVEL: 'verbose' is not a level "
            "(trace|debug|info|warn|error|critical|off)");
}

TEST_F(InitLogging, FormatAndLevelFromTheEnvironment) {
  setenv("STRATA_LOG_FORMAT", "json", 1);
  setenv("STRATA_LOG_LEVEL", "debug", 1);
  ASSERT_TRUE(init_logging("test", "", "").ok());
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  EXPECT_TRUE(is_log_format("text"));
  EXPECT_TRUE(is_log_format("json"));
  EXPECT_FALSE(is_log_format("JSON"));
}

}  // namespace
}  // namespace strata
