// The accounted traffic of every algorithm equals its closed form, per rank and per tier:
// a ring collective of S bytes over d ranks sends S(d-1)/d bytes to the right neighbour,
// charged to the tier that hop crosses; a hierarchical one pays each level's ring on that
// level's tier. And link emulation: every rank's collective takes at least the alpha-beta
// time of the messages it sends.
#include <gtest/gtest.h>

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/instrument/traffic.hpp"
#include "comm_world.hpp"

namespace strata::comm::testing {
namespace {

using Traffic = std::vector<TierTraffic>;

Traffic zero_traffic(const topo::Topology& t) { return Traffic(t.num_tiers()); }

int tier_to(const topo::Topology& topo, Collectives& g, int member) {
  return topo.tier_between(g.world_rank_of(g.index()), g.world_rank_of(member));
}

// A ring step pattern: `steps` messages of `bytes` to the right neighbour, from the left.
void add_ring(Traffic& x, const topo::Topology& topo, Collectives& g, std::uint64_t steps, std::uint64_t bytes) {
  const int d = g.size(), m = g.index();
  if (d == 1) return;
  auto& out = x[tier_to(topo, g, (m + 1) % d)];
  out.bytes_sent += steps * bytes;
  out.messages += steps;
  x[tier_to(topo, g, (m - 1 + d) % d)].bytes_received += steps * bytes;
}

// Accounting delta of running `fn` (blocking collectives) on this rank.
template <class Fn>
CommStats delta_of(Accounting& acc, Fn&& fn) {
  CommStats before = acc.snapshot();
  fn();
  return acc.snapshot() - before;
}

std::vector<Communicator*> flat_groups(World& w) {
  std::vector<Communicator*> g;
  for (int t = 0; t < w.comms.num_tiers(); ++t) {
    g.push_back(&w.comms.within(t));
    if (t > 0) g.push_back(&w.comms.across(t));
  }
  return g;
}

TEST(Accounting, RingCollectivesMatchTheClosedForm) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (Communicator* g : flat_groups(w))
    for (DType t : {DType::F32, DType::BF16, DType::I8})
      for (std::size_t n : {std::size_t(64) * g->size(), std::size_t(5) * g->size() + 3}) {
        const std::size_t block = t == DType::I8 ? 16 : 0, d = std::size_t(g->size());
        const std::size_t c = g->chunk_elements(n, t, block);
        const std::uint64_t S = d * wire_bytes(t, c, block);  // total bytes after padding
        HostBuf full(t, n, block), shard(t, c, block), recv(t, d * c, block);

        Traffic want = zero_traffic(w.topology);
        add_ring(want, w.topology, *g, d - 1, S / d);  // S(d-1)/d in d-1 messages
        CommStats got = delta_of(acc, [&] { g->all_gather(shard.cview(), full.view()); });
        EXPECT_EQ(got.tiers, want) << "all_gather " << g->name() << " " << dtype_name(t) << " n=" << n;
        EXPECT_EQ(got.kinds.at("all_gather").calls, 1u);

        want = zero_traffic(w.topology);
        for (std::size_t k = 1; k < d; ++k) {  // one chunk to, and one from, every other member
          int peer = int((g->index() + k) % d);
          want[tier_to(w.topology, *g, peer)].bytes_sent += S / d;
          want[tier_to(w.topology, *g, peer)].messages += 1;
          want[tier_to(w.topology, *g, peer)].bytes_received += S / d;
        }
        got = delta_of(acc, [&] { g->all_to_all(full.cview(), recv.view()); });
        EXPECT_EQ(got.tiers, want) << "all_to_all " << g->name() << " " << dtype_name(t) << " n=" << n;

        if (is_quantized(t)) continue;
        want = zero_traffic(w.topology);
        add_ring(want, w.topology, *g, d - 1, S / d);
        got = delta_of(acc, [&] { g->reduce_scatter(full.cview(), shard.view(), ReduceOp::Avg); });
        EXPECT_EQ(got.tiers, want) << "reduce_scatter " << g->name() << " " << dtype_name(t) << " n=" << n;

        add_ring(want, w.topology, *g, d - 1, S / d);  // all-reduce = reduce-scatter + all-gather
        got = delta_of(acc, [&] { g->all_reduce(full.view(), ReduceOp::Sum); });
        EXPECT_EQ(got.tiers, want) << "all_reduce " << g->name() << " " << dtype_name(t) << " n=" << n;
      }
}

TEST(Accounting, HierarchicalCollectivesPayEachTierItsOwnRing) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (int top = 1; top < w.comms.num_tiers(); ++top) {
    Hierarchy& h = w.comms.hierarchical(top);
    for (DType t : {DType::F32, DType::BF16}) {
      const std::size_t n = 1000 * std::size_t(h.size()) + 7;  // padded to D * c
      const std::size_t c = h.chunk_elements(n, t), D = std::size_t(h.size());
      const std::uint64_t S = D * data_bytes(t, c);
      // Level u (tier u, a_u members) runs a ring over what the inner levels left:
      // S_u = S / (a_0 ... a_{u-1}); it sends S_u (a_u - 1) / a_u bytes over tier u.
      Traffic ring = zero_traffic(w.topology), a2a = zero_traffic(w.topology);
      std::uint64_t S_u = S;
      for (int u = 0; u <= top; ++u) {
        const std::uint64_t a = std::uint64_t(w.topology.tier(u).size);
        ring[u] = {S_u * (a - 1) / a, S_u * (a - 1) / a, a - 1};
        a2a[u] = {S * (a - 1) / a, S * (a - 1) / a, a - 1};  // every level moves all of S
        S_u /= a;
      }
      HostBuf full(t, n), shard(t, c), recv(t, D * c);
      CommStats got = delta_of(acc, [&] { h.reduce_scatter(full.cview(), shard.view(), ReduceOp::Sum); });
      EXPECT_EQ(got.tiers, ring) << "reduce_scatter " << h.name() << " " << dtype_name(t);
      got = delta_of(acc, [&] { h.all_gather(shard.cview(), full.view()); });
      EXPECT_EQ(got.tiers, ring) << "all_gather " << h.name() << " " << dtype_name(t);
      got = delta_of(acc, [&] { h.all_to_all(full.cview(), recv.view()); });
      EXPECT_EQ(got.tiers, a2a) << "all_to_all " << h.name() << " " << dtype_name(t);
      got = delta_of(acc, [&] { h.all_reduce(full.view(), ReduceOp::Avg); });
      for (auto& x : ring) x = {2 * x.bytes_sent, 2 * x.bytes_received, 2 * x.messages};
      EXPECT_EQ(got.tiers, ring) << "all_reduce " << h.name() << " " << dtype_name(t);
      EXPECT_EQ(got.kinds.at("all_reduce").calls, 1u);
    }
  }
}

