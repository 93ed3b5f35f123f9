#pragma once
// How the commands print quantities.
#include <string>

#include <fmt/format.h>

#include "base/plural.hpp"  // count_of, for counts in messages ("1 rank", "8 ranks")

namespace strata::cli {

// Decimal units: "43.38 MB", "361.7 kB", "0 B".
inline std::string human_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

}  // namespace strata::cli
