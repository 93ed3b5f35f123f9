#pragma once
// One collective over nested levels as a chain of per-level steps: the single place that
// says in which order the levels run, what size each level sees, and how a chain runs.
// Hierarchy (hierarchy.hpp) builds its chains here; the sharding runtime's executor runs
// the schedule's per-level ops through run_chain, and the schedule builds them with the
// step builders below. Level l of a composition over levels of sizes a_0, ..., a_k (inner
// first) sees, of a buffer of `whole` elements (whole divisible by a_0 ... a_k),
//   N_l = whole / (a_0 * ... * a_{l-1})
// elements per rank: a reduce-scatter runs inner level first (the slow outer tiers carry
// only what is left), an all-gather outer level first (the inverse).
#include <cstddef>
#include <span>
#include <vector>

#include "base/collective.hpp"
#include "comm/api/collectives.hpp"
#include "comm/api/wire.hpp"

namespace strata::comm {

// One collective over one level, in the one vocabulary (base/collective.hpp). A chain runs
// all-gathers, reduce-scatters and all-to-alls (a reduction: ZeRO++ qgZ's, the received chunks
// summed in fp32 in member order, the same order on every rank); a scheduled op
// (shard/schedule.hpp) is such a step with its place in the training step.
struct LevelStep {
  Collective kind = Collective::AllGather;
  int level = 0;                // index into the chain's levels
  DType wire = DType::F32;      // what travels
  std::size_t block = 0;        // int8/int4: elements per scale
  std::size_t elements_in = 0;  // per rank: the shard for a gather, the whole buffer for a reduction
  std::size_t elements_out = 0;
};

// N_l above.
std::size_t level_elements(std::span<const int> sizes, std::size_t whole, int level);
// A reduction of `whole` elements from sharded over the first `from` levels to sharded over
// the first `to` (from <= to): one step per level, inner first.
std::vector<LevelStep> reduce_scatter_steps(std::span<const int> sizes, std::size_t whole, int from, int to,
                                            Collective kind, DType wire, std::size_t block);
// A gather from sharded over `from` levels back to `to` (from >= to): outer level first.
std::vector<LevelStep> all_gather_steps(std::span<const int> sizes, std::size_t whole, int from, int to, DType wire,
                                        std::size_t block);

// Where a chain keeps what lies between its steps. carried(i): a step's result, in the
// chain's carried type (steps alternate i = 0, 1, so a step never writes what it reads);
// staged(i): a step's buffers in its wire when that is not the carried type (0 sent, 1
// received), and the received chunks of an all-to-all. A view stays valid until the same
// (function, i) is asked for again.
// The element-wise work between steps runs on the memory the views are in: host memory
// unless overridden. A scratch in device memory overrides the four, running them on its
// device and finished before they return, as a step's collective is.
class ChainScratch {
 public:
  virtual ~ChainScratch() = default;
  virtual Buf carried(int i, DType t, std::size_t n, std::size_t block) = 0;
  virtual Buf staged(int i, DType t, std::size_t n, std::size_t block) = 0;

  // dst = (slot 0 + ... + slot k-1) / divisor, slot j the dst.count elements at j * dst.count
  // of `slots`; fp32 sums in slot order (reduce.hpp's sum_slots).
  virtual void sum_slots(CBuf slots, int k, Buf dst, float divisor);
  virtual void scale(Buf b, float divisor);  // b /= divisor
  // Elements [first, first + count) of b and the scales of the blocks that start there
  // (wire.hpp's zero_elements).
  virtual void zero(Buf b, std::size_t first, std::size_t count);
  // Elements [src_first, +count) of src to [dst_first, +count) of dst (wire.hpp's copy_elements).
  virtual void copy(CBuf src, std::size_t src_first, Buf dst, std::size_t dst_first, std::size_t count);
};

// Numbered views of one memory: slots 0..3 are a chain's scratch (carried 0, 1; staged 0,
// 1), higher ones a composition's own working space (hierarchy.hpp).
class SlotMemory : public ChainScratch {
 public:
  virtual Buf view(int slot, DType t, std::size_t n, std::size_t block) = 0;
  Buf carried(int i, DType t, std::size_t n, std::size_t block) final { return view(i, t, n, block); }
  Buf staged(int i, DType t, std::size_t n, std::size_t block) final { return view(2 + i, t, n, block); }
  // A copy of src padded with zeros to `padded` elements, in `slot`.
  Buf padded_copy(int slot, CBuf src, std::size_t padded);
};

// Host memory from a comm::Scratch, for chains on host buffers.
class HostChainScratch final : public SlotMemory {
 public:
  explicit HostChainScratch(Scratch& scratch) : scratch_(scratch) {}
  Buf view(int slot, DType t, std::size_t n, std::size_t block) override { return scratch_.view(slot, t, n, block); }

 private:
  Scratch& scratch_;
};

// fp32 <-> a wire format, for steps whose wire is not the carried type (fp32 then). The
// quantization kernels live above comm, so whoever runs such chains supplies them.
class WireCodec {
 public:
  virtual ~WireCodec() = default;
  virtual void encode(CBuf fp32, Buf wire) const = 0;
  virtual void decode(CBuf wire, Buf fp32) const = 0;
  virtual void decode_add(CBuf wire, Buf fp32) const = 0;  // fp32 += decoded, in fp32
};

// Told when each step of a chain starts and ends (the flight recorder's stamps, flight.hpp).
class ChainObserver {
 public:
  virtual ~ChainObserver() = default;
  virtual void step_started(std::size_t step) = 0;
  virtual void step_ended(std::size_t step) = 0;
};

// Runs `steps` in order on the calling thread (inside a task already ordered on the
// communication thread: the *_inline collectives), step s over levels[s.level]. Values
// enter as `in` and are carried between steps in in.dtype; a step in another wire encodes
// them first and decodes its result (`codec` required). The last step writes `out` when
// given (else scratch) and divides its fp32 sums by `divisor` (1: sum). Returns where the
// result is (`in` itself for no steps). `observer`, if any, hears each step start and end.
CBuf run_chain(std::span<Collectives* const> levels, std::span<const LevelStep> steps, CBuf in, const Buf* out,
               float divisor, ChainScratch& scratch, const WireCodec* codec = nullptr,
               ChainObserver* observer = nullptr);

}  // namespace strata::comm
