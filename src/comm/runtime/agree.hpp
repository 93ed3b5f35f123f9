#pragma once
// Agreement over an MPI communicator (base/agree.hpp), for the start of a job, before any
// engine exists: each rank builds its configuration and topology from the same input, and a
// refusal every rank reaches alike is printed once instead of once a rank.
#include <mpi.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/agree.hpp"

namespace strata::comm {

// Every member's string, in rank order, on every member of `comm` (named `group` in a
// timeout report), waited for under the collective timeout (comm/wait.hpp).
std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& local, std::string_view collective,
                                            std::string_view group);

// Runs `work` on every member of `comm`, then all throw the same AgreedError if it threw on
// any (base/agree.hpp).
template <class F>
void agree(MPI_Comm comm, std::string_view group, F&& work) {
  settle(all_gather_strings(comm, failure_of(work), "agree", group));
}

}  // namespace strata::comm
