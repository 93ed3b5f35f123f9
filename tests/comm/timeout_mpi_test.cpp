// The collective timeout on live peers: a deadline that passes leaves the wait pending
// without aborting in poll_requests; a healthy but slow peer, slower than the spin phase
// yet well within the timeout, does not trip it in strata's collectives or in the
// main-thread MPI collectives; the communication thread knows which collective it runs.
// (A timeout that fires aborts the job: tests/train/hang_mpi_test.sh drives that case.)
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/runtime/wait.hpp"
#include "comm_world.hpp"

namespace strata::comm::testing {
namespace {

// Shortens the process-wide timeout for one test.
class TimeoutFor {
 public:
  explicit TimeoutFor(double s) : saved_(collective_timeout()) { set_collective_timeout(s); }
  ~TimeoutFor() { set_collective_timeout(saved_); }

 private:
  double saved_;
};

TEST(CollectiveTimeout, PassedDeadlineReturnsWithTheRequestStillPending) {
  auto& w = world();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int n = w.ctx.world_size();
  const int partner = w.rank ^ 1;  // pairs (0, 1), (2, 3), ...: world sizes here are even
  ASSERT_EQ(n % 2, 0);
  int value = -1, go = 0;
  if (w.rank % 2 == 0) {
    // The partner sends only after our "go", which follows the timed-out poll: the poll
    // cannot see the message, whatever the scheduling.
    MPI_Request request;
    MPI_Irecv(&value, 1, MPI_INT, partner, 0, comm, &request);
    double waited = -1;
    EXPECT_FALSE(poll_requests(&request, 1, 0.05, &waited));
    EXPECT_GE(waited, 0.05);
    EXPECT_NE(request, MPI_REQUEST_NULL);
    MPI_Send(&go, 1, MPI_INT, partner, 1, comm);
    EXPECT_TRUE(poll_requests(&request, 1, 60, &waited));
    EXPECT_EQ(value, 1000 + partner);
  } else {
    MPI_Recv(&go, 1, MPI_INT, partner, 1, comm, MPI_STATUS_IGNORE);
    value = 1000 + w.rank;
    MPI_Send(&value, 1, MPI_INT, partner, 0, comm);
  }
  MPI_Comm_free(&comm);
}

TEST(CollectiveTimeout, SlowHealthyPeerWithinTheTimeoutDoesNotTripIt) {
  auto& w = world();
  TimeoutFor shorter(5);
  const int slow = w.ctx.world_size() - 1;
  auto maybe_sleep = [&] {
    if (w.rank == slow) std::this_thread::sleep_for(std::chrono::seconds(1));
  };
  // Strata's own collectives (point-to-point waits on the communication thread).
  for (Collectives* g : {static_cast<Collectives*>(&w.comms.within(w.comms.num_tiers() - 1)),
                         static_cast<Collectives*>(&w.comms.hierarchical(w.comms.num_tiers() - 1))}) {
    HostBuf data(DType::F32, 1000);
    for (std::size_t i = 0; i < data.count; ++i) data.set(i, float(w.rank + 1));
    maybe_sleep();
    g->all_reduce(data.view(), ReduceOp::Sum);
    const double n = w.ctx.world_size();
    for (std::size_t i = 0; i < data.count; ++i) ASSERT_EQ(data.value(i), n * (n + 1) / 2) << g->name();
    maybe_sleep();
    g->barrier();
  }
  // An MPI collective issued on the main thread.
  double sum = w.rank;
  MPI_Request request;
  maybe_sleep();
  MPI_Iallreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
  wait_mpi_collective(request, MPI_COMM_WORLD, "test:sum", "world", "MPI_Iallreduce");
  const int n = w.ctx.world_size();
  EXPECT_EQ(sum, n * (n - 1) / 2.0);
}

TEST(CollectiveTimeout, CommunicationThreadKnowsTheRunningCollective) {
  auto& w = world();
  std::string inside, outside;
  w.ctx.run("test:labelled", [&] { inside = w.ctx.running_kind(); }).wait();
  w.ctx.comm_thread().submit([&] { outside = w.ctx.running_kind(); }).wait();
  EXPECT_EQ(inside, "test:labelled");
  EXPECT_EQ(outside, "(no collective)");
}

}  // namespace
}  // namespace strata::comm::testing
