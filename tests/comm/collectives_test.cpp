// Every collective of every group kind (flat ring, across-tier ring, hierarchical
// composition, Open MPI's own) against a plain reference computed from every member's
// data, for every dtype, sums and averages, uneven sizes (including fewer elements than
// ranks), blocking and non-blocking.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "base/error.hpp"
#include "comm/backends/hierarchy.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm_world.hpp"

namespace strata::comm::testing {
namespace {

constexpr DType kFloat[] = {DType::F32, DType::BF16, DType::F16};
constexpr DType kAll[] = {DType::F32, DType::BF16, DType::F16, DType::I8, DType::I4};
constexpr std::size_t kSizes[] = {5, 1021};  // fewer than 8 ranks' worth; a prime

std::size_t block_for(DType t) { return t == DType::I4 ? 4 : t == DType::I8 ? 8 : 0; }

std::vector<HostBuf> members_data(Collectives& g, DType t, std::size_t n, std::size_t block, std::uint64_t seed) {
  std::vector<HostBuf> v;
  for (int k = 0; k < g.size(); ++k) v.push_back(member_data(t, n, block, seed, g.world_rank_of(k)));
  return v;
}

// The element-wise sum (or average) over members of element e, in float64 (exact here).
double reduced(const std::vector<HostBuf>& m, std::size_t e, ReduceOp op) {
  double s = 0;
  for (const auto& b : m) s += b.value(e);
  return op == ReduceOp::Avg ? s / double(m.size()) : s;
}

// `src` padded with zeros to `padded` elements, as the padding rule specifies.
HostBuf padded_ref(const HostBuf& src, std::size_t padded) {
  HostBuf p(src.dtype, padded, src.block);
  std::memcpy(p.data.data(), src.data.data(), src.data.size());
  if (src.dtype == DType::I4 && src.count % 2) p.data[src.count / 2] &= 0x0f;
  std::copy(src.scales.begin(), src.scales.end(), p.scales.begin());
  return p;
}

std::string what(const std::string& label, DType t, std::size_t n) {
  return label + " " + std::string(dtype_name(t)) + " n=" + std::to_string(n);
}

TEST(Collectives, ReduceScatterAndAllReduceMatchReference) {
  auto& w = world();
  std::uint64_t seed = 1000;
  for (auto& [label, g] : w.all_groups())
    for (DType t : kFloat)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
        for (std::size_t n : kSizes) {
          ++seed;
          auto m = members_data(*g, t, n, 0, seed);
          const HostBuf& mine = m[g->index()];
          const std::size_t c = g->chunk_elements(n, t);
          HostBuf shard(t, c);
          g->reduce_scatter(mine.cview(), shard.view(), op);
          for (std::size_t i = 0; i < c; ++i) {
            std::size_t e = std::size_t(g->index()) * c + i;
            ASSERT_EQ(shard.value(i), e < n ? reduced(m, e, op) : 0.0)
                << "reduce_scatter " << what(label, t, n) << " " << reduce_op_name(op) << " i=" << i;
          }
          HostBuf all = mine;
          g->all_reduce(all.view(), op);
          for (std::size_t e = 0; e < n; ++e)
            ASSERT_EQ(all.value(e), reduced(m, e, op))
                << "all_reduce " << what(label, t, n) << " " << reduce_op_name(op) << " e=" << e;
        }
}

TEST(Collectives, RealValuedSumsStayWithinTheRoundingBoundAndAgreeAcrossMembers) {
  auto& w = world();
  const std::size_t n = 777;
  for (auto& [label, g] : w.all_groups())
    for (DType t : kFloat) {
      std::vector<HostBuf> m;
      for (int k = 0; k < g->size(); ++k) {
        HostBuf b(t, n);
        std::mt19937 rng(std::uint32_t(77 + g->world_rank_of(k)));
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (std::size_t i = 0; i < n; ++i) b.set(i, u(rng));
        m.push_back(std::move(b));
      }
      HostBuf all = m[g->index()];
      g->all_reduce(all.view(), ReduceOp::Sum);
      // Each of the d-1 additions rounds to the element type (the partial sum travels in it).
      const double unit = t == DType::F32 ? 0x1p-24 : t == DType::BF16 ? 0x1p-8 : 0x1p-11;
      for (std::size_t e = 0; e < n; ++e) {
        double exact = 0, abs_sum = 0;
        for (const auto& b : m) exact += b.value(e), abs_sum += std::fabs(b.value(e));
        ASSERT_NEAR(all.value(e), exact, (g->size() + 1) * unit * abs_sum) << what(label, t, n) << " e=" << e;
      }
      // All members hold the same bits: gather every member's result and compare.
      HostBuf everyone(t, n * g->size());
      CBuf mine = all.cview();
      g->all_gather(mine, everyone.view());
      for (int k = 0; k < g->size(); ++k)
        ASSERT_EQ(0, std::memcmp(everyone.data.data() + data_bytes(t, n * k), all.data.data(), all.data.size()))
            << what(label, t, n) << " member " << k;
    }
}

TEST(Collectives, AllGatherMovesEveryDtypeWithScales) {
  auto& w = world();
  std::uint64_t seed = 2000;
  for (auto& [label, g] : w.all_groups())
    for (DType t : kAll)
      for (std::size_t n : kSizes) {
        ++seed;
        const std::size_t block = block_for(t);
        const std::size_t c = g->chunk_elements(n, t, block);
        auto shards = members_data(*g, t, c, block, seed);
        HostBuf full(t, n, block);
        std::fill(full.data.begin(), full.data.end(), 0xee);
        g->all_gather(shards[g->index()].cview(), full.view());
        std::vector<std::uint8_t> want;
        std::vector<float> want_scales;
        for (const auto& s : shards) {
          want.insert(want.end(), s.data.begin(), s.data.end());
          want_scales.insert(want_scales.end(), s.scales.begin(), s.scales.end());
        }
        want.resize(full.data.size());
        want_scales.resize(full.scales.size());
        ASSERT_EQ(full.data, want) << "all_gather " << what(label, t, n);
        ASSERT_EQ(full.scales, want_scales) << "all_gather " << what(label, t, n);
      }
}

TEST(Collectives, AllToAllMovesEveryDtypeWithScales) {
  auto& w = world();
  std::uint64_t seed = 3000;
  for (auto& [label, g] : w.all_groups())
    for (DType t : kAll)
      for (std::size_t n : kSizes) {
        ++seed;
        const std::size_t block = block_for(t);
        const std::size_t c = g->chunk_elements(n, t, block);
        const std::size_t D = std::size_t(g->size());
        auto m = members_data(*g, t, n, block, seed);
        HostBuf recv(t, D * c, block);
        g->all_to_all(m[g->index()].cview(), recv.view());
        for (std::size_t j = 0; j < D; ++j) {
          HostBuf sender = padded_ref(m[j], D * c);  // its chunk index() lands in slot j
          std::size_t bytes = data_bytes(t, c), k = std::size_t(g->index());
          ASSERT_EQ(0, std::memcmp(recv.data.data() + j * bytes, sender.data.data() + k * bytes, bytes))
              << "all_to_all " << what(label, t, n) << " slot " << j;
          std::size_t ns = scale_count(t, c, block);
          for (std::size_t s = 0; s < ns; ++s)
            ASSERT_EQ(recv.scales[j * ns + s], sender.scales[k * ns + s]) << "all_to_all scales " << what(label, t, n);
        }
      }
}

TEST(Collectives, BroadcastFromFirstAndLastMember) {
  auto& w = world();
  std::uint64_t seed = 4000;
  for (auto& [label, g] : w.all_groups())
    for (DType t : kAll)
      for (int root : {0, g->size() - 1}) {
        ++seed;
        const std::size_t n = 301, block = block_for(t);
        HostBuf want = member_data(t, n, block, seed, g->world_rank_of(root));
        HostBuf data(t, n, block);
        if (g->index() == root) data = want;
        else std::fill(data.data.begin(), data.data.end(), 0xab);
        g->broadcast(data.view(), root);
        ASSERT_EQ(data.data, want.data) << "broadcast " << what(label, t, n) << " root " << root;
        ASSERT_EQ(data.scales, want.scales) << "broadcast " << what(label, t, n) << " root " << root;
      }
}

TEST(Collectives, BarrierHoldsEveryMemberUntilTheLastArrives) {
  auto& w = world();
  using clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for all local processes
  for (auto& [label, g] : w.all_groups()) {
    std::int64_t entered = 0;
    if (g->index() == g->size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      entered = clock::now().time_since_epoch().count();
    }
    g->barrier();
    std::int64_t left = clock::now().time_since_epoch().count();
    std::int64_t last_entered = entered;
    g->broadcast(Buf(DType::F32, &last_entered, 2), g->size() - 1);  // 8 bytes as two fp32 slots
    EXPECT_GE(left, last_entered) << label;
  }
}

TEST(Collectives, HierarchicalAllToAllReductionEqualsReduceScatter) {
  auto& w = world();
  std::uint64_t seed = 5000;
  for (int tier = 1; tier < w.comms.num_tiers(); ++tier) {
    Hierarchy& h = w.comms.hierarchical(tier);
    for (DType t : kFloat)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
        for (std::size_t n : kSizes) {
          ++seed;
          HostBuf mine = member_data(t, n, 0, seed, w.rank);
          const std::size_t c = h.chunk_elements(n, t);
          HostBuf a(t, c), b(t, c);
          h.reduce_scatter(mine.cview(), a.view(), op);
          h.reduce_scatter_by_all_to_all(mine.cview(), b.view(), op);
          ASSERT_EQ(a.data, b.data) << h.name() << " " << dtype_name(t) << " n=" << n;
        }
    // The exposed phases: N_0 = padded n, each level divides by its size, the last is the shard.
    const std::size_t n = 1021;
    EXPECT_EQ(h.level_elements(n, DType::F32, 0, 0), h.chunk_elements(n, DType::F32) * h.size());
    EXPECT_EQ(h.level_elements(n, DType::F32, 0, h.num_levels()), h.chunk_elements(n, DType::F32));
  }
}

TEST(Collectives, HierarchyIndexNestsInnerTiersOutermost) {
  auto& w = world();
  const auto& topo = w.topology;
  for (int tier = 1; tier < w.comms.num_tiers(); ++tier) {
    Hierarchy& h = w.comms.hierarchical(tier);
    // index = digits (position in each tier's domain), the innermost tier most significant.
    int index = 0;
    for (int u = 0; u <= tier; ++u) {
      int digit = (w.rank % topo.domain_ranks(u)) / topo.domain_ranks(u - 1);
      index = index * topo.tier(u).size + digit;
    }
    EXPECT_EQ(h.index(), index) << h.name();
    EXPECT_EQ(h.world_rank_of(h.index()), w.rank) << h.name();
    std::vector<int> seen;
    for (int k = 0; k < h.size(); ++k) seen.push_back(h.world_rank_of(k));
    std::sort(seen.begin(), seen.end());
    for (std::size_t k = 0; k < seen.size(); ++k)
      EXPECT_EQ(seen[k], w.rank / topo.domain_ranks(tier) * topo.domain_ranks(tier) + int(k)) << h.name();
  }
}

TEST(Collectives, NonBlockingCallsOverlapComputationAndComplete) {
  auto& w = world();
  const int outer = w.comms.num_tiers() - 1;
  Collectives& hier = outer > 0 ? static_cast<Collectives&>(w.comms.hierarchical(outer)) : w.comms.within(0);
  Collectives& inner = w.comms.within(0);
  Collectives& mpi = w.comms.mpi(outer);
  const std::size_t n = 4099;
  auto gm = members_data(hier, DType::BF16, hier.chunk_elements(n, DType::BF16), 0, 6001);
  auto rm = members_data(inner, DType::F32, n, 0, 6002);
  auto am = members_data(mpi, DType::F16, n, 0, 6003);
  HostBuf gathered(DType::BF16, n), shard(DType::F32, inner.chunk_elements(n, DType::F32)), summed = am[mpi.index()];

  Work g = hier.all_gather_async(gm[hier.index()].cview(), gathered.view());
  Work r = inner.reduce_scatter_async(rm[inner.index()].cview(), shard.view(), ReduceOp::Avg);
  Work a = mpi.all_reduce_async(summed.view(), ReduceOp::Sum);
  double acc = 0;  // computation that overlaps the queued collectives
  long polls = 0;
  while (!a.test()) {
    for (int i = 0; i < 1000; ++i) acc += std::sqrt(double(i + polls));
    ++polls;
  }
  EXPECT_TRUE(g.test());  // queued earlier on the same thread, so finished before `a`
  EXPECT_TRUE(r.test());
  g.wait();
  r.wait();
  a.wait();
  EXPECT_GT(acc, 0);
  for (std::size_t e = 0; e < n; ++e)
    ASSERT_EQ(gathered.value(e), gm[e / gm[0].count].value(e % gm[0].count)) << "e=" << e;
  for (std::size_t i = 0; i < shard.count; ++i) {
    std::size_t e = std::size_t(inner.index()) * shard.count + i;
    ASSERT_EQ(shard.value(i), e < n ? reduced(rm, e, ReduceOp::Avg) : 0.0);
  }
  for (std::size_t e = 0; e < n; ++e) ASSERT_EQ(summed.value(e), reduced(am, e, ReduceOp::Sum));

  // Every other operation queued at once, then waited for in reverse order.
  const std::size_t block = 8, c8 = hier.chunk_elements(n, DType::I8, block);
  auto sm = members_data(hier, DType::I8, n, block, 6004);
  HostBuf a2a(DType::I8, c8 * hier.size(), block), bc(DType::I4, 301, block);
  HostBuf bc_want = member_data(DType::I4, 301, block, 6005, hier.world_rank_of(0));
  if (hier.index() == 0) bc = bc_want;
  Work x = hier.all_to_all_async(sm[hier.index()].cview(), a2a.view());
  Work y = hier.broadcast_async(bc.view(), 0);
  Work z = hier.barrier_async();
  z.wait();
  EXPECT_TRUE(x.test());
  EXPECT_TRUE(y.test());
  y.wait();
  x.wait();
  EXPECT_EQ(bc.data, bc_want.data);
  EXPECT_EQ(bc.scales, bc_want.scales);
  for (int j = 0; j < hier.size(); ++j) {
    HostBuf sender = padded_ref(sm[j], c8 * hier.size());
    ASSERT_EQ(0, std::memcmp(a2a.data.data() + j * c8, sender.data.data() + hier.index() * c8, c8)) << "slot " << j;
  }

  // A handle dropped without wait() finishes in its destructor: the buffer is complete after.
  HostBuf again = am[mpi.index()];
  { Work dropped = w.comms.within(outer).all_reduce_async(again.view(), ReduceOp::Sum); }
  for (std::size_t e = 0; e < n; ++e) ASSERT_EQ(again.value(e), summed.value(e));
}

TEST(Collectives, RefusesReductionsOfQuantizedDataAndMisfitBuffers) {
  auto& w = world();
  for (auto& [label, g] : w.all_groups()) {
    const std::size_t n = 64, c = g->chunk_elements(n, DType::I8, 8);
    HostBuf q(DType::I8, n, 8), qs(DType::I8, c, 8);
    try {
      g->reduce_scatter(q.cview(), qs.view(), ReduceOp::Sum);
      ADD_FAILURE() << label << ": reduce_scatter of int8 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
    }
    HostBuf q4(DType::I4, n, 8);
    try {
      g->all_reduce(q4.view(), ReduceOp::Avg);
      ADD_FAILURE() << label << ": all_reduce of int4 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("int4"), std::string::npos) << e.what();
    }
    HostBuf f(DType::F32, n), wrong(DType::F32, g->chunk_elements(n, DType::F32) + 1);
    EXPECT_THROW(g->reduce_scatter(f.cview(), wrong.view(), ReduceOp::Sum), Error) << label;
    EXPECT_THROW(g->all_gather(wrong.cview(), f.view()), Error) << label;
    HostBuf b16(DType::BF16, g->chunk_elements(n, DType::BF16));
    EXPECT_THROW(g->all_gather(b16.cview(), f.view()), Error) << label;  // dtype mismatch
    EXPECT_THROW(g->broadcast(f.view(), g->size()), Error) << label;
    HostBuf odd_block(DType::I4, n, 3);
    EXPECT_THROW(g->broadcast(odd_block.view(), 0), Error) << label;
  }
}

// A composition's memory that is not the Hierarchy's own: it keeps its views apart and does
// the element-wise work itself, counting it. A Hierarchy over it must give the host
// hierarchy's bits, with every copy, padding and sum between levels through it: what a
// device memory (comm/nccl/device_memory.hpp) relies on.
class CountingMemory final : public SlotMemory {
 public:
  Buf view(int slot, DType t, std::size_t n, std::size_t block) override { return scratch_.view(slot, t, n, block); }
  void sum_slots(CBuf slots, int k, Buf dst, float divisor) override {
    ++sums;
    ChainScratch::sum_slots(slots, k, dst, divisor);
  }
  void scale(Buf b, float divisor) override { ChainScratch::scale(b, divisor); }
  void zero(Buf b, std::size_t first, std::size_t count) override {
    ++zeros;
    ChainScratch::zero(b, first, count);
  }
  void copy(CBuf src, std::size_t src_first, Buf dst, std::size_t dst_first, std::size_t count) override {
    ++copies;
    ChainScratch::copy(src, src_first, dst, dst_first, count);
  }
  int sums = 0, zeros = 0, copies = 0;

