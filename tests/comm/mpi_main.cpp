// gtest main for multi-rank tests: one MPI session around the whole run, rank 0 prints the
// usual report, other ranks print only their failures (prefixed with their rank), and the
// exit code is non-zero if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_session.hpp"
#include "comm_world.hpp"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  strata::comm::MpiSession session(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (session.world_rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(session.world_rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  strata::comm::testing::destroy_world();  // before MPI is finalised
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
