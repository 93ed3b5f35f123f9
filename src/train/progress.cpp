#include "train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace strata::train {

Progress::Progress(bool on_terminal, std::int64_t every) : terminal_(on_terminal), every_(every) {}

Progress::~Progress() { finish(); }

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

namespace {
// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<long long>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// The schedule's total stays the denominator (it fixes the learning rate); a planned stop
// before it is said beside it, and the ETA counts to it.
std::string stop_note(const ProgressLine& p) {
  return p.stop < p.total ? fmt::format(" (stopping after {})", p.stop) : std::string();
}
}  // namespace

void Progress::update(const ProgressLine& p) {
  if (terminal_) {
    constexpr int kWidth = 24;
    const double frac = p.total > 0 ? static_cast<double>(p.step) / static_cast<double>(p.total) : 1.0;
    const int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
    last_bar_ = fmt::format("step {}/{}{} [{}{}] loss {:.4f} | {:.0f} tok/s | ETA {}", p.step, p.total,
                            stop_note(p), std::string(filled, '#'), std::string(kWidth - filled, '.'), p.loss,
                            p.tokens_per_s, format_duration(p.eta_s));
    fmt::print(stderr, "\r\033[K{}", last_bar_);
    std::fflush(stderr);
    bar_drawn_ = true;
    return;
  }
  if (p.step == 1 || p.step % every_ == 0 || p.step == p.stop) {
    fmt::print("step {}/{}{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}\n", p.step, p.total,
               stop_note(p), p.loss, p.lr, p.grad_norm, p.tokens_per_s, format_duration(p.eta_s));
    std::fflush(stdout);
  }
}

void Progress::note(const std::string& text) {
  if (terminal_ && bar_drawn_) {
    fmt::print(stderr, "\r\033[K{}\n{}", text, last_bar_);
    std::fflush(stderr);
    return;
  }
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

void Progress::finish() {
  if (terminal_ && bar_drawn_) {
    fmt::print(stderr, "\n");
    std::fflush(stderr);
  }
  bar_drawn_ = false;
}

}  // namespace strata::train
