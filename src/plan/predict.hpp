#pragma once
// Alpha-beta times of strata's host algorithms on a topology, in the model link emulation
// enforces (emulation.hpp): a message of b bytes over tier t costs
// scale * (latency + b / (bandwidth * efficiency)), and a synchronous step of a ring or
// pairwise exchange lasts as long as its slowest message. Benchmarks compare measured
// emulated times against these.
//   ring all-gather / reduce-scatter of S bytes over d ranks: (d-1) steps of chunks S/d
//   ring all-reduce: twice that
//   pairwise all-to-all: step s (1 <= s < d) sends S/d from every m to m+s
//   hierarchical: the sum over levels of the level's own collective on what it carries
//     (reduce-scatter/all-gather: S / (a_0...a_{l-1}); all-to-all: S at every level).
#include <cstddef>
#include <vector>

#include "base/collective.hpp"
#include "topo/topology.hpp"

namespace strata::comm {
class Collectives;
class Hierarchy;
}  // namespace strata::comm

namespace strata::plan {

// `members`: world ranks in ring (index) order; `chunk_bytes`: S/d on the wire.
double ring_pass_seconds(const topo::Topology& topo, const std::vector<int>& members, std::size_t chunk_bytes,
                         double scale);
double pairwise_exchange_seconds(const topo::Topology& topo, const std::vector<int>& members,
                                 std::size_t chunk_bytes, double scale);

// `total_bytes`: the padded buffer on the wire (d whole chunks; the send buffer of an
// all-to-all, the full buffer otherwise).
double predict_seconds(const topo::Topology& topo, const comm::Collectives& group, Collective kind,
                       std::size_t total_bytes, double scale);
double predict_seconds(const topo::Topology& topo, const comm::Hierarchy& group, Collective kind,
                       std::size_t total_bytes, double scale);

}  // namespace strata::plan
