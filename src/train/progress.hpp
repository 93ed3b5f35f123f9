#pragma once
// Training progress for a person watching: one updating line on a terminal (step/total, bar,
// loss, tokens/s, ETA), plain lines every few steps otherwise (logs, CI, pipes).
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata::train {

struct ProgressLine {
  std::int64_t step = 0, total = 0;  // total: the schedule's steps (train.steps)
  std::int64_t stop = 0;             // the step this invocation ends after (--stop-after), or total
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  double eta_s = 0;
};

class Progress {
 public:
  // on_terminal: redraw one line on `out` (stderr); otherwise print every `every` steps to stdout.
  Progress(bool on_terminal, std::int64_t every);
  ~Progress();

  void update(const ProgressLine& p);
  // A line that stays (validation results, checkpoints), printed above the bar.
  void note(const std::string& text);
  void finish();  // ends the bar's line

  static bool stderr_is_terminal();

 private:
  bool terminal_;
  std::int64_t every_;
  bool bar_drawn_ = false;
  std::string last_bar_;
};

}  // namespace strata::train
