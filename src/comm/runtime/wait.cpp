#include "comm/runtime/wait.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "comm/runtime/flight.hpp"
#include "comm/runtime/mpi_session.hpp"

namespace strata::comm {

namespace {
std::atomic<double> g_timeout_s{kDefaultCollectiveTimeout};
}  // namespace

void set_collective_timeout(double seconds) {
  if (!std::isfinite(seconds) || !(seconds > 0))
    throw Error(fmt::format("comm: collective timeout {} s: must be a positive number of seconds", seconds));
  g_timeout_s.store(seconds, std::memory_order_relaxed);
}

double collective_timeout() { return g_timeout_s.load(std::memory_order_relaxed); }

bool poll_requests(MPI_Request* requests, int n, double timeout_s, double* waited_s) {
  return poll_until(
      [&] {
        int done = 0;
        MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
        return done != 0;
      },
      timeout_s, waited_s);
}

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string timeout_message(const TimedOutWait& w) {
  return fmt::format(
      "strata: rank {}: collective timeout after {:.1f} s in {} on group '{}', waiting for {}. A rank died "
      "or stalls; if the job is only slow, raise train.collective_timeout (now {:g} s). Aborting the job.",
      w.world_rank, w.waited_s, w.collective, w.group, fmt::join(w.peers, " and "), w.timeout_s);
}

void abort_timed_out(const TimedOutWait& w) {
  const std::string line = timeout_message(w) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: ranks' lines do not interleave
  std::fflush(stderr);
  // The flight recorder dumps this rank's last ops; the first rank to claim the desync
  // report waits for the others' dumps (the pause below), prints it and aborts the job.
  if (flight_recorder().on_timeout(w)) {
    MPI_Abort(MPI_COMM_WORLD, kCollectiveTimeoutExitCode);
    std::abort();
  }
  // Ranks stuck behind the same dead or stalled rank time out within moments of each
  // other; a short pause lets them print their lines too before mpirun ends the job, so
  // the rank that is waited for but reports nothing stands out. At most half the timeout:
  // no wait that starts during the pause (on this now silent rank) times out before it ends.
  // With dumps, longer: the reporting rank, which paused as long, prints first and aborts.
  const double grace = std::min(kTimeoutReportGrace, w.timeout_s / 2);
  const bool dumped = flight_recorder().enabled() && !flight_recorder().dump_dir().empty();
  std::this_thread::sleep_for(std::chrono::duration<double>(dumped ? grace + kDesyncReportTime : grace));
  MPI_Abort(MPI_COMM_WORLD, kCollectiveTimeoutExitCode);
  std::abort();  // MPI_Abort does not return; should it, the job still must not hang
}

namespace {
int world_rank() {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  return me;
}
std::string others_awaited(MPI_Comm comm, int me, std::string_view call) {
  return members_awaited(world_ranks_of(comm), me, call, "MPI");
}
}  // namespace

std::vector<int> definite_peers(const std::vector<int>& members, int me) {
  std::vector<int> others;
  std::ranges::remove_copy(members, std::back_inserter(others), me);
  return others.size() == 1 ? others : std::vector<int>{};
}

std::string members_awaited(const std::vector<int>& members, int me, std::string_view call,
                            std::string_view library) {
  std::vector<int> others;
  std::ranges::remove_copy(members, std::back_inserter(others), me);
  if (others.size() == 1)
    return call.empty() ? fmt::format("rank {}", others[0]) : fmt::format("rank {} ({})", others[0], call);
  const std::string prefix = call.empty() ? "" : fmt::format("{}: ", call);
  return fmt::format("any of ranks {} ({}{} does not say which one is late)", rank_ranges(others), prefix, library);
}

void wait_mpi_collective(MPI_Request& request, MPI_Comm comm, std::string_view collective,
                         std::string_view group, std::string_view mpi_call) {
  double waited = 0;
  const double timeout = collective_timeout();
  if (poll_requests(&request, 1, timeout, &waited)) return;
  int done = 0;
  MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  if (done) return;  // completed just now
  const int me = world_rank();
  abort_timed_out({me, collective, group, {others_awaited(comm, me, mpi_call)}, waited, timeout,
                   definite_peers(world_ranks_of(comm), me)});
}

BlockingCallWatchdog::BlockingCallWatchdog(std::string call, std::string group, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size == 1) return;  // nobody to wait for
  const int me = world_rank();
  const double timeout = collective_timeout();
  std::string peers = others_awaited(comm, me, "");
  std::vector<int> peer_ranks = definite_peers(world_ranks_of(comm), me);
  thread_ = std::thread([this, me, timeout, call = std::move(call), group = std::move(group),
                         peer_ranks = std::move(peer_ranks),
                         peers = std::move(peers)] {
    const auto started = std::chrono::steady_clock::now();
    {
      std::unique_lock lock(mutex_);
      if (finished_.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return done_; })) return;
    }
    const double waited = seconds_since(started);
    abort_timed_out({me, call, group, {peers}, waited, timeout, peer_ranks});
  });
}

BlockingCallWatchdog::~BlockingCallWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  finished_.notify_one();
  thread_.join();
}

}  // namespace strata::comm
