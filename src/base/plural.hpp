#pragma once
// Counts of things in messages, in the right grammatical number.
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace strata {

// "1 thread", "2 threads", "0 threads"; `plural` where adding "s" is wrong ("micro-batches").
inline std::string count_of(std::int64_t n, std::string_view singular, std::string_view plural = {}) {
  if (n == 1) return fmt::format("1 {}", singular);
  return plural.empty() ? fmt::format("{} {}s", n, singular) : fmt::format("{} {}", n, plural);
}

}  // namespace strata