 private:
  Scratch scratch_;
};

TEST(Collectives, HierarchyDoesItsMemoryWorkThroughItsSlotMemory) {
  auto& w = world();
  const int top = w.comms.num_tiers() - 1;
  Hierarchy& host = w.comms.hierarchical(top);
  std::vector<Collectives*> levels{&w.comms.within(0)};
  for (int u = 1; u <= top; ++u) levels.push_back(&w.comms.across(u));
  auto memory = std::make_unique<CountingMemory>();
  CountingMemory& counted = *memory;
  Hierarchy h("hier:counted", w.ctx, levels, std::move(memory));
  ASSERT_EQ(h.index(), host.index());
  const std::size_t n = 1021, c = h.chunk_elements(n, DType::BF16), D = std::size_t(h.size());
  std::uint64_t seed = 7000;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    HostBuf mine = member_data(DType::BF16, n, 0, ++seed, w.rank);
    HostBuf a(DType::BF16, c), b(DType::BF16, c);
    host.reduce_scatter(mine.cview(), a.view(), op);
    h.reduce_scatter(mine.cview(), b.view(), op);
    EXPECT_EQ(a.data, b.data) << "reduce_scatter";
    host.reduce_scatter_by_all_to_all(mine.cview(), a.view(), op);
    h.reduce_scatter_by_all_to_all(mine.cview(), b.view(), op);
    EXPECT_EQ(a.data, b.data) << "reduce_scatter_by_all_to_all";
    HostBuf x = mine, y = mine;
    host.all_reduce(x.view(), op);
    h.all_reduce(y.view(), op);
    EXPECT_EQ(x.data, y.data) << "all_reduce";
  }
  HostBuf shard = member_data(DType::I4, h.chunk_elements(n, DType::I4, 4), 4, ++seed, w.rank);
  HostBuf f1(DType::I4, n, 4), f2(DType::I4, n, 4);
  host.all_gather(shard.cview(), f1.view());
  h.all_gather(shard.cview(), f2.view());
  EXPECT_EQ(f1.data, f2.data) << "all_gather";
  EXPECT_EQ(f1.scales, f2.scales) << "all_gather";
  HostBuf send = member_data(DType::F32, n, 0, ++seed, w.rank), r1(DType::F32, D * h.chunk_elements(n, DType::F32)),
          r2 = r1;
  host.all_to_all(send.cview(), r1.view());
  h.all_to_all(send.cview(), r2.view());
  EXPECT_EQ(r1.data, r2.data) << "all_to_all";
  // n is never a multiple of D * c here, so every collective padded (a zero and a copy);
  // the all-to-all reductions summed.
  EXPECT_GT(counted.copies, 0);
  EXPECT_GT(counted.zeros, 0);
  EXPECT_GT(counted.sums, 0);
}

// Each member's n real values (not integers: every rounding shows), the same on every run.
HostBuf real_data(DType t, std::size_t n, int world_rank) {
  HostBuf b(t, n);
  std::mt19937 rng(std::uint32_t(4242 + world_rank));
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (std::size_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

// What the three ring collectives of `g` give on a member's data, and what they accounted.
struct RingResults {
  HostBuf shard, all, gathered;
  CommStats traffic;
};

RingResults run_rings(Communicator& g, Accounting& acc, const HostBuf& mine, DType t) {
  const std::size_t n = mine.count, c = g.chunk_elements(n, t);
  RingResults r{HostBuf(t, c), mine, HostBuf(t, n), {}};
  CommStats before = acc.snapshot();
  g.reduce_scatter(mine.cview(), r.shard.view(), ReduceOp::Avg);
  g.all_reduce(r.all.view(), ReduceOp::Sum);
  g.all_gather(r.shard.cview(), r.gathered.view());
  r.traffic = acc.snapshot() - before;
  return r;
}

// Every flat group of strata's own: each tier's, and across each tier.
std::vector<Communicator*> flat_groups(World& w) {
  std::vector<Communicator*> groups;
  for (int t = 0; t < w.comms.num_tiers(); ++t) {
    groups.push_back(&w.comms.within(t));
    if (t > 0) groups.push_back(&w.comms.across(t));
  }
  return groups;
}

constexpr std::size_t kPieceBytes = 24;  // 6 fp32 or 12 bf16 elements, 2 int8 blocks of 8, 4 int4 blocks of 4

TEST(Collectives, RingPiecesOnTheWireChangeNeitherBitsNorAccountedTraffic) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (Communicator* g : flat_groups(w)) {
    const std::size_t d = std::size_t(g->size());
    for (DType t : kFloat)
      // Chunks of 12 elements (whole pieces), of 13 (a short last piece), and one with padding.
      for (std::size_t n : {12 * d, 13 * d, 13 * d + 1}) {
        const HostBuf mine = real_data(t, n, w.rank);
        g->set_piece_bytes(0);
        const RingResults whole = run_rings(*g, acc, mine, t);
        g->set_piece_bytes(kPieceBytes);
        const RingResults pieces = run_rings(*g, acc, mine, t);
        g->set_piece_bytes(kDefaultPieceBytes);
        const std::string at = what("ring " + g->name(), t, n);
        EXPECT_EQ(pieces.shard.data, whole.shard.data) << "reduce_scatter " << at;
        EXPECT_EQ(pieces.all.data, whole.all.data) << "all_reduce " << at;
        EXPECT_EQ(pieces.gathered.data, whole.gathered.data) << "all_gather " << at;
        EXPECT_EQ(pieces.traffic.tiers, whole.traffic.tiers) << at;
      }
    // int8 moves data and scales: blocks of 8, pieces of 2 blocks, chunks of 3 blocks.
    const std::size_t block = 8, c = 3 * block;
    const HostBuf shard = member_data(DType::I8, c, block, 77, w.rank);
    HostBuf whole(DType::I8, c * d, block), pieces(DType::I8, c * d, block);
    g->set_piece_bytes(0);
    g->all_gather(shard.cview(), whole.view());
    g->set_piece_bytes(kPieceBytes);
    g->all_gather(shard.cview(), pieces.view());
    g->set_piece_bytes(kDefaultPieceBytes);
    EXPECT_EQ(pieces.data, whole.data) << "int8 all_gather ring " << g->name();
    EXPECT_EQ(pieces.scales, whole.scales) << "int8 all_gather ring " << g->name();
  }
}

// The piece size is process-wide (comm.piece_kib): a communicator takes the one in effect
// when it is made.
TEST(Collectives, ACommunicatorTakesTheProcesssPieceSize) {
  auto& w = world();
  set_piece_bytes(4096);
  Communicator small(w.ctx, MPI_COMM_WORLD, "pieces-of-4k");
  set_piece_bytes(0);
  Communicator whole(w.ctx, MPI_COMM_WORLD, "whole-messages");
  set_piece_bytes(kDefaultPieceBytes);
  EXPECT_EQ(small.piece_bytes(), 4096u);
  EXPECT_EQ(whole.piece_bytes(), 0u);
  EXPECT_EQ(w.comms.within(0).piece_bytes(), kDefaultPieceBytes);
  EXPECT_THROW(set_piece_bytes(kMaxPieceBytes + 1), Error);
}

// What an all-to-all of `send` and a broadcast of it from the first and the last member give,
// and what they accounted.
struct ExchangeResults {
  HostBuf exchanged, from_first, from_last;
  CommStats traffic;
};

ExchangeResults run_exchanges(Communicator& g, Accounting& acc, const HostBuf& send) {
  ExchangeResults r{HostBuf(send.dtype, send.count, send.block), send, send, {}};
  CommStats before = acc.snapshot();
  g.all_to_all(send.cview(), r.exchanged.view());
  g.broadcast(r.from_first.view(), 0);
  g.broadcast(r.from_last.view(), g.size() - 1);
  r.traffic = acc.snapshot() - before;
  return r;
}

// ZeRO++'s int4 gradient exchange (all-to-all) and the weight broadcasts, on the wire in
// pieces, against whole messages.
TEST(Collectives, AllToAllAndBroadcastPiecesOnTheWireChangeNeitherBitsNorAccountedTraffic) {
  auto& w = world();
  auto& acc = w.ctx.accounting();
  for (Communicator* g : flat_groups(w)) {
    const std::size_t d = std::size_t(g->size());
    // Chunks of 13 elements: two whole fp32 pieces and a short one; int4 chunks of 13 blocks
    // of 4 (data and scales): three whole pieces of 4 blocks and a short one.
    for (auto [t, block] : {std::pair{DType::F32, std::size_t(0)}, std::pair{DType::I4, std::size_t(4)}}) {
      const std::size_t n = 13 * d * (block ? block : 1);
      const HostBuf send = member_data(t, n, block, 91, w.rank);
      g->set_piece_bytes(0);
      const ExchangeResults whole = run_exchanges(*g, acc, send);
      g->set_piece_bytes(kPieceBytes);
      const ExchangeResults pieces = run_exchanges(*g, acc, send);
      g->set_piece_bytes(kDefaultPieceBytes);
      const std::string at = what(g->name(), t, n);
      EXPECT_EQ(pieces.exchanged.data, whole.exchanged.data) << "all_to_all " << at;
      EXPECT_EQ(pieces.exchanged.scales, whole.exchanged.scales) << "all_to_all " << at;
      EXPECT_EQ(pieces.from_first.data, whole.from_first.data) << "broadcast " << at;
      EXPECT_EQ(pieces.from_last.data, whole.from_last.data) << "broadcast " << at;
      EXPECT_EQ(pieces.from_last.scales, whole.from_last.scales) << "broadcast " << at;
      EXPECT_EQ(pieces.traffic.tiers, whole.traffic.tiers) << at;
      if (g->index() + 1 < g->size()) {
        EXPECT_NE(whole.from_last.data, send.data) << "broadcast moved nothing " << at;
      }
    }
  }
}

TEST(TierComms, NcclBackendRefusedWithoutNccl) {
  if (nccl_built()) GTEST_SKIP() << "this build has NCCL (test_comm_nccl, label gpu, drives it)";
  auto& w = world();
  try {
    TierComms comms(w.ctx, w.groups, Backend::Nccl);
    FAIL() << "a build without NCCL built NCCL groups";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without NCCL"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::comm::testing
