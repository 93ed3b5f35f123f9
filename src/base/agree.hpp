#pragma once
// Agreeing on errors across the ranks of a job, whatever carries the messages (an engine's
// all_gather_strings, or MPI_COMM_WORLD before any engine exists): every rank runs the same
// work, then all exchange what went wrong, so no rank walks into a collective the others
// have left, and an error every rank hit alike is reported once.
#include <exception>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace strata {

// Runs `work`; returns the message of what it threw ("unknown error" when empty), or "" if
// it returned.
template <class F>
std::string failure_of(F&& work) {
  try {
    work();
  } catch (const std::exception& e) {  // Error, and the standard library's (filesystem, allocation)
    const std::string what = e.what();
    return what.empty() ? "unknown error" : what;
  }
  return "";
}

// Given every rank's failure_of, in rank order: returns when all are empty; else throws
// AgreedError: the message itself when every rank failed alike, else the lowest failing
// rank's, prefixed "rank N: ".
inline void settle(const std::vector<std::string>& failures) {
  std::size_t first = failures.size(), failed = 0;
  bool same = true;
  for (std::size_t r = 0; r < failures.size(); ++r) {
    if (failures[r].empty()) continue;
    if (first == failures.size()) first = r;
    same = same && failures[r] == failures[first];
    ++failed;
  }
  if (failed == 0) return;
  // The same refusal everywhere (a bad setting, a bad file all ranks read) needs no rank.
  if (same && failed == failures.size()) throw AgreedError(failures[first]);
  throw AgreedError("rank " + std::to_string(first) + ": " + failures[first] +
                    (failed > 1 ? " (and " + std::to_string(failed - 1) + " more ranks failed)" : ""));
}

}  // namespace strata
