#pragma once
// `strata plan` run as a user would: the build's binary (STRATA_EXE) with these arguments.
#include <string>

#include "support.hpp"

namespace strata::test {

inline CommandResult run_strata(const std::string& args, Stderr stderr_mode) {
  return run_command(std::string(STRATA_EXE) + " " + args, stderr_mode);
}

}  // namespace strata::test
