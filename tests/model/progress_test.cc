// Progress (model/progress.h) on a fake output and a fake clock: the log
// lines of a non-terminal (count, order, durations, no carriage returns)
// and the in-place rendering of a terminal.
#include "model/progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace {

class FakeOutput final : public ProgressOutput {
 public:
  explicit FakeOutput(bool terminal) : terminal_(terminal) {}
  bool terminal() const override { return terminal_; }
  void write(std::string_view text) override { written += text; }
  void log(std::string_view line) override { lines.emplace_back(line); }

  std::string written;
  std::vector<std::string> lines;

 private:
  bool terminal_;
};

TEST(Progress, NotATerminalLogsOneLineAtStartAndOneAtEndOfEachPhase) {
  FakeOutput out(/*terminal=*/false);
  double now = 10.0;
  Progress p(out, [&] { return now; });
  p.begin("repacking weights", 30);
  for (int i = 0; i < 30; ++i) {
    now += 0.25;
    p.advance();
  }
  p.end();
  p.begin("tuning kernels", 0);
  now += 1.5;
  p.advance(4);
  p.begin("probing bandwidth", 3);  // ends the open phase first
  now += 0.5;
  p.advance(5);  // clamped to the total
  p.end();
  p.end();  // nothing open: nothing
  p.begin("loading", 1);
  p.advance();
  p.end();

  EXPECT_EQ(out.written, "");
  const std::vector<std::string> want = {
      "repacking weights: started (30 steps)",
      "repacking weights: done, 30 steps in 7.50 s",
      "tuning kernels: started",
      "tuning kernels: done, 4 steps in 1.50 s",
      "probing bandwidth: started (3 steps)",
      "probing bandwidth: done, 3 steps in 0.50 s",
      "loading: started (1 step)",
      "loading: done, 1 step in 0.00 s"};
  EXPECT_EQ(out.lines, want);
  for (const std::string& line : out.lines) {
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
  }
}

TEST(Progress, ATerminalRewritesOneLineInPlace) {
  FakeOutput out(/*terminal=*/true);
  double now = 0;
  Progress p(out, [&] { return now; });
  p.begin("repacking weights", 4);
  now = 1.0;
  p.advance();
  now = 1.01;  // within a tenth of a second of the last draw: not drawn
  p.advance();
  now = 2.5;
  p.advance(2);
  p.end();

  EXPECT_TRUE(out.lines.empty());
  EXPECT_EQ(out.written,
            "\rrepacking weights  0/4    0%  0.0 s\x1b[K"
            "\rrepacking weights  1/4   25%  1.0 s\x1b[K"
            "\rrepacking weights  4/4  100%  2.5 s\x1b[K"
            "\rrepacking weights  4/4  100%  2.5 s\x1b[K\n");
}

TEST(Progress, RenderWithoutATotalHasNoPercentage) {
  EXPECT_EQ(Progress::render("tuning kernels", 7, 0, 3.25),
            "tuning kernels  7  3.2 s");
  EXPECT_EQ(Progress::render("loading", 1, 3, 0.04),
            "loading  1/3   33%  0.0 s");
}

TEST(ProgressPhase, NullProgressShowsNothingAndAScopeEndsItsPhase) {
  {
    ProgressPhase none(nullptr, "nothing", 3);
    none.advance();
  }
  FakeOutput out(/*terminal=*/false);
  double now = 0;
  Progress p(out, [&] { return now; });
  {
    ProgressPhase phase(&p, "probing bandwidth", 2);
    now = 0.75;
    phase.advance(2);
  }
  const std::vector<std::string> want = {
      "probing bandwidth: started (2 steps)",
      "probing bandwidth: done, 2 steps in 0.75 s"};
  EXPECT_EQ(out.lines, want);
}

}  // namespace
}  // namespace strata
