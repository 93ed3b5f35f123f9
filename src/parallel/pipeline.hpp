#pragma once
// Pipeline parallelism as data: which blocks a stage holds, which world ranks a stage's
// neighbours are, and the 1F1B program of one stage over m micro-batches with its sends to
// and receives from the neighbouring stages. The runtime (shard/pipeline_engine.hpp) walks
// this program; its sends are the ops its accounting counts.
//
// Rank order (dims.hpp): the P stages are P consecutive domains of the tier
// `dims.pipeline_level` (the outermost by default), so a rank's peer in the next stage is
// the rank one such domain further on, and the ranks of one stage, in world order, are the
// stage's data-parallel replicas.
#include <cstddef>
#include <string>
#include <vector>

#include "parallel/dims.hpp"
#include "topo/topology.hpp"

namespace strata::parallel {

// The blocks [first_layer, first_layer + layers) of one stage of `stages`; the embeddings
// live with the first stage, the final norm and the head with the last. `stage_layers`
// (--pp-layers): the blocks of each stage, one positive count a stage summing to n_layer;
// empty: equal stages, a split that does not divide the layers refused naming --pp. A list
// of another length or sum is refused naming --pp-layers.
struct StageSplit {
  int first_layer = 0, layers = 0;
  bool first = false, last = false;
  int end_layer() const { return first_layer + layers; }
};
StageSplit stage_split(int n_layer, int stages, int stage, const std::vector<int>& stage_layers = {});
// --pp-layers' text ("1,3"): positive block counts, comma-separated; Error names `flag`.
std::vector<int> parse_stage_layers(const std::string& flag, const std::string& text);

// The stage of `world_rank` and the world rank holding the same replica in `stage`.
int pipeline_stage(const ParallelDims& dims, const topo::Topology& physical, int world_rank);
int pipeline_peer(const ParallelDims& dims, const topo::Topology& physical, int world_rank, int stage);

// One step of a stage's 1F1B program. Receives come right before the compute that reads
// them, sends right after the compute that makes them, in the order that matches the
// neighbour's program message for message (each pair of stages exchanges its messages in
// one order on both sides, so blocking sends never wait on each other in a cycle).
struct PipelineAction {
  enum Kind { Forward, Backward, SendActivation, ReceiveActivation, SendGradient, ReceiveGradient } kind;
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};
const char* action_name(PipelineAction::Kind kind);

// The messages of a stage's program, in program order: each send or receive one micro-batch's
// activation (B·T·hidden values, up to the next stage; stage_message_elements) or its
// gradient (down to the previous one), exchanged with one neighbour. The runtime's pipeline
// sends exactly these (shard::PipelineSchedule) and the planner prices them
// (plan::ModelParallelPlan).
struct StageMessage {
  enum Neighbour { Previous, Next } neighbour;
  bool sent = false;  // false: received
  bool gradient = false;
  int micro_batch = 0;
  // One name for both ends of a message: "activation-send" or "activation-grad-send".
  const char* purpose() const { return gradient ? "activation-grad-send" : "activation-send"; }
};
std::vector<StageMessage> stage_messages(const std::vector<PipelineAction>& program);
// The values of one such message, for micro-batches of `batch` x `seq` tokens of `hidden`
// values: the whole activation, or under sequence parallelism over a TP group of
// `tensor_parallel` ranks (Megatron's) the rank's 1/tensor_parallel of the token rows, which
// each TP rank sends to the same TP rank of the neighbouring stage.
std::size_t stage_message_elements(int batch, int seq, int hidden, int tensor_parallel, bool sequence_parallel);

// Stage `stage` of `stages` over `micro_batches`: min(stages - 1 - stage, m) forwards to warm
// up, then one forward and one backward in turn, then the backwards left.
std::vector<PipelineAction> one_f_one_b(int stages, int stage, int micro_batches);
// The micro-batches whose activations a stage holds at once: min(stages - stage, m).
int micro_batches_in_flight(int stages, int stage, int micro_batches);

}  // namespace strata::parallel