// The busy time of a collective goes to the outermost tier its group spans, a hierarchical
// one's to each level it runs, and none of it to other tiers; the levels' busy time is part
// of the hierarchical call's own wall time.
TEST(Accounting, BusyTimeIsChargedToTheTiersTheCollectiveRuns) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (Communicator* g : flat_groups(w)) {
    if (g->size() == 1) continue;
    int outer = 0;
    for (int m = 0; m < g->size(); ++m) outer = std::max(outer, tier_to(w.topology, *g, m));
    HostBuf full(DType::F32, 4096 * std::size_t(g->size())), shard(DType::F32, 4096);
    const CommStats got = delta_of(acc, [&] { g->all_gather(shard.cview(), full.view()); });
    for (int t = 0; t < w.topology.num_tiers(); ++t)
      if (t == outer)
        EXPECT_GT(got.busy_s[t], 0.0) << g->name() << " tier " << t;
      else
        EXPECT_EQ(got.busy_s[t], 0.0) << g->name() << " tier " << t;
    EXPECT_EQ(got.to_json()["tiers"][w.topology.tier(outer).name]["busy_s"], got.busy_s[outer]);
  }
  for (int top = 1; top < w.comms.num_tiers(); ++top) {
    Hierarchy& h = w.comms.hierarchical(top);
    const std::size_t c = 4096;
    HostBuf full(DType::F32, c * std::size_t(h.size())), shard(DType::F32, c);
    const CommStats got = delta_of(acc, [&] { h.reduce_scatter(full.cview(), shard.view(), ReduceOp::Sum); });
    double levels = 0;
    for (int t = 0; t < w.topology.num_tiers(); ++t) {
      const bool runs = t <= top && w.topology.tier(t).size > 1;
      if (runs)
        EXPECT_GT(got.busy_s[t], 0.0) << h.name() << " tier " << t;
      else
        EXPECT_EQ(got.busy_s[t], 0.0) << h.name() << " tier " << t;
      levels += got.busy_s[t];
    }
    EXPECT_LE(levels, got.kinds.at("reduce_scatter").seconds) << h.name();
  }
}

