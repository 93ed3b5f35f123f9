#pragma once
// The model interface: what the engines, the trainer and the tools know of a model. A
// family (config.hpp) is one implementation: GPT (gpt.hpp) or Llama (llama.hpp);
// make_model() picks it from the config, as torchtitan's model registry does.
//
// A model never owns parameters or gradients: every call takes a pointer to the start of
// one unit (see layout.hpp), so the caller decides where the unit lives — the single-process
// arena, or a buffer a sharding engine has just gathered. Activations are owned by the
// model, sized for a micro-batch of B sequences of T tokens (T <= config.seq_len).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "base/cpu.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/layout.hpp"
#include "model/tensor_parallel.hpp"

namespace strata::model {

struct HostBuffers;

enum class Phase { Forward, Backward };

// What a training step asks of whoever holds the parameters. forward_backward() calls it in
// exactly the order unit_event_order() returns for the model's family (each family
// documents its walk); schedule builders take that sequence as data.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  virtual const float* acquire(int unit, Phase phase) = 0;  // full (gathered) unit parameters
  virtual void release(int unit, Phase phase) = 0;
  virtual float* grads(int unit) = 0;     // full unit gradient buffer; backward accumulates (+=)
  virtual void grads_ready(int unit) = 0; // this micro-batch adds nothing more to grads(unit)
};

struct UnitEvent {
  enum Kind { Acquire, Release, GradsReady } kind;
  int unit;
  Phase phase;  // meaningless for GradsReady
  bool operator==(const UnitEvent&) const = default;
};
// The walk of one training micro-batch of the config's family.
std::vector<UnitEvent> unit_event_order(const ModelConfig& config);
// The TP collectives of one training micro-batch of `batch` x `seq` tokens under a split of
// `tp` (none for tp 1), in the order forward_backward runs them: the walk of the whole model
// in fp32 (tensor_parallel.hpp). Throws Error for a model that does not split so.
std::vector<TensorParallelCall> tensor_parallel_calls(const ModelConfig& config, int tp, int batch, int seq,
                                                      bool recompute, bool sequence_parallel = false);

class Model {
 public:
  virtual ~Model() = default;

  virtual const ParamLayout& layout() const = 0;
  const ModelConfig& config() const { return layout().config(); }
  virtual int batch() const = 0;
  virtual int seq() const = 0;

  // The family's initialization (init.hpp), deterministic in `seed`, into a full arena.
  void init_params(float* params, std::uint64_t seed) const;
  std::vector<UnitEvent> unit_event_order() const { return model::unit_event_order(config()); }

  // One micro-batch: forward, loss, backward. Gradients of (grad_scale x mean loss) are
  // accumulated (+=) into access.grads(). tokens/targets: B*T ids each (targets < vocab_size).
  // Returns the mean cross-entropy loss over the B*T positions.
  float forward_backward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                         float grad_scale) {
    const float loss = forward_training(access, tokens, targets, grad_scale);
    backward(access);
    return loss;
  }
  // forward_backward's two halves, for callers that run other micro-batches between them (a
  // pipeline stage's 1F1B, each micro-batch in flight on a model of its own): the forward,
  // keeping what the backward reads (grad_scale: a fused loss gradient may be taken here),
  // then that micro-batch's backward. The walk is forward_backward's, cut where its forward
  // ends.
  virtual float forward_training(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                                 float grad_scale) = 0;
  virtual void backward(UnitAccess& access) = 0;
  // Forward only, for validation: the forward half of the walk above.
  virtual float forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) = 0;

  // Logits of the last forward (B*T x padded_vocab_size), for tests and sampling.
  virtual const float* logits() const = 0;

  // Bytes of activations (and their gradient buffers) the model allocated, for memory reports.
  virtual std::uint64_t activation_bytes() const = 0;
  // Whether backward recomputes each block's forward instead of keeping its activations.
  virtual bool recompute() const = 0;
};

// Blocks [first_layer, end_layer); `first`: the embeddings too; `last`: the final norm and the head.
struct StageRange {
  int first_layer = 0, end_layer = 0;
  bool first = false, last = false;
};
// The whole model as one stage.
StageRange whole_model(const ModelConfig& config);

