#include "comm/mpi_session.hpp"

#include "comm/wait.hpp"

namespace strata::comm {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else {
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
    owns_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // MPI_Finalize waits for every rank: one that died or stalls must not hang the others.
  const BlockingCallWatchdog watchdog("MPI_Finalize", "world", MPI_COMM_WORLD);
  MPI_Finalize();
}

MpiSession& mpi_session() {
  static MpiSession session;
  return session;
}

}  // namespace strata::comm
