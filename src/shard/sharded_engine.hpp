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
#include <deque>
#include <memory>
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

  void reset(Wire w, int block_size, std::size_t n);  // allocates exactly n elements
  // Scratch use: room for n elements of any wire format, then retyped with set_format.
  void reserve_any(int block_size, std::size_t n);
  void set_format(Wire w, int block_size) { wire = w; block = block_size; }
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
  train::StepOutcome optimizer_step(const optim::AdamWConfig& hp, const train::StepArgs& args) override;
  std::pair<double, bool> all_mean_and_any(double local, bool flag) override;
  std::vector<std::string> all_gather_strings(const std::string& local) override;
  std::vector<train::StateShard> state_shards() override;
  std::vector<train::StateShard> saved_shards() override;
  void state_loaded() override;
  void gather_params(float* full) override;
  nlohmann::json step_report() override;
  nlohmann::json summary_report() override;
  nlohmann::json describe() const override;
  bool fp16_gradients() const override;

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
  // Comm-thread chains: runs of per-level ops.
  const WireBuffer* gather_chain(const std::vector<const ScheduledOp*>& ops, const WireBuffer& src, WireBuffer& a,
                                 WireBuffer& b);
  const float* reduce_chain(const std::vector<const ScheduledOp*>& ops, const float* input);
  void start_gather(int unit, model::Phase phase);
  void wait(comm::Work& work);
  void drain_reductions(std::size_t keep);
  void refresh_weights_from_master();
  std::vector<double> scalar_sum(std::vector<double> local, Purpose purpose);
  float* borrow_full();
  void give_back(float* buffer);

  model::GPT model_;
  comm::Context& ctx_;
  comm::TierComms& comms_;
  Schedule schedule_;
  int rank_ = 0;
  std::vector<std::unique_ptr<Unit>> units_;
  std::unique_ptr<Chain> chain_;
  std::vector<std::pair<int, model::Phase>> acquire_order_;  // one training micro-batch's acquires
  std::vector<std::pair<int, model::Phase>> eval_order_;     // forward only
  std::size_t next_acquire_ = 0;
  std::size_t largest_unit_ = 0;
  std::vector<AlignedBuffer<float>> pool_;
  std::vector<float*> free_buffers_;
  AlignedBuffer<float> replicated_params_;  // W replicated in a non-fp32 wire: decoded weights
  AlignedBuffer<float> replicated_grads_;   // G replicated: the full fp32 gradients
  std::deque<std::pair<comm::Work, float*>> pending_reductions_;
  bool training_ = true;
  double wall_s_ = 0, exposed_s_ = 0;
  // Step reports: traffic since the last report, and whether an evaluation ran in it.
  comm::CommStats last_stats_;
  bool evaluated_since_report_ = false;
  std::vector<nlohmann::json> step_reports_;
};

}  // namespace strata::shard
