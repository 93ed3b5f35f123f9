// Driven by timeout_abort_test.sh under mpirun -np 2: rank 1 never joins the collective
// rank 0 starts, so rank 0's wait must time out (after 1 s), name the collective, the group
// and rank 1, and abort the job. Mode "p2p": strata's all-reduce over the cluster tier
// (Communicator's waits); mode "mpi": an MPI_Iallreduce issued on the main thread
// (wait_mpi_collective); mode "startup": a sharded runtime's start-up (communicator
// creation, under a BlockingCallWatchdog); mode "finalize": MPI_Finalize at exit (the
// session's watchdog). Exits 0 only if rank 0's wait returned, which fails the test.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/runtime/mpi_session.hpp"
#include "comm/runtime/wait.hpp"
#include "comm_world.hpp"
#include "model/config.hpp"
#include "parallel/options.hpp"
#include "shard/runtime.hpp"

int main(int argc, char** argv) {
  using namespace strata::comm;
  MpiSession session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (session.world_size() != 2 || (mode != "p2p" && mode != "mpi" && mode != "startup" && mode != "finalize")) {
    std::fprintf(stderr, "usage: mpirun -np 2 %s p2p|mpi|startup|finalize\n", argv[0]);
    return 2;
  }
  set_collective_timeout(1);
  auto rank_1_stalls = [&] {
    if (session.world_rank() != 1) return;
    std::this_thread::sleep_for(std::chrono::seconds(60));  // mpirun ends it long before
    std::exit(3);
  };
  if (mode == "startup") {
    rank_1_stalls();
    strata::parallel::ShardOptions options;
    options.strategy = "zero3";
    strata::shard::ShardedRuntime runtime(options, strata::model::ModelConfig::preset("tiny"), 1, 8, 1, 1,
                                          strata::device::host());
    std::fprintf(stderr, "rank 0: the wait returned without rank 1\n");
    return 0;
  }
  if (mode == "finalize") {
    rank_1_stalls();
    std::fprintf(stderr, "rank 0: finalizing\n");
    return 0;  // the session's destructor finalizes MPI: it must time out, not return
  }
  testing::World& w = testing::world();  // collective: both ranks build it
  rank_1_stalls();
  float data[8] = {};
  if (mode == "p2p") {
    w.comms.within(w.comms.num_tiers() - 1).all_reduce(f32(data, 8), ReduceOp::Sum);
  } else {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, data, 8, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    wait_mpi_collective(request, MPI_COMM_WORLD, "test:sum", "world", "MPI_Iallreduce");
  }
  std::fprintf(stderr, "rank 0: the wait returned without rank 1\n");
  return 0;
}
