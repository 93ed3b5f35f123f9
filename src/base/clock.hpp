#pragma once
// Wall-clock seconds for timing steps, waits and benchmarks: the steady clock, never the
// system clock (it may jump).
#include <chrono>

namespace strata {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata
