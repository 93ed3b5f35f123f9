#pragma once
// The collective timeout: a job whose rank died or stalls must end, never hang. Every wait
// for peers polls MPI with a deadline: the point-to-point waits of strata's host
// collectives (Communicator, on the communication thread) and the MPI collectives issued
// on the main thread (wait_mpi_collective). A wait that outlasts the timeout prints one
// line to stderr naming this rank, the collective, the group, the peers still awaited and
// the time waited, then (a moment later) calls MPI_Abort on MPI_COMM_WORLD so that mpirun
// ends every rank.
// The deadline bounds each single wait, not a whole collective: a collective that keeps
// progressing, however slowly, never times out.
// Not covered (they block inside MPI): MpiFlat (Open MPI's own collectives, a benchmark
// baseline), communicator creation at start-up, and MPI_Finalize.
#include <mpi.h>

#include <string>
#include <string_view>
#include <vector>

namespace strata::comm {

inline constexpr double kDefaultCollectiveTimeout = 600;  // seconds
// mpirun's exit status after a timeout (the MPI_Abort error code), as timeout(1) uses.
inline constexpr int kCollectiveTimeoutExitCode = 124;
// Seconds between a rank's timeout message and its MPI_Abort, at most half the timeout
// (see abort_timed_out).
inline constexpr double kTimeoutReportGrace = 1.0;

// Process-wide, in seconds; takes effect for waits that start afterwards. Error unless
// finite and positive.
void set_collective_timeout(double seconds);
double collective_timeout();

// Polls until every request completes (each poll also drives MPI's progress). Returns
// true then; false once `timeout_s` passed first, with `*waited_s` set and the requests
// still pending. A few polls spin; then it sleeps between polls with a growing pause, so a
// rank waiting for a slow peer leaves the core to computation (and to the peer, when ranks
// outnumber cores), and reads the clock only every few sleeps.
bool poll_requests(MPI_Request* requests, int n, double timeout_s, double* waited_s);

// A wait that timed out, as reported.
struct TimedOutWait {
  int world_rank = -1;             // this process
  std::string_view collective;     // what the rank was doing: Context::run's kind, e.g. "shard:step_reduce"
  std::string_view group;          // the communicator's name
  std::vector<std::string> peers;  // what it still waited for, e.g. "rank 3 (receive, tier gpu)"
  double waited_s = 0;
  double timeout_s = 0;
};
std::string timeout_message(const TimedOutWait& w);
// Prints timeout_message to stderr in one write and, kTimeoutReportGrace later, aborts the
// job (MPI_Abort on MPI_COMM_WORLD with kCollectiveTimeoutExitCode).
[[noreturn]] void abort_timed_out(const TimedOutWait& w);

// "0-2, 4, 6-7": sorted world ranks in runs.
std::string rank_ranges(std::vector<int> ranks);

// Waits for a non-blocking MPI collective over `comm` (e.g. MPI_Iallreduce) that the
// calling thread started, under the collective timeout. On timeout the message names
// `collective` (`mpi_call` in brackets) on `group` and, since MPI does not say which member
// is late, all the other members.
void wait_mpi_collective(MPI_Request& request, MPI_Comm comm, std::string_view collective,
                         std::string_view group, std::string_view mpi_call);

}  // namespace strata::comm
