#pragma once
// Runs the schedule's per-level ops. One executor walks a chain of ops (the ops of one
// event, or of one unit in the step phase) and dispatches each on kind x algorithm x wire
// to the collectives of its level, an abstract comm::Collectives (strata's MPI
// Communicators on the cpu, NCCL communicators on the cuda device). It decides
// nothing: the op says which collective, which algorithm and which wire. A chain runs as
// comm::run_chain (compose.hpp), the composition comm::Hierarchy runs too; the executor
// adds the wire formats (fp32 between levels, encoded per op) and the buffers.
//
// Every buffer it touches is in the compute device's memory, and every copy, encoding and
// sum between ops goes through that device (device.hpp). The scalar sums (the loss, the
// gradient norm: host doubles) run on the host levels, which for a device the host cannot
// address are not the training levels (NCCL's run on device buffers only).
//
// A chain runs as one task on the communication thread (comm::Context::run), so its ops
// and the encoding between them overlap with compute; the scratch below is shared by every
// chain, which is safe because tasks run one at a time there.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "comm/api/collectives.hpp"
#include "comm/api/wire.hpp"
#include "comm/composition/compose.hpp"
#include "comm/runtime/flight.hpp"
#include "device/device.hpp"
#include "shard/schedule.hpp"

namespace strata::shard {

// fp32 <-> a wire format (bf16, fp16, int8/int4 with the view's scales) on `device`'s
// memory, through its codec (device.hpp); counts are the view's. decode with `add` adds to
// `dst` in fp32.
void encode(device::Device& device, const float* src, comm::Buf dst);
void decode(device::Device& device, comm::CBuf src, float* dst, bool add = false);

// One op's sum of a few fp64 a rank (the step's scalars): `gather` all-gathers `values` into
// the op's group_size times as many, in the views the op's wire gives (refused unless fp64,
// the values' type, and unless the op carries values.size() of them); every rank then adds
// the members' values in member order, so every rank gets the same bits.
void sum_scalars(const ScheduledOp& op, std::vector<double>& values,
                 const std::function<void(comm::CBuf mine, comm::Buf all)>& gather);

// A buffer in a wire format: data bytes plus, for int8/int4, one fp32 scale per block.
struct WireBuffer {
  explicit WireBuffer(device::Device& d) : device(&d), data(d), scales(d) {}

  device::Device* device;  // whose memory holds it, whose codec fills and reads it
  DType wire = DType::F32;
  int block = 0;
  std::size_t count = 0;  // elements
  device::Buffer<std::uint8_t> data;
  device::Buffer<float> scales;

  void reset(DType w, int block_size, std::size_t n);  // allocates exactly n elements
  // Scratch use: room for n elements of any wire format, then retyped with set_format.
  void reserve_any(int block_size, std::size_t n);
  void set_format(DType w, int block_size) { wire = w; block = block_size; }
  std::size_t bytes() const { return data.size() + 4 * scales.size(); }
  // Elements [offset, offset + n) as a comm buffer; offsets and n are whole blocks.
  comm::Buf view(std::size_t offset, std::size_t n);
  comm::CBuf cview(std::size_t offset, std::size_t n) const;
  comm::CBuf cview() const { return cview(0, count); }
  void encode(const float* src, std::size_t offset, std::size_t n) { shard::encode(*device, src, view(offset, n)); }
  void decode(std::size_t offset, std::size_t n, float* dst) const {
    shard::decode(*device, cview(offset, n), dst);
  }
  // A chunk of another buffer in the same format and of the same size (comm::wire_chunk),
  // copied within the device.
  void copy_from(const comm::WireChunk& src);
};

using Chain = std::vector<const ScheduledOp*>;

// The collectives each level of the schedule runs on (level 0: this rank's domain of the
// innermost tier, level t: its across-group of tier t): `device` for buffers in the compute
// device's memory (every training buffer), `host` for values in host memory (the scalar
// sums). Where the host addresses the device's memory they are the same objects.
struct LevelCollectives {
  std::vector<comm::Collectives*> device, host;
};

// The element-wise work between a chain's steps (comm::ChainScratch's sums, zeroing and
// copies) through `device`'s calls, on the memory its views lie in, with the host's bits:
// fp32 sums in slot order (slot 0 copied, each next slot added), data bytes and block scales
// copied and zeroed as wire.hpp's copy_elements / zero_elements do. The executor's chains sum
// and never average (divisor 1): a division is refused, not rounded another way.
class DeviceChainWork : public comm::ChainScratch {
 public:
  explicit DeviceChainWork(device::Device& d) : device_(d) {}
  void sum_slots(comm::CBuf slots, int k, comm::Buf dst, float divisor) override;
  void scale(comm::Buf b, float divisor) override;
  void zero(comm::Buf b, std::size_t first, std::size_t count) override;
  void copy(comm::CBuf src, std::size_t src_first, comm::Buf dst, std::size_t dst_first, std::size_t count) override;

