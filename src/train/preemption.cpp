#include "train/preemption.hpp"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::train {

namespace {
// Lock-free, so setting it is async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

// Written by the handler itself (write(2) is async-signal-safe): a step can take long, and
// the user should know at once that the key press was heard and what a second one does.
// On a terminal it first clears the progress line.
const char* g_interrupt_note = "";
constexpr char kTerminalNote[] =
    "\r\033[Kstrata: interrupt: stopping after this step (with a checkpoint if --out is set); "
    "Ctrl-C again aborts at once\n";

extern "C" void on_preempt(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
  if (sig == SIGINT) {
    const ssize_t ignored = ::write(STDERR_FILENO, g_interrupt_note, std::strlen(g_interrupt_note));
    (void)ignored;  // nothing to do if stderr is gone
  }
}
}  // namespace

PreemptionHandler::PreemptionHandler() {
  g_signal.store(0);
  g_interrupt_note = ::isatty(STDERR_FILENO) == 1 ? kTerminalNote : kTerminalNote + std::strlen("\r\033[K");
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preempt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // SIGINT's handler runs once: SA_RESETHAND restores the default action on entry, so a
  // second Ctrl-C ends the process at once.
  struct sigaction sa_int = sa;
  sa_int.sa_flags |= SA_RESETHAND;
  // An ignored SIGINT stays ignored, as for any program: a shell ignores it for the commands
  // it starts in the background (`strata train ... &` in a script), so that a Ctrl-C meant for
  // the foreground does not stop them too.
  if (sigaction(SIGINT, nullptr, &old_int_) != 0 ||
      (old_int_.sa_handler != SIG_IGN && sigaction(SIGINT, &sa_int, nullptr) != 0) ||
      sigaction(SIGTERM, &sa, &old_term_) != 0 || sigaction(SIGUSR1, &sa, &old_usr1_) != 0)
    throw Error(fmt::format("cannot install the SIGTERM/SIGUSR1/SIGINT handlers: {}", std::strerror(errno)));
}

PreemptionHandler::~PreemptionHandler() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGUSR1, &old_usr1_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
}

int PreemptionHandler::requested() { return g_signal.load(std::memory_order_relaxed); }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace strata::train
