#include "comm/host/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "comm/runtime/wait.hpp"

namespace strata::comm {

namespace {

constexpr int kTag = 0x5717;
constexpr int kScalesTag = 0x5718;  // a quantized message's scales, its second MPI message

int message_count(std::size_t bytes) {
  if (bytes > std::size_t(INT_MAX))
    throw Error(fmt::format("comm: a message of {} bytes exceeds MPI's 2 GiB count limit; use smaller buckets", bytes));
  return int(bytes);
}

bool all_done(MessageRequests& m) {
  int done = 0;
  MPI_Testall(int(m.size()), m.data(), &done, MPI_STATUSES_IGNORE);
  return done != 0;
}

// Each member's host (MPI_Get_processor_name), gathered over `comm`.
std::vector<std::string> member_hosts(MPI_Comm comm) {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(mine, &len);
  int d = 0;
  MPI_Comm_size(comm, &d);
  std::vector<char> all(std::size_t(d) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
  std::vector<std::string> hosts(d);
  for (int m = 0; m < d; ++m) {
    const char* name = all.data() + std::size_t(m) * MPI_MAX_PROCESSOR_NAME;
    hosts[m].assign(name, strnlen(name, MPI_MAX_PROCESSOR_NAME));
  }
  return hosts;
}

}  // namespace

Communicator::Communicator(Context& ctx, MPI_Comm comm, std::string name)
    : QueuedCollectives(ctx, comm, std::move(name)), piece_bytes_(comm::piece_bytes()) {
  MPI_Comm_dup(comm, &comm_);
  for (int w : world_ranks_) tiers_.push_back(ctx.topology().tier_between(ctx.world_rank(), w));
  busy_tier_ = *std::max_element(tiers_.begin(), tiers_.end());
  hosts_ = member_hosts(comm_);
}

Communicator::~Communicator() {
  // FIFO: once this empty task ran, no queued collective still uses the communicator.
  ctx_.comm_thread().submit([] {}).wait();
  MPI_Comm_free(&comm_);
}

// ---- point-to-point -------------------------------------------------------------------

void Communicator::before_send(const WireChunk& out, int dst) {
  const auto& emu = ctx_.emulation();
  if (!emu.enabled) return;
  const auto& tier = ctx_.topology().tier(tier_to(dst));
  auto hold = std::chrono::duration<double>(link_seconds(tier, out.total_bytes(), emu.scale));
  hold_until(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(hold));
}

void Communicator::after_send(const WireChunk& out, int dst) {
  ctx_.accounting().record_send(tier_to(dst), out.total_bytes());
}

void Communicator::after_recv(const WireChunk& in, int src) {
  ctx_.accounting().record_receive(tier_to(src), in.total_bytes());
}

void Communicator::check_thread() const {
  if (!ctx_.comm_thread().on_comm_thread())
    throw Error(fmt::format("comm: group '{}': point-to-point used outside the communication thread", name_));
}

void Communicator::post_receive(const WireChunk& in, int src, MessageRequests* requests) {
  *requests = no_requests();
  MPI_Irecv(in.data, message_count(in.bytes), MPI_BYTE, src, kTag, comm_, &(*requests)[0]);
  if (in.n_scales > 0)
    MPI_Irecv(in.scales, message_count(in.n_scales * sizeof(float)), MPI_BYTE, src, kScalesTag, comm_,
              &(*requests)[1]);
}

void Communicator::post_send(const WireChunk& out, int dst, MessageRequests* requests) {
  *requests = no_requests();
  MPI_Isend(out.data, message_count(out.bytes), MPI_BYTE, dst, kTag, comm_, &(*requests)[0]);
  if (out.n_scales > 0)
    MPI_Isend(out.scales, message_count(out.n_scales * sizeof(float)), MPI_BYTE, dst, kScalesTag, comm_,
              &(*requests)[1]);
}

void Communicator::sendrecv(const WireChunk& out, int dst, const WireChunk& in, int src) {
  check_thread();
  before_send(out, dst);
  MessageRequests req[2];
  post_receive(in, src, &req[0]);
  post_send(out, dst, &req[1]);
  const Peer peers[2] = {{src, true}, {dst, false}};
  wait_all(req, 2, peers);
  after_send(out, dst);
  after_recv(in, src);
}

void Communicator::send(const WireChunk& out, int dst) {
  check_thread();
  before_send(out, dst);
  MessageRequests req;
  post_send(out, dst, &req);
  const Peer peer{dst, false};
  wait_all(&req, 1, &peer);
  after_send(out, dst);
}

void Communicator::recv(const WireChunk& in, int src) {
  check_thread();
  MessageRequests req;
  post_receive(in, src, &req);
  const Peer peer{src, true};
  wait_all(&req, 1, &peer);
  after_recv(in, src);
}

void Communicator::wait_all(MessageRequests* messages, int n, const Peer* peers) {
  double waited = 0;
  const double timeout = collective_timeout();
  auto done = [&] {
    for (int i = 0; i < n; ++i)
      if (!all_done(messages[i])) return false;
    return true;
  };
  if (poll_until(done, timeout, &waited)) return;
  // The peers of the messages still pending, in message order, one entry per member.
  std::vector<std::pair<int, std::string>> pending;
  for (int i = 0; i < n; ++i) {
    if (all_done(messages[i])) continue;
    const char* role = peers[i].receive ? "receive" : "send";
    auto same =
        std::find_if(pending.begin(), pending.end(), [&](auto& p) { return p.first == peers[i].member; });
    if (same != pending.end())
      same->second += fmt::format(" and {}", role);
    else
      pending.emplace_back(peers[i].member, role);
  }
  if (pending.empty()) return;  // the last one completed just now
  TimedOutWait report{ctx_.world_rank(), ctx_.running_kind(), name_, {}, waited, timeout, {}};
  for (auto& [m, roles] : pending) {
    report.peers.push_back(
        fmt::format("rank {} ({}, tier {}, host {})", world_ranks_[m], roles, ctx_.topology().tier(tiers_[m]).name,
                    hosts_[m]));
    report.peer_ranks.push_back(world_ranks_[m]);
  }
  abort_timed_out(report);
}

namespace {
// Charges the wall time of one collective of a group, however it ends, to the group's tier:
// the step report's busy time a tier, which the planner's busy time is compared with.
class BusyTimer {
 public:
  BusyTimer(Accounting& acc, int tier) : acc_(acc), tier_(tier), t0_(std::chrono::steady_clock::now()) {}
  ~BusyTimer() { acc_.record_busy(tier_, seconds_since(t0_)); }
  BusyTimer(const BusyTimer&) = delete;
  BusyTimer& operator=(const BusyTimer&) = delete;