 private:
  device::Device& device_;
};

class OpExecutor {
 public:
  // Scratch for buffers of `scratch_elements` (Schedule::scratch_elements), on `device`.
  OpExecutor(LevelCollectives levels, std::size_t scratch_elements, int block_size, device::Device& device);

  const LevelCollectives& levels() const { return levels_; }
  device::Device& device() const { return device_; }
  // All-gathers level by level from `src` (elements_in of the first op) in its wire format;
  // returns where the result landed: `src` itself for an empty chain, else scratch.
  comm::CBuf gather(const Chain& chain, comm::CBuf src);
  // The same from fp32 values, encoded first into the chain's wire (scratch).
  comm::CBuf gather(const Chain& chain, const float* src, std::size_t n, DType wire);
  // Reduces fp32 `input` level by level: reduce-scatters, and the all-gather half of a
  // hierarchical all-reduce; returns the fp32 result (scratch, or `input` for no ops).
  const float* reduce(const Chain& chain, const float* input);
  // One unit of a bucket: its padded fp32 gradient in, its slice at the chain's last level out.
  struct BucketPart {
    const float* input;
    std::size_t padded;
    float* output;
  };
  // Reduces a bucket's units as one buffer, element for element as each unit's own chain
  // would: the units are first interleaved (a copy) so that every member's chunk at every
  // level is the concatenation of its chunks of the units, in `parts` order. A ring sums each
  // chunk in an order fixed by the chunk's index, so every element keeps its summation order
  // (and bits); concatenating the units as they lie would move elements between chunks.
  void reduce_bucket(const Chain& chain, const std::vector<BucketPart>& parts);
  // Runs `steps` (not the schedule's: e.g. gathering the master weights for export) from
  // `src` in the executor's scratch; returns where the result landed, as gather() does.
  comm::CBuf run_steps(std::span<const comm::LevelStep> steps, comm::CBuf src);
  // Sums a few fp64 a rank over the chain's host levels: each level all-gathers them and
  // every rank adds them up in member order, so every rank gets the same bits.
  void scalar_sum(const Chain& chain, std::vector<double>& values);

  // The next chain run (gather, reduce, reduce_bucket, scalar_sum) is the ops the flight
  // recorder numbered first_seq, first_seq + 1, ...: it stamps each op's start and end there.
  // On the communication thread, inside the chain's task; 0: not recorded.
  void record_next_chain(std::uint64_t first_seq) { flight_.first = first_seq; }

  std::uint64_t scratch_bytes() const;  // what the scratch holds (schedule.hpp's scratch_bytes)
  // The ops run since the last take, in order (what a test compares with the planner).
  std::vector<const ScheduledOp*> take_trace();

 private:
  // The wire formats between a chain's levels, for comm::run_chain: the device's codec.
  class Codec final : public comm::WireCodec {
   public:
    explicit Codec(device::Device& d) : device_(d) {}
    void encode(comm::CBuf fp32, comm::Buf wire) const override;
    void decode(comm::CBuf wire, comm::Buf fp32) const override;
    void decode_add(comm::CBuf wire, comm::Buf fp32) const override;

   private:
    device::Device& device_;
  };
  // What lies between a chain's ops: fp32 in f32_a/b, a wire format in wire_a/b.
  class Between final : public DeviceChainWork {
   public:
    explicit Between(OpExecutor& e) : DeviceChainWork(e.device_), e_(e) {}
    comm::Buf carried(int i, DType t, std::size_t n, std::size_t block) override;
    comm::Buf staged(int i, DType t, std::size_t n, std::size_t block) override;

   private:
    OpExecutor& e_;
  };
  // Stamps a recorded chain's ops in the process's flight recorder, then forgets the chain.
  class FlightStamps final : public comm::ChainObserver {
   public:
    std::uint64_t first = 0;
    void step_started(std::size_t step) override { comm::flight_recorder().start(first + step); }
    void step_ended(std::size_t step) override { comm::flight_recorder().end(first + step); }
    comm::ChainObserver* take() { return first ? this : nullptr; }
  };
  comm::ChainObserver* flight_observer() { return flight_.take(); }
  void record(const ScheduledOp* op) { trace_.push_back(op); }
  // The chain's ops as steps of comm::run_chain, recorded in the trace.
  const std::vector<comm::LevelStep>& steps_of(const Chain& chain);

  LevelCollectives levels_;
  device::Device& device_;
  Codec codec_{device_};
  int block_;
  WireBuffer wire_a_, wire_b_, wire_c_;
  device::Buffer<float> f32_a_, f32_b_;
  Between between_{*this};
  std::vector<comm::LevelStep> steps_;  // steps_of's, reused
  std::vector<const ScheduledOp*> trace_;  // written on the communication thread
  FlightStamps flight_;
};

}  // namespace strata::shard
