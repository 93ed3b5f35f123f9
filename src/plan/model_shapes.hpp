#pragma once
// The shape of a dense decoder the planner prices: its units for the schedule, its FLOPs
// and its activation memory. Presets cover the models the papers trained (GPT-NeoX, Llama 2)
// and strata's own runnable models; strata's own take their units from model::ParamLayout
// through shard::unit_plan, so the planner prices exactly the UnitPlan the runtime executes.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.hpp"
#include "model/hf_config.hpp"
#include "model/tensor_parallel.hpp"
#include "parallel/pipeline.hpp"
#include "shard/schedule.hpp"

namespace strata::plan {

enum class Mlp { Gelu, SwiGlu };  // GELU: up + down (ffn wide); SwiGLU: gate + up + down
enum class Norm { LayerNorm, RmsNorm };

// Activation recomputation (--recompute, docs/planner.md "Recomputation"): none; full, every
// block's forward rerun in backward from its input; or selective-op, torchtitan's per-op
// selective checkpointing (torchtitan/distributed/activation_checkpoint.py): each block keeps
// the outputs of its odd-numbered aten.mm calls and of the attention kernel, and backward
// reruns the even-numbered matmuls and every non-matmul op, never the attention core.
class Recompute {
 public:
  enum Mode { None, Full, SelectiveOp };
  constexpr Recompute(Mode mode = None) : mode_(mode) {}
  Mode mode() const { return mode_; }
  // Whether backward reruns any of a block's forward (full or selective-op).
  explicit operator bool() const { return mode_ != None; }
  friend bool operator==(Recompute, Recompute) = default;

 private:
  Mode mode_;
};
Recompute parse_recompute(std::string_view text);  // none | full | selective-op; Error names --recompute
std::string_view recompute_name(Recompute r);

// One projection of a block's forward, a token's view: `in` x `out` weights. Row-parallel
// projections (attention and MLP outputs) leave their output whole on every tensor-parallel
// rank; the others split it.
struct BlockLinear {
  const char* name;
  int in = 0, out = 0;
  bool row_parallel = false;
};

// What backward reruns of one unit's forward under a recomputation mode, a token.
struct Rerun {
  double matmul_flops = 0;        // recomputed matmuls (under full also the attention products)
  int matmuls = 0;                // how many (the calibrated compute curve charges each its fixed cost)
  double memory_bound_bytes = 0;  // selective-op: bytes its recomputed non-matmul ops read and write
};

struct ModelShape {
  std::string name = "custom";
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;          // grouped-query attention: heads sharing one K/V head = heads / kv_heads
  int ffn = 0;               // width of the MLP's hidden layer
  int vocab = 0;             // rows of the embedding (and of the LM head)
  int seq = 0;               // default tokens a sequence (the papers' training length)
  int learned_positions = 0; // rows of a learned position embedding (GPT-2); 0: rotary, no parameters
  Mlp mlp = Mlp::Gelu;
  Norm norm = Norm::LayerNorm;
  bool biases = true;        // linear layers carry biases
  bool qkv_biases = false;   // only the Q, K and V projections carry biases (Qwen2); with `biases` every one does
  bool tied_head = false;    // LM head reuses the token embedding
  // strata's own models: units come from model::ParamLayout of this config (of its TP split
  // too, which the runtime splits; a pipeline stage's, its units of it).
  std::optional<model::ModelConfig> gpt{};
  // Where the shape came from when it is not a preset (a Hugging Face config.json: its
  // architecture and path), and what was read there but not priced, each with why.
  std::string source{};
  std::vector<std::string> notes{};
  // The part one rank holds under model parallelism (docs/planner.md "Tensor and pipeline
  // parallelism"): Megatron splits of every block matrix and vocab-parallel embeddings and
  // LM head over `tensor_parallel` ranks (norms and row-parallel biases replicated), and the
  // units of pipeline stage `stage` of `stages` (its blocks parallel::stage_split's, as the
  // runtime splits them: layers/stages each, or `pp_layers`'s count; the embedding on the
  // first, the final norm and head on the last). Units, FLOPs and activations are the
  // slice's; parameter and model-FLOP counts stay the whole model's.
  int tensor_parallel = 1;
  int stage = 0, stages = 1;
  std::vector<int> pp_layers{};  // --pp-layers: blocks of each stage; empty: equal stages

