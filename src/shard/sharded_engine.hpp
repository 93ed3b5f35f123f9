#pragma once
// The sharding runtime: an Engine that holds, for every unit, only this rank's slices of the
// weights (W, in the weight wire format), the secondary copy (hpZ), the gradient accumulator
// (G) and the optimizer state (OS), and runs the collectives of shard::Schedule — exactly
// those, in that order — to give the model full units when it needs them.
//
// Each event's run of per-level ops (a gather, a reduction) is one task on the communication
// thread (comm::Context), so it overlaps with the model's compute; the compute thread only
// waits when it needs the result. Time spent waiting is the step's exposed communication.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/aligned.hpp"
#include "comm/context.hpp"
#include "comm/tier_comms.hpp"
#include "model/gpt.hpp"
#include "shard/schedule.hpp"
#include "train/engine.hpp"

namespace strata::shard {

// A buffer in a wire format: data bytes plus, for int8/int4, one fp32 scale per block.
struct WireBuffer {
  Wire wire = Wire::F32;
  int block = 0;
  std::size_t count = 0;  // elements
  AlignedBuffer<std::uint8_t> data;
  AlignedBuffer<float> scales;

  void reset(Wire w, int block_size, std::size_t n);
  std::size_t bytes() const { return data.size() + 4 * scales.size(); }
  // Elements [offset, offset + n) as a comm buffer; offsets and n are whole blocks.
  comm::Buf view(std::size_t offset, std::size_t n);
  comm::CBuf cview(std::size_t offset, std::size_t n) const;
  void encode(const float* src, std::size_t offset, std::size_t n);     // fp32 -> wire
  void decode(std::size_t offset, std::size_t n, float* dst) const;     // wire -> fp32
  void decode_add(std::size_t offset, std::size_t n, float* dst) const; // dst += wire, in fp32
};

struct StepTiming {
  double compute_s = 0;        // step wall time less exposed communication
  double exposed_comm_s = 0;   // compute thread waiting on communication
};

class ShardedEngine final : public train::Engine, private model::UnitAccess {
 public:
  // Collective over the world. Parameters are initialised from `seed` exactly as the
  // single-process trainer does, then each rank keeps its slices.
  ShardedEngine(const model::GPTConfig& config, int batch, int seq, comm::Context& ctx, comm::TierComms& comms,
                const ShardSpec& spec, int accumulation_steps, std::uint64_t seed);
  ~ShardedEngine() override;

  const model::ParamLayout& layout() const override { return model_.layout(); }
  int rank() const override { return rank_; }
  int world_size() const override { return schedule_.world_size(); }
  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float grad_scale) override;
  float eval_loss(const std::int32_t* tokens, const std::int32_t* targets) override;
  double optimizer_step(const optim::AdamWConfig& hp, float lr, std::int64_t step) override;
  double all_mean(double local) override;
  std::vector<std::string> all_gather_strings(const std::string& local) override;
  std::vector<train::StateShard> state_shards() override;
  std::vector<train::StateShard> saved_shards() override;
  void state_loaded() override;
  void gather_params(float* full) override;

  const Schedule& schedule() const { return schedule_; }
  StateMemory memory_bytes() const;            // what this rank actually allocated, by state
  StepTiming take_timing();                    // since the last call
  comm::Context& context() { return ctx_; }

 private:
  struct Unit;
  struct Chain;

  // model::UnitAccess
  const float* acquire(int unit, model::Phase phase) override;
  void release(int unit, model::Phase phase) override;
  float* grads(int unit) override;
  void grads_ready(int unit) override;

  comm::Communicator& level_comm(int level);
  std::vector<const ScheduledOp*> ops_for(const std::vector<ScheduledOp>& ops, Purpose purpose, int unit) const;
  void start_gather(int unit, model::Phase phase);
  void wait(comm::Work& work);
  void refresh_weights_from_master(bool communicate);
  double scalar_sum(double local, Purpose purpose);
  float* borrow_full();
  void give_back(float* buffer);

  model::GPT model_;
  comm::Context& ctx_;
  comm::TierComms& comms_;
  Schedule schedule_;
  int rank_ = 0;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::pair<int, model::Phase>> acquire_order_;  // one micro-batch's acquires
  std::size_t next_acquire_ = 0;
  std::vector<AlignedBuffer<float>> pool_;
  std::vector<float*> free_buffers_;
  AlignedBuffer<float> replicated_params_;  // W replicated: the full fp32 weights, all units
  AlignedBuffer<float> replicated_grads_;   // G replicated: the full fp32 gradients
  std::vector<comm::Work> pending_reductions_;
  float micro_grad_scale_ = 1.0f;
  bool training_ = true;
  StepTiming timing_;
};

}  // namespace strata::shard
