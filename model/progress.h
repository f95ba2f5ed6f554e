// Progress of a long phase (a model load's weight repack, the kernel
// tuner's first run, the bandwidth probe), shown as an operator expects:
//
//   on a terminal (stderr is a tty): one line rewritten in place,
//     "\rrepacking weights  12/30  40%  3.1 s\x1b[K", ended by "\n";
//   otherwise (a log file, a container): one log line when a phase starts
//     and one when it ends, with its duration, and no carriage returns:
//       repacking weights: started (30 steps)
//       repacking weights: done, 30 steps in 7.8 s
//
// A Progress is passed in to the code that does the work (no global); code
// given none shows nothing. ProgressOutput is the seam: StderrProgress
// (below) writes to stderr and spdlog; tests give a fake that records.
//
// Threads: begin/advance/end may be called from any thread (a mutex); a
// phase is begun and ended by one owner, advanced by its workers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace strata {

// Where progress goes.
class ProgressOutput {
 public:
  virtual ~ProgressOutput() = default;
  // True: render in place (write()); false: log lines (log()).
  virtual bool terminal() const = 0;
  // Raw text for a terminal ("\r...", "\n").
  virtual void write(std::string_view text) = 0;
  // One log line (no newline).
  virtual void log(std::string_view line) = 0;
};

// stderr: terminal() when isatty(2); log() through spdlog's default logger
// at info.
class StderrProgress final : public ProgressOutput {
 public:
  StderrProgress();
  bool terminal() const override { return terminal_; }
  void write(std::string_view text) override;
  void log(std::string_view line) override;

 private:
  bool terminal_;
};

class Progress {
 public:
  // Seconds since some fixed point (monotonic); tests pass a fake.
  using Clock = std::function<double()>;

  // `out` must outlive the Progress. `clock` defaults to steady_clock.
  explicit Progress(ProgressOutput& out, Clock clock = {});

  // Starts `phase` with `total` steps (0: unknown, no percentage). A phase
  // still open is ended first.
  void begin(std::string_view phase, int64_t total);
  // `n` more steps done (clamped to the total).
  void advance(int64_t n = 1);
  // Ends the phase: the final line (terminal) or the "done" log line.
  void end();

  // The in-place line for `done` of `total` after `seconds` (no "\r"):
  // "PHASE  DONE/TOTAL  PCT%  S.s s".
  static std::string render(std::string_view phase, int64_t done, int64_t total,
                            double seconds);

 private:
  void draw_locked(bool force);
  void end_locked();

  ProgressOutput& out_;
  Clock clock_;
  std::mutex mu_;
  std::string phase_;  // "" when no phase is open
  int64_t total_ = 0;
  int64_t done_ = 0;
  double started_ = 0;    // clock() at begin
  double drawn_at_ = -1;  // clock() at the last terminal draw
  int drawn_percent_ = -1;
};

// Begins a phase on `progress` (may be null: nothing) and ends it when the
// scope ends.
class ProgressPhase {
 public:
  ProgressPhase(Progress* progress, std::string_view phase, int64_t total)
      : progress_(progress) {
    if (progress_ != nullptr) progress_->begin(phase, total);
  }
  ~ProgressPhase() {
    if (progress_ != nullptr) progress_->end();
  }
  void advance(int64_t n = 1) {
    if (progress_ != nullptr) progress_->advance(n);
  }
  ProgressPhase(const ProgressPhase&) = delete;
  ProgressPhase& operator=(const ProgressPhase&) = delete;

 private:
  Progress* progress_;
};

}  // namespace strata
