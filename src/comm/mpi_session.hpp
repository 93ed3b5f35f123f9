#pragma once
// MPI's lifetime as an object. Commands that may run under mpirun call mpi_session() in
// their callback; tests with their own main() hold an MpiSession on the stack.
#include <mpi.h>

namespace strata::comm {

class MpiSession {
 public:
  // Initialises MPI asking for MPI_THREAD_MULTIPLE (so overlapped collectives may be driven
  // from a helper thread) and accepts whatever level the library provides. If MPI is
  // already initialised, this session only observes it and does not finalise it.
  MpiSession(int* argc = nullptr, char*** argv = nullptr);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int thread_level() const { return thread_level_; }  // MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE
  bool thread_multiple() const { return thread_level_ == MPI_THREAD_MULTIPLE; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool owns_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// The process-wide session: initialised on the first call, finalised when the program exits.
MpiSession& mpi_session();

}  // namespace strata::comm
