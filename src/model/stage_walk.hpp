#pragma once
// A pipeline stage's walk as a Model over UnitAccess: the stage's units (the embeddings on the
// first stage, its blocks, the final norm and LM head on the last) indexed 0..k-1 in that
// order, each naming the ParamLayout unit it holds (gpt2's tied head on the last stage a
// second unit of the embeddings' parameters), and the events of one micro-batch over them,
// which StageWalk's calls follow. A sharding engine gathers and reduces a stage's units as it
// does a whole model's: the walk is data to its schedule, the StageModel calls the compute.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace strata::model {

struct StageUnits {
  std::vector<int> layout_unit;      // per stage unit: the ParamLayout unit whose parameters it holds
  std::vector<std::string> names;
  std::vector<UnitEvent> events;     // one training micro-batch, in stage-unit indices
  // The stage unit of the tied embeddings (gpt2 in more than one stage: the first stage's
  // embeddings, the last stage's copy of them as its head), -1 where none.
  int tied_unit = -1;
  bool tied_copy = false;  // tied_unit is the last stage's copy (the checkpoint and norm count the first's)
};
// `stages` > 1: with one stage the head is the embeddings unit itself, no copy.
StageUnits stage_units(const ParamLayout& layout, const StageRange& range, int stages);
// The TP collectives of one training micro-batch of the stage under a split of `tp` (none for
// tp 1), with or without sequence parallelism, in the order its walk runs them: its blocks',
// the embedding's on the first stage, the head's and the loss's on the last
// (tensor_parallel.hpp); the whole model's are model::tensor_parallel_calls. Throws Error for a
// model that does not split so, and for sequence parallelism without a split of the rows.
std::vector<TensorParallelCall> stage_tensor_parallel_calls(const ModelConfig& config, const StageRange& range, int tp,
                                                            int batch, int seq, bool recompute,
                                                            bool sequence_parallel = false);

class StageWalk final : public Model {
 public:
  // Under `tp` the stage holds its TP slice (and with sequence parallelism its rows of the
  // residual stream): layout() is that slice's.
  StageWalk(const ModelConfig& config, const StageRange& range, int stages, int batch, int seq, bool recompute,
            const TensorParallel& tp = {});
  ~StageWalk() override;

  const ParamLayout& layout() const override { return layout_; }  // the whole model's (its TP slice's)
  int batch() const override { return batch_; }
  int seq() const override { return seq_; }
  // The loss on the last stage, 0 elsewhere (the stage below wrote residual(first_layer)).
  float forward_training(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                         float grad_scale) override;
  void backward(UnitAccess& access) override;
  float forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) override;
  const float* logits() const override;  // refused: a stage keeps no logits for callers
  std::uint64_t activation_bytes() const override;
  bool recompute() const override { return recompute_; }

  StageModel& stage() { return *stage_; }
  const StageUnits& units() const { return units_; }

 private:
  ParamLayout layout_;
  StageRange range_;
  StageUnits units_;
  int batch_, seq_;
  bool recompute_;
  bool sequence_parallel_;
  std::unique_ptr<StageModel> stage_;
  float grad_scale_ = 1.0f;  // of the micro-batch whose forward ran last, for its backward
};

}  // namespace strata::model
