#include "train/preemption.hpp"

#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::train {

namespace {
// Lock-free, so setting it is async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_preempt(int sig) { g_signal.store(sig, std::memory_order_relaxed); }
}  // namespace

PreemptionHandler::PreemptionHandler() {
  g_signal.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preempt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &old_term_) != 0 || sigaction(SIGUSR1, &sa, &old_usr1_) != 0)
    throw Error(fmt::format("cannot install the SIGTERM/SIGUSR1 handlers: {}", std::strerror(errno)));
}

PreemptionHandler::~PreemptionHandler() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGUSR1, &old_usr1_, nullptr);
}

int PreemptionHandler::requested() { return g_signal.load(std::memory_order_relaxed); }

}  // namespace strata::train
