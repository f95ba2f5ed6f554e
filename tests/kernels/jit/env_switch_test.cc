// kernels::env_switch: every spelling of on and off, unset and empty as
// unset, and an unknown value reported and read as unset; the switches
// built on it (STRATA_JIT, STRATA_NO_TUNE) read the same spellings.
#include "kernels/cpu/env_switch.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/jit/tuner.h"

namespace strata::kernels {
namespace {

constexpr const char* kName = "STRATA_TEST_SWITCH";

std::optional<bool> read_as(const char* value) {
  ::setenv(kName, value, 1);
  const std::optional<bool> v = env_switch(kName);
  ::unsetenv(kName);
  return v;
}

TEST(EnvSwitch, ReadsEveryOnAndOffSpelling) {
  for (const char* on : {"1", "true", "yes", "on", "TRUE", "Yes", "On"}) {
    EXPECT_EQ(read_as(on), std::optional<bool>(true)) << on;
  }
  for (const char* off : {"0", "false", "no", "off", "FALSE", "No", "OFF"}) {
    EXPECT_EQ(read_as(off), std::optional<bool>(false)) << off;
  }
}

TEST(EnvSwitch, UnsetAndEmptyAreUnset) {
  ::unsetenv(kName);
  EXPECT_EQ(env_switch(kName), std::nullopt);
  EXPECT_EQ(read_as(""), std::nullopt);
}

TEST(EnvSwitch, UnknownValueIsReportedAndReadAsUnset) {
  for (const char* bad : {"2", "enable", "tru", " 1", "1 "}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(read_as(bad), std::nullopt) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string(kName) + "=" + bad), std::string::npos) << err;
    EXPECT_NE(err.find("expected 1/true/yes/on or 0/false/no/off"), std::string::npos) << err;
    // Read again: still unset, and not reported twice.
    testing::internal::CaptureStderr();
    EXPECT_EQ(read_as(bad), std::nullopt) << bad;
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << bad;
  }
}

// The engine's switches take the same spellings (they used to differ:
// STRATA_JIT only "0", STRATA_NO_TUNE anything but "" and "0").
// Sets a variable for one scope and puts back what was there.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(EnvSwitch, EngineSwitchesShareTheSpellings) {
  const ScopedEnv jit("STRATA_JIT"), no_tune("STRATA_NO_TUNE");
  ::setenv("STRATA_JIT", "off", 1);
  EXPECT_TRUE(jit_disabled_by_env());
  ::setenv("STRATA_JIT", "1", 1);
  EXPECT_FALSE(jit_disabled_by_env());
  ::unsetenv("STRATA_JIT");
  EXPECT_FALSE(jit_disabled_by_env());
  ::setenv("STRATA_NO_TUNE", "yes", 1);
  EXPECT_TRUE(jit::tuning_disabled_by_env());
  ::setenv("STRATA_NO_TUNE", "false", 1);
  EXPECT_FALSE(jit::tuning_disabled_by_env());
  ::unsetenv("STRATA_NO_TUNE");
  EXPECT_FALSE(jit::tuning_disabled_by_env());
}

}  // namespace
}  // namespace strata::kernels
