#pragma once
// Hierarchical collectives: one collective over D = a_0 * a_1 * ... * a_k ranks composed
// of collectives over nested levels, innermost first. Level l is a group (a host
// Communicator, or an NcclCommunicator with the buffers in device memory) over this
// rank's peers that differ from it only in digit l; with the tier groups of groups.hpp the
// levels are within(0), across(1), ..., across(T) and the composition spans within(T).
// A member's digits are its positions in the levels: d_l = level(l).index(), and its
// index in the composition is nested, innermost digit most significant:
//     index = ((d_0 * a_1 + d_1) * a_2 + d_2) ... * a_k + d_k.
// Example, 2 nodes x 2 GPUs x 2 dies, levels within(gpu) [2], across(node) [2],
// across(cluster) [2]: world rank 5 = die 1 of GPU 0 of node 1 has digits (1, 0, 1) and
// index 1*4 + 0*2 + 1 = 5; world rank 1 has digits (1, 0, 0) and index 4, world rank 2
// has digits (0, 1, 0) and index 2. So ranks sharing an inner domain own neighbouring
// chunks of the outer tiers' shards (the nesting a W-inside-G-inside-OS sharding needs),
// and every layout statement of collectives.hpp holds with this index.
//
// Padding: a buffer of n elements is padded once to N = D * c, c = chunk_count(n, D,
// granule); every level then divides evenly. Reduce-scatter, all-gather and the
// all-to-all reduction are chains of per-level steps (compose.hpp: its order, its level
// sizes N_l = N / (a_0 ... a_{l-1}), and its runner, which the sharding runtime's executor
// runs too):
//   reduce_scatter: RS over level 0 (N -> N/a_0), then over level 1, ... (inner tier
//                   first: the slow outer tiers carry only what is left). Average divides
//                   once, at the last level, by D.
//   all_gather:     AG over level k first, then k-1, ..., level 0 (the inverse).
//   all_reduce:     reduce_scatter then all_gather as above.
//   all_to_all:     one exchange per level, inner first; before level l each rank holds,
//                   from each of the a_0...a_{l-1} sources differing in digits < l, the
//                   chunks for the destinations sharing its digits < l; it packs them per
//                   level-l peer, exchanges, and unpacks. Same result as a flat all-to-all
//                   in index order.
//   broadcast:      over level k among ranks sharing the root's digits < k, then k-1, ...
//   barrier:        level 0, then 1, ..., k.
//
// reduce_scatter_by_all_to_all is ZeRO++ qgZ's reduction unquantized (a chain of
// Collective::AllToAll steps): for l = 0..k, level(l).all_to_all of N_l elements
// (level_elements gives N_l), then the a_l received chunks summed in fp32 in member order (average only at the
// last level, by D). The last N_{k+1} = c elements are the shard index() owns, as after
// reduce_scatter. The executor runs the same steps with quantized wires in between.
#include <memory>
#include <string>
#include <vector>

#include "comm/composition/compose.hpp"
#include "comm/host/communicator.hpp"
#include "comm/runtime/queued.hpp"

namespace strata::comm {

class Hierarchy final : public QueuedCollectives<Collectives> {
 public:
  // Levels inner first; the compositions run as tasks on ctx's communication thread, each
  // level's collectives inline there. Each level's world ranks must be evenly strided (as
  // tier groups are), else Error. `memory`: where the buffers are, and the copies, padding
  // and sums between levels (host memory when null).
  Hierarchy(std::string name, Context& ctx, std::vector<Collectives*> levels,
            std::unique_ptr<SlotMemory> memory = nullptr);

  const std::string& name() const override { return name_; }
  int size() const override { return size_; }
  int index() const override { return index_; }
  int world_rank_of(int index) const override;

  int num_levels() const { return int(levels_.size()); }
  Collectives& level(int l) { return *levels_.at(l); }
  const Collectives& level(int l) const { return *levels_.at(l); }
  // N_l: elements entering level l for a buffer of n elements of t (padding applied).
  std::size_t level_elements(std::size_t n, DType t, std::size_t block, int l) const;

  void all_gather_inline(CBuf shard, Buf full) override;
  void reduce_scatter_inline(CBuf full, Buf shard, float divisor) override {
    run_reduction(full, shard, divisor, Collective::ReduceScatter);
  }
  void all_reduce_inline(Buf data, float divisor) override;
  void all_to_all_inline(CBuf send, Buf recv) override;
  void broadcast_inline(Buf data, int root) override;
  void barrier_inline() override;
  // The qgZ recipe unquantized: per level an all-to-all, then an fp32 sum of the received
  // chunks in slot order. Same layout as reduce_scatter (the sums run in another order).
  Work reduce_scatter_by_all_to_all_async(CBuf full, Buf shard, ReduceOp op);
  void reduce_scatter_by_all_to_all(CBuf full, Buf shard, ReduceOp op) {
    reduce_scatter_by_all_to_all_async(full, shard, op).wait();
  }

 private:
  void run_reduction(CBuf full, Buf shard, float divisor, Collective kind);  // a reduce-scatter's chain

  std::string name_;
  std::vector<Collectives*> levels_;
  int size_ = 1;
  int index_ = 0;
  std::vector<int> digits_;
  std::vector<int> level_sizes_;
  // The levels with more than one member (levels of one only copy), and this rank's digits
  // in them; a group of one keeps level 0 so that its local copies still happen.
  std::vector<Collectives*> active_;
  std::vector<int> active_digits_;
  std::vector<int> active_sizes_;
  Scratch scratch_;                     // host memory_'s
  std::unique_ptr<SlotMemory> memory_;
};

}  // namespace strata::comm