// The per-unit calls of a walk, for callers that drive it themselves: a pipeline stage runs
// the embeddings (first stage), a range of blocks and the final norm and LM head (last
// stage), and hands the residual stream and its gradient to its neighbours. Both families
// implement it (the host's kernels; under tensor parallelism each call runs its TP collectives
// and the residual stream and its gradient are whole on every TP rank, under sequence
// parallelism the rank's 1/TP of their token rows: the first stage's embeddings scatter, the
// last stage's head gathers, as the whole model's walk does).
class StageModel {
 public:
  virtual ~StageModel() = default;
  virtual void embed_forward(const float* embed_params, const std::int32_t* tokens) = 0;
  virtual void block_forward(int layer, const float* block_params) = 0;
  // head_params: the unit of ParamLayout::head_unit() (gpt2's embeddings, llama's lm_head).
  // Returns the mean loss over the micro-batch.
  virtual float head_forward(const float* norm_params, const float* head_params, const std::int32_t* targets) = 0;
  virtual void head_backward(const float* norm_params, const float* head_params, float* norm_grads, float* head_grads,
                             float grad_scale) = 0;
  virtual void block_backward(int layer, const float* block_params, float* block_grads) = 0;
  virtual void embed_backward(float* embed_grads) = 0;
  // The residual stream entering block `layer` (layer == n_layer: the final norm's input; a
  // stage writes its predecessor's output here and reads its own output at its end layer;
  // a stage model holds it for its own range's layers only, first_layer..end_layer),
  // and its gradient where backward now stands (a stage writes its successor's gradient here
  // before its last block's backward and reads its first block's input gradient after).
  virtual float* residual(int layer) = 0;
  virtual float* residual_grad() = 0;
};
// What the host's models, GPT and Llama, share: the walk (gpt_walk.hpp) over their
// StageModel steps, the micro-batch's shape, this rank's tensor-parallel slice
// (tensor_parallel.hpp), and the activations they hold alike with the head that reads them.
class HostModel : public Model, public StageModel {
 public:
  const ParamLayout& layout() const override { return layout_; }
  int batch() const override { return B_; }
  int seq() const override { return T_; }
  bool recompute() const override { return recompute_; }
  float forward_training(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                         float grad_scale) override;
  void backward(UnitAccess& access) override;
  float forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) override;
  const float* logits() const override;
  std::uint64_t activation_bytes() const override;
  float* residual_grad() override;

 protected:
  // Refuses another family's config than `family` (the model named `name`), a micro-batch it
  // cannot hold, a split with no group to reduce over.
  // `stage`: the part of the walk it holds activations for (its blocks' and their input's, the
  // embeddings' output on the first stage, the head's on the last); nullopt: the whole model.
  HostModel(const ModelConfig& config, Family family, const char* name, int batch, int seq, bool recompute,
            const TensorParallel& tp, const std::optional<StageRange>& stage);
  // The residual stream entering `layer`, refused outside the stage's first_layer..end_layer.
  void check_residual(int layer) const;
  // Under TP: the group's element-wise sum of an activation (a no-op without TP).
  void tp_sum(float* data, std::size_t n);
  // The final norm and the LM head: `norm(out, rows)` normalizes rows of the final input into
  // `out` (under sequence parallelism the rank's rows, then gathered into `normed`); the logits
  // over this rank's vocabulary rows of `head_w` (vocab_parallel.hpp); returns the mean loss
  // against `targets`.
  float head_loss(float* normed, const float* head_w, const std::int32_t* targets,
                  const std::function<void(float* out, Range rows)>& norm);
  // head_loss's backward through the final norm: the logits' gradient (the loss scaled by
  // grad_scale) into acts_->dlogits, the norm output's into `dnormed` (summed over the TP group;
  // under sequence parallelism its rank's rows, into acts_->sp_rows), the head's into
  // `head_grads`; then the family's norm: `input(d_rows, rows)` the residual gradient, and
  // `params(d_rows, R, cols)` its parameters' over R rows (under sequence parallelism into
  // acts_->sp_norm_grads, C floats for each of `norm_offsets`, completed into `norm_grads`).
  void head_backward_through_norm(const float* normed, const float* head_w, float* head_grads, float* dnormed,
                                  float grad_scale, float* norm_grads, std::initializer_list<std::size_t> norm_offsets,
                                  const std::function<void(const float* d_rows, Range rows)>& input,
                                  const std::function<void(const float* d_rows, int R, Range cols)>& params);

  HostBuffers* acts_ = nullptr;  // the family's activations (team.hpp), set by its constructor
  ParamLayout layout_;
  TensorParallelGroup* tp_group_ = nullptr;
  bool sequence_parallel_ = false;  // tensor_parallel.hpp: the norms on a 1/TP share of the rows
  SequenceShards shards_;           // its collectives
  int B_, T_;
  float grad_scale_ = 1.f;  // forward_training's, for backward
  bool recompute_ = false;
  StageRange stage_;
};

// The stage model of config.family (GPT or Llama) for micro-batches of `batch` x `seq`,
// holding `tp`'s slice (with its sequence parallelism, make_model's refusals) and activations
// for `range`'s part of the walk only.
std::unique_ptr<StageModel> make_stage_model(const ModelConfig& config, const StageRange& range, int batch, int seq,
                                             bool recompute = false, const TensorParallel& tp = {});

// The model of config.family, with activations for micro-batches of exactly `batch`
// sequences of `seq` tokens (seq <= config.seq_len), recomputing activations in backward with
// `recompute`, computing with `kernels` (the compute device's; by default the
// host's), holding `tp`'s slice of the model (tensor_parallel.hpp); throws Error
// on other sizes.
std::unique_ptr<Model> make_model(const ModelConfig& config, int batch, int seq, bool recompute = false,
                                  const Kernels& kernels = kernels_for(detected_isa()),
                                  const TensorParallel& tp = {});

// Bytes of activations (and their gradient buffers) the model of config.family allocates for
// such micro-batches: one source for the engines' memory reports and the planner.
// Under a TP split of `tp` (and sequence parallelism): one TP rank's.
std::uint64_t activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp = 1,
                               bool sequence_parallel = false);
// Those of make_stage_model's model of `range`, for one micro-batch.
std::uint64_t stage_activation_bytes(const ModelConfig& config, const StageRange& range, int batch, int seq,
                                     bool recompute, int tp = 1, bool sequence_parallel = false);

// The trivial UnitAccess over one full parameter arena and one full gradient arena.
class ArenaAccess final : public UnitAccess {
 public:
  ArenaAccess(const ParamLayout& layout, const float* params, float* grads)
      : layout_(layout), params_(params), grads_(grads) {}
  const float* acquire(int unit, Phase) override { return params_ + layout_.units()[unit].offset; }
  void release(int, Phase) override {}
  float* grads(int unit) override { return grads_ + layout_.units()[unit].offset; }
  void grads_ready(int) override {}

 private:
  const ParamLayout& layout_;
  const float* params_;
  float* grads_;
};

}  // namespace strata::model