TEST(Accounting, BroadcastAndBarrierTotalsOverTheGroup) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (int t = 0; t < w.comms.num_tiers(); ++t) {
    Communicator& g = w.comms.within(t);
    MPI_Comm comm = w.groups.within(t);
    const std::size_t n = 333, block = 8;
    HostBuf data(DType::I8, n, block);
    CommStats got = delta_of(acc, [&] { g.broadcast(data.view(), g.size() - 1); });
    // A tree: every member but the root receives the whole buffer exactly once.
    std::uint64_t mine[2] = {got.total().messages, got.total().bytes_received}, sum[2];
    MPI_Allreduce(mine, sum, 2, MPI_UINT64_T, MPI_SUM, comm);
    EXPECT_EQ(sum[0], std::uint64_t(g.size() - 1)) << g.name();
    EXPECT_EQ(sum[1], std::uint64_t(g.size() - 1) * wire_bytes(DType::I8, n, block)) << g.name();
    EXPECT_EQ(got.total().bytes_received, g.index() == g.size() - 1 ? 0u : wire_bytes(DType::I8, n, block));

    // Dissemination: ceil(log2 d) empty messages, round k to member index + 2^k.
    Traffic want = zero_traffic(w.topology);
    for (int k = 1; k < g.size(); k <<= 1) want[tier_to(w.topology, g, (g.index() + k) % g.size())].messages += 1;
    got = delta_of(acc, [&] { g.barrier(); });
    EXPECT_EQ(got.tiers, want) << "barrier " << g.name();
  }
}

// traffic.hpp's count of `algorithm` on g, charged to a fresh Accounting.
Traffic counted(const topo::Topology& topo, Collectives& g, Algorithm algorithm, std::uint64_t bytes, int root = 0) {
  std::vector<std::string> names;
  for (const auto& tier : topo.tiers()) names.push_back(tier.name);
  Accounting acc(names);
  std::vector<int> tiers;
  for (int m = 0; m < g.size(); ++m) tiers.push_back(tier_to(topo, g, m));
  charge_transfers(acc, algorithm_transfers(algorithm, g.size(), g.index(), bytes, root), tiers);
  return acc.snapshot().tiers;
}

// The one counting function (what the NCCL backend charges) gives what the host measured,
// for every algorithm, group, type and size.
TEST(Accounting, CountingFunctionGivesTheMeasuredTraffic) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (Communicator* g : flat_groups(w))
    for (DType t : {DType::F32, DType::BF16, DType::I4})
      for (std::size_t n : {std::size_t(1), std::size_t(64) * g->size(), std::size_t(5) * g->size() + 3}) {
        const std::size_t block = t == DType::I4 ? 8 : 0, d = std::size_t(g->size());
        const std::size_t c = g->chunk_elements(n, t, block);
        const std::uint64_t chunk = wire_bytes(t, c, block);
        const std::string what = fmt::format("{} {} n={}", g->name(), dtype_name(t), n);
        HostBuf full(t, n, block), shard(t, c, block), recv(t, d * c, block);
        EXPECT_EQ(delta_of(acc, [&] { g->all_gather(shard.cview(), full.view()); }).tiers,
                  counted(w.topology, *g, Algorithm::RingAllGather, chunk))
            << "all_gather " << what;
        EXPECT_EQ(delta_of(acc, [&] { g->all_to_all(full.cview(), recv.view()); }).tiers,
                  counted(w.topology, *g, Algorithm::PairwiseAllToAll, chunk))
            << "all_to_all " << what;
        for (int root = 0; root < g->size(); ++root)
          EXPECT_EQ(delta_of(acc, [&] { g->broadcast(full.view(), root); }).tiers,
                    counted(w.topology, *g, Algorithm::BinomialBroadcast, wire_bytes(t, n, block), root))
              << "broadcast from " << root << " " << what;
        if (is_quantized(t)) continue;
        EXPECT_EQ(delta_of(acc, [&] { g->reduce_scatter(full.cview(), shard.view(), ReduceOp::Avg); }).tiers,
                  counted(w.topology, *g, Algorithm::RingReduceScatter, chunk))
            << "reduce_scatter " << what;
        EXPECT_EQ(delta_of(acc, [&] { g->all_reduce(full.view(), ReduceOp::Sum); }).tiers,
                  counted(w.topology, *g, Algorithm::RingAllReduce, chunk))
            << "all_reduce " << what;
      }
  for (Communicator* g : flat_groups(w))
    EXPECT_EQ(delta_of(acc, [&] { g->barrier(); }).tiers,
              counted(w.topology, *g, Algorithm::DisseminationBarrier, 0))
        << "barrier " << g->name();
}

