#include "comm/instrument/emulation.hpp"

#include <thread>

namespace strata::comm {

double link_seconds(const topo::Tier& tier, std::size_t bytes, double scale) {
  double beta = tier.bandwidth_GBps * 1e9 * tier.efficiency;  // bytes per second
  return scale * (tier.latency_us * 1e-6 + double(bytes) / beta);
}

void hold_until(std::chrono::steady_clock::time_point due) {
  using namespace std::chrono;
  // Sleeps overshoot by tens of microseconds; sleep until close, then yield-poll.
  constexpr auto kSpin = microseconds(150);
  for (;;) {
    auto now = steady_clock::now();
    if (now >= due) return;
    if (due - now > kSpin)
      std::this_thread::sleep_for(due - now - kSpin);
    else
      std::this_thread::yield();
  }
}

}  // namespace strata::comm
