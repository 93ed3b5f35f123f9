#pragma once
// The collective timeout: a job whose rank died or stalls must end, never hang. Every wait
// for peers polls with a deadline: the point-to-point waits of strata's host collectives
// (Communicator, on the communication thread), the MPI collectives issued on the main
// thread (wait_mpi_collective) and NcclCommunicator's waits on its CUDA events (which first
// abort the NCCL communicator: its kernels would spin on for ever). A wait that
// outlasts the timeout prints one line to stderr naming this rank, the collective, the
// group, the peers still awaited and the time waited, then (a moment later) calls MPI_Abort
// on MPI_COMM_WORLD so that mpirun ends every rank.
// The deadline bounds each single wait, not a whole collective: a collective that keeps
// progressing, however slowly, never times out.
// Calls that block inside MPI or NCCL and cannot be polled - a sharded run's start-up
// (communicator creation), ncclCommInitRank, MPI_Finalize - run under a
// BlockingCallWatchdog with the same deadline. Not covered: MpiFlat (Open MPI's own
// collectives, a benchmark baseline).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/clock.hpp"

namespace strata::comm {

inline constexpr double kDefaultCollectiveTimeout = 600;  // seconds
// mpirun's exit status after a timeout (the MPI_Abort error code), as timeout(1) uses.
inline constexpr int kCollectiveTimeoutExitCode = 124;
// Seconds between a rank's timeout message and its MPI_Abort, at most half the timeout
// (see abort_timed_out).
inline constexpr double kTimeoutReportGrace = 1.0;
// Seconds more that a timed-out rank which dumped its flight recorder waits before its
// MPI_Abort, so that the rank printing the desync report (flight.hpp) aborts the job first.
inline constexpr double kDesyncReportTime = 3.0;

// Process-wide, in seconds; takes effect for waits that start afterwards. Error unless
// finite and positive.
void set_collective_timeout(double seconds);
double collective_timeout();

// Polls `done()` until it returns true (then returns true) or `timeout_s` passed first
// (then returns false with `*waited_s` set). A few polls spin; then it sleeps between polls
// with a growing pause, so a rank waiting for a slow peer leaves the core to computation
// (and to the peer, when ranks outnumber cores), and reads the clock only every few sleeps.
template <class Done>
bool poll_until(Done&& done, double timeout_s, double* waited_s) {
  using clock = std::chrono::steady_clock;
  constexpr int kSpinPolls = 64;
  constexpr unsigned kSleepsPerClockRead = 16;  // >= 1 ms of sleeping once the pause is at its maximum
  constexpr auto kMaxPause = std::chrono::microseconds(64);
  for (int i = 0; i < kSpinPolls; ++i)
    if (done()) return true;
  // Only waits that get this far read the clock: the fast path costs no clock read.
  const clock::time_point started = clock::now();
  auto pause = std::chrono::microseconds(2);
  for (unsigned sleeps = 1;; ++sleeps) {
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, kMaxPause);
    if (done()) return true;
    if (sleeps % kSleepsPerClockRead != 0) continue;
    const double waited = seconds_since(started);
    if (waited >= timeout_s) {
      *waited_s = waited;
      return false;
    }
  }
}

// poll_until every request completes (each poll also drives MPI's progress).
bool poll_requests(MPI_Request* requests, int n, double timeout_s, double* waited_s);

// A wait that timed out, as reported.
struct TimedOutWait {
  int world_rank = -1;             // this process
  std::string_view collective;     // what the rank was doing: Context::run's kind, e.g. "shard:step_reduce"
  std::string_view group;          // the communicator's name
  std::vector<std::string> peers;  // what it still waited for, e.g. "rank 3 (receive, tier gpu, host n1)"
  double waited_s = 0;
  double timeout_s = 0;
  std::vector<int> peer_ranks;     // the world ranks of `peers`, in their order
};
std::string timeout_message(const TimedOutWait& w);
// Prints timeout_message to stderr in one write and, kTimeoutReportGrace later, aborts the
// job (MPI_Abort on MPI_COMM_WORLD with kCollectiveTimeoutExitCode).
[[noreturn]] void abort_timed_out(const TimedOutWait& w);

// "0-2, 4, 6-7": sorted world ranks in runs.
std::string rank_ranges(std::vector<int> ranks);

// The "waiting for" part of a report on a wait for every one of `members` (world ranks)
// but `me`, when the library (MPI, NCCL) does not say which one is late; `call` (e.g.
// "MPI_Iallreduce"), if any, in brackets: "rank 3 (call)" or "any of ranks 0-2, 4 (call:
// MPI does not say which one is late)".
// The rank a member waits for when the group has one other; none when any of several may be late.
std::vector<int> definite_peers(const std::vector<int>& members, int me);
std::string members_awaited(const std::vector<int>& members, int me, std::string_view call,
                            std::string_view library);

// Waits for a non-blocking MPI collective over `comm` (e.g. MPI_Iallreduce) that the
// calling thread started, under the collective timeout. On timeout the message names
// `collective` (`mpi_call` in brackets) on `group` and, since MPI does not say which member
// is late, all the other members.
void wait_mpi_collective(MPI_Request& request, MPI_Comm comm, std::string_view collective,
                         std::string_view group, std::string_view mpi_call);

// Bounds a blocking call that cannot be polled by the collective timeout: while the
// watchdog lives, a thread waits; should it outlive the timeout (the call still blocked:
// a member of `comm` died or stalls), the thread reports `call` on `group` as a timed-out
// wait naming the other members of `comm`, and aborts the job. Costs a thread start.
class BlockingCallWatchdog {
 public:
  BlockingCallWatchdog(std::string call, std::string group, MPI_Comm comm);
  ~BlockingCallWatchdog();
  BlockingCallWatchdog(const BlockingCallWatchdog&) = delete;
  BlockingCallWatchdog& operator=(const BlockingCallWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace strata::comm
