#include "model/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace strata {

StderrProgress::StderrProgress() : terminal_(isatty(STDERR_FILENO) == 1) {}

void StderrProgress::write(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void StderrProgress::log(std::string_view line) { spdlog::info("{}", line); }

Progress::Progress(ProgressOutput& out, Clock clock)
    : out_(out), clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
}

std::string Progress::render(std::string_view phase, int64_t done,
                             int64_t total, double seconds) {
  if (total <= 0) {
    return absl::StrFormat("%s  %d  %.1f s", phase, done, seconds);
  }
  const int percent = static_cast<int>(done * 100 / total);
  return absl::StrFormat("%s  %d/%d  %3d%%  %.1f s", phase, done, total,
                         percent, seconds);
}

void Progress::begin(std::string_view phase, int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  end_locked();
  phase_ = std::string(phase);
  total_ = std::max<int64_t>(total, 0);
  done_ = 0;
  started_ = clock_();
  drawn_at_ = -1;
  drawn_percent_ = -1;
  if (out_.terminal()) {
    draw_locked(/*force=*/true);
  } else {
    out_.log(total_ > 0 ? absl::StrCat(phase_, ": started (", total_,
                                       total_ == 1 ? " step)" : " steps)")
                        : absl::StrCat(phase_, ": started"));
  }
}

void Progress::advance(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_.empty()) return;
  done_ += n;
  if (total_ > 0) done_ = std::min(done_, total_);
  if (out_.terminal()) draw_locked(/*force=*/false);
}

void Progress::draw_locked(bool force) {
  const double now = clock_();
  const int percent = total_ > 0 ? static_cast<int>(done_ * 100 / total_) : -1;
  // At most ten redraws a second, and one per percent.
  if (!force && (now - drawn_at_ < 0.1 || percent == drawn_percent_)) return;
  drawn_at_ = now;
  drawn_percent_ = percent;
  out_.write(absl::StrCat("\r", render(phase_, done_, total_, now - started_),
                          "\x1b[K"));
}

void Progress::end() {
  std::lock_guard<std::mutex> lock(mu_);
  end_locked();
}

void Progress::end_locked() {
  if (phase_.empty()) return;
  const double seconds = clock_() - started_;
  if (out_.terminal()) {
    out_.write(
        absl::StrCat("\r", render(phase_, done_, total_, seconds), "\x1b[K\n"));
  } else {
    out_.log(absl::StrFormat("%s: done, %d %s in %.2f s", phase_, done_,
                             done_ == 1 ? "step" : "steps", seconds));
  }
  phase_.clear();
}

}  // namespace strata