  // Presets: gpt-neox-20b, gpt-neox-10b, llama2-7b, llama2-13b, llama2-70b, tinyllama-1.1b, gpt2-124m, and
  // strata's tiny, mini, small, llama-tiny and llama-small (priced from the runtime's layout). Throws Error listing them.
  static ModelShape preset(std::string_view name);
  static std::vector<std::string> preset_names();
  // "custom" (all of layers, hidden, heads, vocab, seq must then be set) or a preset, then
  // FIELD=VALUE overrides (fields: layers hidden heads kv_heads ffn vocab seq learned_positions
  // mlp norm biases tied_head). A changed strata model is priced as a shape, not a layout.
  // NAME may also be a Hugging Face config.json or its folder (model/hf_config.hpp): GPT-2 is
  // priced from the runtime's layout as the gpt2-124m preset is, the others as shapes.
  static ModelShape from_name_and_fields(std::string_view name, const std::vector<std::string>& fields);
  static ModelShape from_hf(const model::HfModel& hf);

  // The architecture in words, for the plan's header: family, norm, MLP, attention, biases,
  // positions, head, sizes.
  std::string describe() const;

  void validate() const;  // throws Error naming the field

  // The slice one rank of (tp, stage of stages) holds; throws Error naming --tp, --pp or
  // --pp-layers when the shape does not split so (heads, kv_heads, ffn, vocab by tp; the
  // layers by parallel::stage_split).
  ModelShape slice(int tp, int stage_index, int num_stages, const std::vector<int>& stage_layers = {}) const;
  parallel::StageSplit stage_split() const;  // the blocks of this slice's stage
  bool sliced() const { return tensor_parallel > 1 || stages > 1; }
  // What decides the slice's TP collectives of one micro-batch (model::tensor_parallel_calls,
  // the runtime's own list): its blocks, hidden size, whether it holds the embedding (first
  // stage) and the head and loss (last stage), its activations in `activations`.
  model::TensorParallelWalk tensor_parallel_walk(int micro_batch, int seq, bool recompute, DType activations,
                                                 bool sequence_parallel = false) const;
  ModelShape whole() const;  // the unsliced model (its strata layout is not kept)

  int head_dim() const { return hidden / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
  std::int64_t num_params() const;         // every parameter, embeddings included
  std::int64_t matmul_params() const;      // parameters a token multiplies: blocks' matrices + LM head

  // Units and the order a micro-batch touches them: embeddings, blocks, final norm, and an
  // LM head unit when the head is untied.
  shard::UnitPlan unit_plan() const;
  // Forward FLOPs a token attributed to each unit of unit_plan(): a block's matmuls and
  // attention (QK^T and AV: 4·hidden·seq), the LM head's matmul to the unit whose compute
  // segment runs it (ln_f when tied, the head unit when untied), embeddings none.
  std::vector<double> forward_flops_per_token(int seq) const;
  // Matmuls of each unit's forward (the calibrated compute curve charges each its fixed
  // cost): a block's fused qkv, attention projection, QK^T and AV, and 2 (GELU) or 3
  // (SwiGLU) MLP matmuls; the LM head's one, where forward_flops_per_token puts its FLOPs.
  std::vector<int> forward_matmuls() const;
  // A block's projections in the order its forward runs them, as the reference systems write
  // the blocks: SwiGLU (torchtitan's Llama) wq, wk, wv, wo, w1 (gate), w3 (up), w2 (down);
  // GELU (GPT) the fused qkv, the attention projection, fc, the MLP projection.
  std::vector<BlockLinear> block_linears() const;
  // The projections selective-op recomputes: torchtitan's policy counts aten.mm calls and
  // saves the odd ones; a linear with a bias runs aten.addmm, which its save list lacks, so
  // with biases every projection is recomputed.
  std::vector<BlockLinear> selective_op_recomputed() const;
  // What backward reruns of each unit of unit_plan() (blocks only; act_bytes an element for
  // the memory-bound part).
  std::vector<Rerun> rerun_per_token(int seq, Recompute recompute, int act_bytes) const;

  // Model FLOPs a token, forward + backward: 6·matmul_params + 12·layers·hidden·seq.
  double model_flops_per_token(int seq) const;
  // FLOPs the hardware runs: forward + backward + what recomputation reruns (full: each
  // block's forward again, 8·block params + 6·head params + 16·layers·hidden·seq).
  double hardware_flops_per_token(int seq, Recompute recompute) const;

  // Activation bytes a rank holds for one micro-batch of `micro_batch` x `seq` tokens
  // (docs/planner.md): act_bytes an element; flash attention keeps no seq x seq matrix. For
  // strata's own models in fp32 with dense attention: what the runtime's model allocates (its
  // TP slice's, with sequence parallelism too). Sequence parallelism (tp > 1) otherwise as
  // Megatron keeps it: every block tensor and the final norm's a 1/tp share.
  std::uint64_t activation_bytes(int micro_batch, int seq, int act_bytes, Recompute recompute, bool flash_attention,
                                 bool sequence_parallel = false) const;

  nlohmann::json to_json() const;
};

}  // namespace strata::plan
