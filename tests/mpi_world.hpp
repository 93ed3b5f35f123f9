#pragma once
// MPI_COMM_WORLD's rank and size for the multi-rank test binaries (tests/mpi_main.cpp), and
// AT_WORLD for a test written for one world size in a binary that ctest runs at several.
#include <mpi.h>

#include <gtest/gtest.h>

namespace strata::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace strata::test

#define AT_WORLD(n) \
  if (::strata::test::world_size() != (n)) GTEST_SKIP() << "runs on " << (n) << " ranks"