TEST(Accounting, OpenMpiBaselineRecordsTimeButNoBytes) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  MpiFlat& g = w.comms.mpi(w.comms.num_tiers() - 1);
  HostBuf data(DType::F32, 100);
  CommStats got = delta_of(acc, [&] { g.all_reduce(data.view(), ReduceOp::Sum); });
  EXPECT_EQ(got.total(), TierTraffic{});
  EXPECT_EQ(got.kinds.at("mpi.all_reduce").calls, 1u);
  nlohmann::json j = acc.snapshot().to_json();
  EXPECT_EQ(j["emulated"], false);
  for (const auto& tier : w.topology.tiers()) EXPECT_TRUE(j["tiers"].contains(tier.name)) << tier.name;
}

TEST(Emulation, OffByDefaultAndEveryRankTakesAtLeastItsLinkTime) {
  auto& w = world();
  EXPECT_FALSE(w.ctx.emulation().enabled);
  // Slow links (20 MB/s, 200 us) so that emulated times dominate; scale 1.5 on top.
  const topo::Topology slow = test_topology(w.topology.world_size(), 0.02, 200.0);
  const double scale = 1.5;
  Context ctx(slow, EmulationOptions{true, scale});
  TierComms comms(ctx, w.groups);
  using clock = std::chrono::steady_clock;
  auto seconds_of = [](auto&& fn) {
    auto t0 = clock::now();
    fn();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const int outer = comms.num_tiers() - 1;

  // Flat ring all-gather: d-1 messages of one chunk to the right neighbour.
  Communicator& ring = comms.within(outer);
  const std::size_t c = 1024, d = std::size_t(ring.size());
  HostBuf shard = member_data(DType::F32, c, 0, 7001, w.rank), full(DType::F32, d * c);
  double predicted = 0;
  if (d > 1) {
    int right = ring.world_rank_of((ring.index() + 1) % int(d));
    predicted = double(d - 1) * link_seconds(slow.tier(slow.tier_between(w.rank, right)), 4 * c, scale);
  }
  double measured = seconds_of([&] { ring.all_gather(shard.cview(), full.view()); });
  EXPECT_GE(measured, predicted) << "ring all_gather on " << ring.name();
  for (std::size_t k = 0; k < d; ++k)  // and the data is still right
    ASSERT_EQ(0, std::memcmp(full.data.data() + 4 * c * k,
                             member_data(DType::F32, c, 0, 7001, ring.world_rank_of(int(k))).data.data(), 4 * c));

  // Hierarchical reduce-scatter: level u sends a_u - 1 messages of S_u / a_u bytes over tier u.
  if (outer > 0) {
    Hierarchy& h = comms.hierarchical(outer);
    const std::size_t n = 2048 * std::size_t(h.size());
    HostBuf in(DType::BF16, n), out(DType::BF16, h.chunk_elements(n, DType::BF16));
    double hp = 0;
    std::size_t S_u = data_bytes(DType::BF16, n);
    for (int u = 0; u <= outer; ++u) {
      std::size_t a = std::size_t(slow.tier(u).size);
      hp += double(a - 1) * link_seconds(slow.tier(u), S_u / a, scale);
      S_u /= a;
    }
    double hm = seconds_of([&] { h.reduce_scatter(in.cview(), out.view(), ReduceOp::Sum); });
    EXPECT_GE(hm, hp) << "hierarchical reduce_scatter on " << h.name();
  }

  // Pairwise all-to-all: one chunk to every other member, each over its own tier.
  HostBuf a2a_in(DType::F32, d * c), a2a_out(DType::F32, d * c);
  double ap = 0;
  for (std::size_t k = 1; k < d; ++k) {
    int peer = ring.world_rank_of(int((ring.index() + k) % d));
    ap += link_seconds(slow.tier(slow.tier_between(w.rank, peer)), 4 * c, scale);
  }
  double am = seconds_of([&] { ring.all_to_all(a2a_in.cview(), a2a_out.view()); });
  EXPECT_GE(am, ap) << "all_to_all on " << ring.name();

  CommStats stats = ctx.accounting().snapshot();
  EXPECT_TRUE(stats.emulated);
  EXPECT_EQ(stats.to_json()["emulated"], true);
}

}  // namespace
}  // namespace strata::comm::testing
