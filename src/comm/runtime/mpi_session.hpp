#pragma once
// MPI's lifetime as an object. Commands that may run under mpirun call mpi_session() in
// their callback; tests with their own main() hold an MpiSession on the stack.
#include <mpi.h>

#include <string>
#include <vector>

namespace strata::comm {

// Open MPI transport settings strata gives its ranks (docs/cluster.md, "Transport"), each an
// MCA parameter set through its OMPI_MCA_<name> variable before MPI starts, unless the user
// gave it (mpirun --mca NAME VALUE or -x OMPI_MCA_NAME=VALUE, or the environment): theirs wins.
//   btl_tcp_links 2: two TCP connections to each peer. Over one, a rank's rendezvous answer to
//   its peer's large message queues behind its own message's data, so an exchange (both
//   sending at once, as every ring step does) runs one direction at a time: half the link.
struct TransportSetting {
  std::string name;   // MCA parameter, e.g. "btl_tcp_links"
  std::string value;  // in effect for this process
  bool given = false;  // the user's (else strata's default)
};

class MpiSession {
 public:
  // Initialises MPI asking for MPI_THREAD_MULTIPLE (so overlapped collectives may be driven
  // from a helper thread) and accepts whatever level the library provides. If MPI is
  // already initialised, this session only observes it and does not finalise it.
  MpiSession(int* argc = nullptr, char*** argv = nullptr);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Each transport setting strata has a default for, as this process started MPI with it
  // (none when MPI was already started).
  const std::vector<TransportSetting>& transport() const { return transport_; }

 private:
  bool owns_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  std::vector<TransportSetting> transport_;
};

// The process-wide session: initialised on the first call, finalised when the program exits.
MpiSession& mpi_session();

// World ranks of the members of `comm`, in position order.
std::vector<int> world_ranks_of(MPI_Comm comm);

}  // namespace strata::comm
