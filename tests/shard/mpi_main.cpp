// gtest main for the sharding runtime's multi-rank tests: one MPI session, rank 0 prints the
// report, other ranks only say that they failed, and the exit code is non-zero if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_session.hpp"

int main(int argc, char** argv) {
  strata::comm::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && rank != 0 && failed) std::fprintf(stderr, "rank %d failed\n", rank);
  return any;
}
