#pragma once
// What every host collective of one process shares: the topology (which tier a message
// crosses), the traffic accounting, the link-emulation setting, and the communication
// thread. Create one per process after MPI is initialised (with MPI_THREAD_MULTIPLE, see
// mpi_session.hpp), before any Communicator, and destroy it after them and before MPI is
// finalised.
#include <functional>
#include <string>
#include <string_view>

#include "comm/instrument/accounting.hpp"
#include "comm/instrument/emulation.hpp"
#include "comm/runtime/executor.hpp"
#include "topo/topology.hpp"

namespace strata::comm {

class Context {
 public:
  // `topology` is resolved for MPI_COMM_WORLD's size if it was not already; a resolved one
  // must match it.
  explicit Context(topo::Topology topology, EmulationOptions emulation = {});
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const topo::Topology& topology() const { return topology_; }
  const EmulationOptions& emulation() const { return emulation_; }
  Accounting& accounting() { return accounting_; }
  CommThread& comm_thread() { return comm_thread_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return topology_.world_size(); }

  // Queues `fn` on the communication thread; its wall time there is recorded under `kind`.
  // Throws Error if called from the communication thread itself (it would wait on itself).
  Work run(std::string_view kind, std::function<void()> fn);
  // On the communication thread: the kind of the task running there (a timed-out wait
  // names it), or "(no collective)" outside a task of run().
  std::string_view running_kind() const {
    return running_kind_ ? std::string_view(*running_kind_) : std::string_view("(no collective)");
  }

 private:
  topo::Topology topology_;
  EmulationOptions emulation_;
  Accounting accounting_;
  int world_rank_ = 0;
  const std::string* running_kind_ = nullptr;  // the running task's own copy; comm thread only
  CommThread comm_thread_;  // last: its thread stops before the members it uses go away
};

}  // namespace strata::comm
