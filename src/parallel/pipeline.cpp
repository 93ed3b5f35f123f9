#include "parallel/pipeline.hpp"

#include <algorithm>
#include <cstddef>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/plural.hpp"

namespace strata::parallel {

StageSplit stage_split(int n_layer, int stages, int stage, const std::vector<int>& stage_layers) {
  if (stages <= 0) throw Error(fmt::format("--pp {}: must be positive", stages));
  if (stage < 0 || stage >= stages) throw Error(fmt::format("--pp {}: no stage {}", stages, stage));
  if (!stage_layers.empty()) {
    const std::string given = fmt::format("--pp-layers {}", fmt::join(stage_layers, ","));
    if (static_cast<int>(stage_layers.size()) != stages)
      throw Error(fmt::format("{}: {} for --pp {}; give one a stage", given,
                              count_of(static_cast<std::int64_t>(stage_layers.size()), "block count"), stages));
    int sum = 0, first = 0;
    for (int s = 0; s < stages; ++s) {
      if (stage_layers[s] <= 0) throw Error(fmt::format("{}: stage {} has no blocks; every stage takes at least one", given, s));
      if (s < stage) first += stage_layers[s];
      sum += stage_layers[s];
    }
    if (sum != n_layer)
      throw Error(fmt::format("{}: {} blocks in all, but the model has {}", given, sum, n_layer));
    return {first, stage_layers[stage], stage == 0, stage == stages - 1};
  }
  if (n_layer % stages != 0)
    throw Error(fmt::format("--pp {}: the model's {} blocks do not split into {} equal stages; choose a divisor of {} "
                            "or give each stage's blocks with --pp-layers",
                            stages, n_layer, stages, n_layer));
  const int per = n_layer / stages;
  return {stage * per, per, stage == 0, stage == stages - 1};
}

std::vector<int> parse_stage_layers(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (std::string_view item : split_list(text)) {
    int value = 0;
    if (!parse_whole(item, value) || value <= 0)
      throw Error(fmt::format("{} '{}': '{}' is not a positive block count (give one a stage, e.g. 1,3)", flag, text,
                              item));
    out.push_back(value);
  }
  return out;
}

namespace {

// World ranks in one domain of the tier inside the pipeline's: the distance between stages.
int stage_stride(const ParallelDims& dims, const topo::Topology& physical) {
  return physical.domain_ranks(dims.pipeline_level - 1);
}

}  // namespace

int pipeline_stage(const ParallelDims& dims, const topo::Topology& physical, int world_rank) {
  return world_rank / stage_stride(dims, physical) % dims.pipeline;
}

int pipeline_peer(const ParallelDims& dims, const topo::Topology& physical, int world_rank, int stage) {
  return world_rank + (stage - pipeline_stage(dims, physical, world_rank)) * stage_stride(dims, physical);
}

const char* action_name(PipelineAction::Kind kind) {
  switch (kind) {
    case PipelineAction::Forward: return "forward";
    case PipelineAction::Backward: return "backward";
    case PipelineAction::SendActivation: return "activation-send";
    case PipelineAction::ReceiveActivation: return "activation-receive";
    case PipelineAction::SendGradient: return "activation-grad-send";
    case PipelineAction::ReceiveGradient: return "activation-grad-receive";
  }
  return "?";
}

std::vector<StageMessage> stage_messages(const std::vector<PipelineAction>& program) {
  std::vector<StageMessage> out;
  using S = StageMessage;
  for (const PipelineAction& a : program) {
    switch (a.kind) {
      case PipelineAction::SendActivation: out.push_back({S::Next, true, false, a.micro_batch}); break;
      case PipelineAction::ReceiveActivation: out.push_back({S::Previous, false, false, a.micro_batch}); break;
      case PipelineAction::SendGradient: out.push_back({S::Previous, true, true, a.micro_batch}); break;
      case PipelineAction::ReceiveGradient: out.push_back({S::Next, false, true, a.micro_batch}); break;
      case PipelineAction::Forward:
      case PipelineAction::Backward: break;
    }
  }
  return out;
}

std::size_t stage_message_elements(int batch, int seq, int hidden, int tensor_parallel, bool sequence_parallel) {
  const std::size_t whole = static_cast<std::size_t>(batch) * seq * hidden;
  return sequence_parallel && tensor_parallel > 1 ? whole / tensor_parallel : whole;
}

int micro_batches_in_flight(int stages, int stage, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

namespace {

// The compute of one stage, forwards and backwards in 1F1B order.
std::vector<PipelineAction> compute_order(int stages, int stage, int m) {
  const int warmup = std::min(stages - 1 - stage, m);
  std::vector<PipelineAction> out;
  for (int i = 0; i < warmup; ++i) out.push_back({PipelineAction::Forward, i});
  for (int k = 0; k < m; ++k) {
    if (warmup + k < m) out.push_back({PipelineAction::Forward, warmup + k});
    out.push_back({PipelineAction::Backward, k});
  }
  return out;
}

// Stage s's program: its own compute order, each forward's activation received right before
// it and each backward's gradient sent right after it (the link to s-1, in s's order), and
// the link to s+1 in s+1's order (`downstream`: s+1's compute, each forward a receive and
// each backward a send): activations sent as soon as computed and their turn has come,
// gradients received when a backward needs them.
class ProgramBuilder {
 public:
  ProgramBuilder(int stages, int stage, int m)
      : stage_(stage), stages_(stages), done_forward_(static_cast<std::size_t>(m), false) {
    if (stage + 1 < stages) downstream_ = compute_order(stages, stage + 1, m);
    for (const PipelineAction& c : compute_order(stages, stage, m)) add_compute(c);
    while (next_ < downstream_.size()) take_downstream();
  }
  std::vector<PipelineAction> program;

 private:
  void add_compute(const PipelineAction& c) {
    if (c.kind == PipelineAction::Forward) {
      if (stage_ > 0) program.push_back({PipelineAction::ReceiveActivation, c.micro_batch});
      program.push_back(c);
      done_forward_[c.micro_batch] = true;
      send_ready_activations();
      return;
    }
    if (stage_ + 1 < stages_) {
      while (!received_gradient(c.micro_batch)) take_downstream();
      send_ready_activations();
    }
    program.push_back(c);
    if (stage_ > 0) program.push_back({PipelineAction::SendGradient, c.micro_batch});
  }
  bool received_gradient(int micro_batch) const {
    const auto taken = downstream_.begin() + static_cast<std::ptrdiff_t>(next_);
    return std::find(downstream_.begin(), taken, PipelineAction{PipelineAction::Backward, micro_batch}) != taken;
  }
  void send_ready_activations() {
    while (next_ < downstream_.size() && downstream_[next_].kind == PipelineAction::Forward &&
           done_forward_[downstream_[next_].micro_batch])
      take_downstream();
  }
  // The next message on the link to s+1, in s+1's order.
  void take_downstream() {
    const PipelineAction& d = downstream_[next_++];
    if (d.kind == PipelineAction::Forward) {
      if (!done_forward_[d.micro_batch])
        throw Error(fmt::format("pipeline: stage {} would send micro-batch {}'s activation before computing it",
                                stage_, d.micro_batch));
      program.push_back({PipelineAction::SendActivation, d.micro_batch});
    } else {
      program.push_back({PipelineAction::ReceiveGradient, d.micro_batch});
    }
  }

  int stage_, stages_;
  std::vector<bool> done_forward_;
  std::vector<PipelineAction> downstream_;
  std::size_t next_ = 0;
};

}  // namespace

std::vector<PipelineAction> one_f_one_b(int stages, int stage, int micro_batches) {
  if (micro_batches <= 0) throw Error(fmt::format("--grad-accum {}: must be positive", micro_batches));
  if (stage < 0 || stage >= stages) throw Error(fmt::format("--pp {}: no stage {}", stages, stage));
  return ProgramBuilder(stages, stage, micro_batches).program;
}

}  // namespace strata::parallel
