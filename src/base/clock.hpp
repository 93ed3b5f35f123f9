#pragma once
// Wall-clock seconds for timing steps, waits and benchmarks: the steady clock, never the
// system clock (it may jump).
#include <chrono>

namespace strata {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// How long one call of `work` takes.
template <class F>
double seconds_of(F&& work) {
  const auto t0 = std::chrono::steady_clock::now();
  work();
  return seconds_since(t0);
}

}  // namespace strata