 private:
  Accounting& acc_;
  int tier_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

// ---- padding rule ---------------------------------------------------------------------

void Communicator::all_gather_inline(CBuf shard, Buf full) {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  std::size_t padded = shard.count * std::size_t(size());
  if (full.count == padded) return ring_all_gather(*this, shard, full);
  Buf stage = scratch_.view(kScratchStage, full.dtype, padded, full.block);
  ring_all_gather(*this, shard, stage);
  copy_elements(stage, 0, full, 0, full.count);
}

void Communicator::reduce_scatter_inline(CBuf full, Buf shard, float divisor) {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  std::size_t padded = shard.count * std::size_t(size());
  if (full.count == padded) return ring_reduce_scatter(*this, full, shard, divisor);
  ring_reduce_scatter(*this, scratch_.padded_copy(kScratchStage, full, padded), shard, divisor);
}

void Communicator::all_reduce_inline(Buf data, float divisor) {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  std::size_t padded = chunk_count(data.count, size(), data.granule()) * std::size_t(size());
  if (data.count == padded) return ring_all_reduce(*this, data, divisor);
  Buf stage = scratch_.padded_copy(kScratchStage, data, padded);
  ring_all_reduce(*this, stage, divisor);
  copy_elements(stage, 0, data, 0, data.count);
}

void Communicator::all_to_all_inline(CBuf send, Buf recv) {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  if (send.count == recv.count) return pairwise_all_to_all(*this, send, recv);
  pairwise_all_to_all(*this, scratch_.padded_copy(kScratchStage, send, recv.count), recv);
}

void Communicator::broadcast_inline(Buf data, int root) {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  binomial_broadcast(*this, data, root);
}

void Communicator::barrier_inline() {
  const BusyTimer busy(ctx_.accounting(), busy_tier_);
  dissemination_barrier(*this);
}

}  // namespace strata::comm
