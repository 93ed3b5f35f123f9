#include "plan/emit.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "plan/names.hpp"
#include "plan/search.hpp"

namespace strata::plan {

namespace {

// Where each framework's keys are defined (checked against these; docs/planner.md lists them).
constexpr const char* kDeepSpeedSource =
    "DeepSpeed: deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig: stage, reduce_bucket_size, "
    "allgather_bucket_size, stage3_prefetch_bucket_size, overlap_comm, zero_hpz_partition_size, "
    "zero_quantized_weights, zero_quantized_gradients, mics_shard_size) and deepspeed/runtime/config.py (batch "
    "sizes, bf16, communication_data_type, activation_checkpointing)";
constexpr const char* kTorchtitanSource =
    "torchtitan: torchtitan/config/job_config.py ([training] local_batch_size, global_batch_size, seq_len, "
    "mixed_precision_param, mixed_precision_reduce; [parallelism] data_parallel_replicate_degree, "
    "data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree, pipeline_parallel_degree, "
    "pipeline_parallel_schedule, pipeline_parallel_microbatch_size; [activation_checkpoint] mode, "
    "selective_ac_option)";
constexpr const char* kFsdp2Source =
    "PyTorch: torch.distributed.device_mesh.init_device_mesh; torch.distributed.fsdp.fully_shard(module, mesh=, "
    "reshard_after_forward=bool|int, mp_policy=MixedPrecisionPolicy(param_dtype=, reduce_dtype=))";
constexpr const char* kMegatronSource =
    "Megatron-LM: megatron/training/arguments.py (--tensor-model-parallel-size, --pipeline-model-parallel-size, "
    "--micro-batch-size, --global-batch-size, --bf16, --grad-reduce-in-bf16, --use-distributed-optimizer, "
    "--num-distributed-optimizer-instances, --use-torch-fsdp2, --recompute-granularity, --recompute-method, "
    "--recompute-num-layers, --use-flash-attn, --ddp-bucket-size, --overlap-grad-reduce, --overlap-param-gather)";

std::string tier_of(const topo::Topology& t, int levels) { return levels == 0 ? "none" : t.tier(levels - 1).name; }

// Every state sharded over the same `levels` tiers (0: replicated), as FSDP, MiCS and HSDP do.
void shard_all_over(shard::ShardSpec& s, const topo::Topology& t, int levels) {
  s.weights = s.grads = s.optimizer = tier_of(t, levels);
}

// A framework that reduce-scatters the step's gradients: no all-reduce back to the shard.
void reduce_scatter_step(FrameworkPlan& p, std::string_view who) {
  if (!p.spec.step_grad_allreduce) return;
  p.spec.step_grad_allreduce = false;
  p.gaps.push_back(
      fmt::format("{} reduce-scatters the step's gradients; nearest: no all-reduce back to the shard", who));
}

// The shard layouts each framework names; a layout it cannot name becomes its nearest.
void deepspeed_layout(FrameworkPlan& p, const shard::LevelSpec& l, const topo::Topology& t, const ModelParallel& mp) {
  shard::ShardSpec& s = p.spec;
  const int L = l.num_levels;
  const bool same = l.weights == l.grads && l.grads == l.optimizer;
  const bool stage = (l.weights == 0 && l.grads == 0 && (l.optimizer == 0 || l.optimizer == L)) ||
                     (l.weights == 0 && l.grads == L && l.optimizer == L) || (same && l.weights == L);
  const bool mics = same && l.weights > 0 && l.weights < L;
  if (!stage && !mics) {
    if (l.weights > 0) {
      // ZeRO-3 over all ranks; weights kept narrower become its hpZ secondary copy.
      shard_all_over(s, t, L);
      if (l.secondary == 0 && l.weights < L) s.secondary = tier_of(t, l.weights);
      p.gaps.push_back(fmt::format("DeepSpeed shards weights, gradients and optimizer state over the same ranks "
                                   "(ZeRO-3) or gradients and optimizer state over all (ZeRO-1/2); strata's plan "
                                   "shards weights over '{}', gradients over '{}', optimizer over '{}'. Nearest: ZeRO-3 "
                                   "over all ranks{}",
                                   tier_of(t, l.weights), tier_of(t, l.grads), tier_of(t, l.optimizer),
                                   s.secondary != "none" ? fmt::format(" with its hpZ copy over '{}'", s.secondary)
                                                         : std::string()));
    } else {
      s.grads = l.grads > 0 ? tier_of(t, L) : "none";
      s.optimizer = tier_of(t, L);
      p.gaps.push_back(fmt::format("DeepSpeed's ZeRO-1/2 shard over all data-parallel ranks; strata's plan shards "
                                   "gradients over '{}' and optimizer state over '{}'. Nearest: ZeRO-{} over all ranks",
                                   tier_of(t, l.grads), tier_of(t, l.optimizer), l.grads > 0 ? 2 : 1));
    }
  }
  if (mics && (l.secondary > 0 || is_quantized(s.weight_wire) || is_quantized(s.grad_wire))) {
    s.secondary = "none";
    s.weight_wire = s.grad_wire = compute_dtype(p.workload.precision);
    p.gaps.push_back("hpZ and quantized wires are ZeRO-3 features that DeepSpeed's MiCS (sharding inside a group) "
                     "does not combine with; nearest: MiCS with the precision's wires");
  }
  const shard::LevelSpec n = shard::resolve(s, t);
  if (n.weights == 0 && (l.secondary > 0 || is_quantized(s.weight_wire) || is_quantized(s.grad_wire))) {
    s.secondary = "none";
    s.weight_wire = s.grad_wire = compute_dtype(p.workload.precision);
    p.gaps.push_back("ZeRO++'s hpZ, qwZ and qgZ are ZeRO-3 features; nearest: the precision's wires");
  }
  if (s.grad_wire == DType::I8 && n.weights > 0) {
    s.grad_wire = DType::I4;
    p.gaps.push_back("DeepSpeed's qgZ (zero_quantized_gradients) reduces gradients in int4, not int8; nearest: int4");
  }
  if (mp.pp > 1 && n.grads > 0) {
    shard_all_over(s, t, 0);
    s.optimizer = tier_of(t, L);
    s.secondary = "none";
    s.weight_wire = s.grad_wire = compute_dtype(p.workload.precision);
    p.gaps.push_back("DeepSpeed's pipeline engine runs with ZeRO-1 at most; nearest: ZeRO-1 over all ranks");
  }
  if (mp.tp > 1)
    p.gaps.push_back(fmt::format("DeepSpeed has no tensor parallelism of its own: run the TP {} split under "
                                 "Megatron-DeepSpeed (--tensor-model-parallel-size {}); the batch sizes here count "
                                 "data-parallel ranks",
                                 mp.tp, mp.tp));
  if (p.workload.recompute == Recompute::SelectiveOp) {
    p.workload.recompute = Recompute::Full;
    p.gaps.push_back("DeepSpeed's activation checkpointing reruns whole blocks; nearest: full recomputation");
  }
  if (!s.free_after_forward) {
    s.free_after_forward = true;
    p.gaps.push_back("DeepSpeed ZeRO-3 releases gathered weights by its reuse distance, not until backward; "
                     "nearest: gathered again in backward");
  }
}

// FSDP2 and torchtitan: fully_shard over a 1-D mesh (FSDP), a 2-D replicate x shard mesh
// (HSDP), or replication (DDP).
void fsdp_layout(FrameworkPlan& p, const shard::LevelSpec& l, const topo::Topology& t, const std::string& who) {
  const bool same = l.weights == l.grads && l.grads == l.optimizer;
  if (!same) {
    shard_all_over(p.spec, t, l.optimizer);
    p.gaps.push_back(fmt::format("{} shards weights, gradients and optimizer state over the same ranks; strata's "
                                 "plan shards weights over '{}', gradients over '{}', optimizer over '{}'. Nearest: all "
                                 "three over '{}'",
                                 who, tier_of(t, l.weights), tier_of(t, l.grads), tier_of(t, l.optimizer),
                                 tier_of(t, l.optimizer)));
  }
  shard::ShardSpec& s = p.spec;
  const DType base = compute_dtype(p.workload.precision);
  if (is_quantized(s.weight_wire) || is_quantized(s.grad_wire) || is_quantized(s.step_grad_wire)) {
    s.weight_wire = s.grad_wire = s.step_grad_wire = base;
    p.gaps.push_back(fmt::format("{} has no quantized gathers or reductions (ZeRO++'s qwZ/qgZ); nearest: {}", who,
                                 dtype_name(base)));
  }
}

void fsdp2_layout(FrameworkPlan& p, const shard::LevelSpec& l, const topo::Topology& t, const ModelParallel& mp) {
  fsdp_layout(p, l, t, "FSDP2");
  shard::ShardSpec& s = p.spec;
  if (s.weights == "none") s.secondary = "none";
  reduce_scatter_step(p, "FSDP2");
  if (mp.pp > 1)
    p.gaps.push_back(fmt::format("FSDP2 alone runs no pipeline: the {} stages need torch.distributed.pipelining "
                                 "(torchtitan's --emit torchtitan writes them)",
                                 mp.pp));
}

void torchtitan_layout(FrameworkPlan& p, const shard::LevelSpec& l, const topo::Topology& t, const ModelParallel&) {
  fsdp_layout(p, l, t, "torchtitan");
  shard::ShardSpec& s = p.spec;
  if (s.secondary != "none") {
    s.secondary = "none";
    p.gaps.push_back("torchtitan's fsdp_reshard_after_forward is default, always or never: it cannot reshard to a "
                     "smaller group (FSDP2's reshard_after_forward=int, ZeRO++'s hpZ); nearest: resharded over the "
                     "whole group");
  }
  if (s.grad_wire != DType::F32 || s.step_grad_wire != DType::F32) {
    s.grad_wire = s.step_grad_wire = DType::F32;
    p.gaps.push_back("torchtitan reduces gradients in float32 (mixed_precision_reduce accepts float32 only); "
                     "nearest: float32 reductions");
  }
  reduce_scatter_step(p, "torchtitan");
  if (!p.workload.flash_attention) {
    p.workload.flash_attention = true;
    p.gaps.push_back("torchtitan's attention is scaled_dot_product_attention (flash): it keeps no seq x seq "
                     "probabilities; nearest: flash attention");
  }
}

void megatron_layout(FrameworkPlan& p, const shard::LevelSpec& l, const topo::Topology& t, const ModelParallel& mp) {
  shard::ShardSpec& s = p.spec;
  const int L = l.num_levels;
  const bool ddp = l.weights == 0 && l.grads == 0 && l.optimizer == 0;
  const bool distributed_optimizer = l.weights == 0 && l.grads == 0 && l.optimizer > 0;
  const bool fsdp = l.weights == L && l.grads == L && l.optimizer == L && mp.pp == 1;
  if (!ddp && !distributed_optimizer && !fsdp) {
    if (l.weights > 0 && mp.pp == 1) {
      shard_all_over(s, t, L);
      p.gaps.push_back(fmt::format("Megatron-LM shards weights only through --use-torch-fsdp2 (all three states over "
                                   "all data-parallel ranks); strata's plan shards weights over '{}', gradients over "
                                   "'{}', optimizer over '{}'. Nearest: --use-torch-fsdp2",
                                   tier_of(t, l.weights), tier_of(t, l.grads), tier_of(t, l.optimizer)));
    } else {
      s.weights = s.grads = "none";
      s.optimizer = tier_of(t, std::max(l.optimizer, 1));
      p.gaps.push_back(fmt::format("Megatron-LM's distributed optimizer shards the optimizer state only{}; nearest: "
                                   "--use-distributed-optimizer over '{}'",
                                   mp.pp > 1 ? " (its FSDP2 does not run with pipelines)" : "", s.optimizer));
    }
  }
  const DType base = compute_dtype(p.workload.precision);
  if (s.secondary != "none" || is_quantized(s.weight_wire) || is_quantized(s.grad_wire) || is_quantized(s.step_grad_wire)) {
    s.secondary = "none";
    s.weight_wire = s.grad_wire = s.step_grad_wire = base;
    p.gaps.push_back(fmt::format("Megatron-LM has no secondary weight copy or quantized collectives; nearest: {}",
                                 dtype_name(base)));
  }
  if (s.step_grad_allreduce || !s.free_after_forward) {
    s.step_grad_allreduce = false;
    s.free_after_forward = true;
    p.gaps.push_back("Megatron-LM reduce-scatters the step's gradients and regathers weights for backward; nearest: "
                     "so");
  }
  if (p.workload.recompute == Recompute::SelectiveOp) {
    p.workload.recompute = Recompute::Full;
    p.gaps.push_back("Megatron-LM's --recompute-granularity selective reruns the attention core, not torchtitan's "
                     "per-op policy; nearest: full recomputation");
  }
}

// ---- the files ----

struct Facts {
  const EmitRequest& request;
  const FrameworkPlan& plan;
  const Estimate& strata;
  const Estimate& framework;
  topo::Topology dp_topology;
  int dp = 1;                // data-parallel ranks
  int micro_batch = 1;       // sequences a data-parallel rank runs a micro-batch
  int micro_batches = 1;     // micro-batches a step
  std::size_t largest_unit = 0;  // elements of the largest unit a rank holds (its TP slice)
  std::size_t global_batch() const { return static_cast<std::size_t>(micro_batch) * micro_batches * dp; }
};

std::string priced(const Estimate& e) {
  return fmt::format("{} {}: step {:.4g} s, {:.0f} tokens/s a device, MFU {:.1f}%, {}", e.strategy, spec_label(e.spec),
                     e.step_time_s, e.tokens_per_s / e.world_size, e.mfu * 100, e.memory_verdict());
}

// The comment every file starts with: the plan, in words, priced; what the framework cannot
// run and the nearest it runs, priced too; where the keys come from.
std::vector<std::string> comment_lines(const Facts& f, const char* source) {
  std::vector<std::string> lines{
      fmt::format("strata plan for {}: {} on '{}' ({} devices: TP {} x PP {} x data-parallel {})",
                  framework_name(f.plan.framework), f.request.model.name, f.request.topology.name(),
                  f.request.topology.world_size(), f.strata.tensor_parallel, f.strata.pipeline_stages, f.dp),
      fmt::format("strata's plan: {}", priced(f.strata)),
      fmt::format("in words: {}", f.request.chosen.spec.describe(f.dp_topology))};
  if (f.plan.gaps.empty()) {
    lines.push_back(fmt::format("{} runs this plan as priced.", framework_name(f.plan.framework)));
  } else {
    lines.push_back(fmt::format("{} cannot run strata's plan as priced:", framework_name(f.plan.framework)));
    for (const std::string& g : f.plan.gaps) lines.push_back("  - " + g);
    lines.push_back(fmt::format("this file configures the nearest it runs, priced: {}", priced(f.framework)));
    lines.push_back(fmt::format("the nearest in words: {}", f.plan.spec.describe(f.dp_topology)));
  }
  lines.push_back(fmt::format("global batch {} sequences of {} tokens a step = micro-batch {} x {} micro-batches x {} "
                              "data-parallel ranks",
                              f.global_batch(), f.plan.workload.seq, f.micro_batch, f.micro_batches, f.dp));
  lines.push_back(fmt::format("keys: {}", source));
  return lines;
}

std::string hash_comment(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += "# " + l + "\n";
  return out;
}

std::string deepspeed_json(const Facts& f) {
  const shard::ShardSpec& s = f.plan.spec;
  const shard::LevelSpec l = shard::resolve(s, f.dp_topology);
  const bool bf16 = f.plan.workload.precision == Precision::BF16;
  const int stage = l.weights > 0 ? 3 : l.grads > 0 ? 2 : l.optimizer > 0 ? 1 : 0;
  // Sharded gradients are reduced a unit a call: a bucket the largest unit; replicated ones
  // in buckets of bucket_bytes of fp32 (4 bytes an element).
  const std::size_t reduce_bucket = l.grads > 0 ? f.largest_unit : s.bucket_bytes / 4;
  nlohmann::ordered_json zero = {{"stage", stage},
                                 {"overlap_comm", true},
                                 {"contiguous_gradients", true},
                                 {"reduce_scatter", true},
                                 {"reduce_bucket_size", reduce_bucket},
                                 {"allgather_bucket_size", f.largest_unit}};
  if (stage == 3) {
    zero["stage3_prefetch_bucket_size"] = static_cast<std::size_t>(std::max(s.prefetch, 1)) * f.largest_unit;
    if (l.weights < l.num_levels) zero["mics_shard_size"] = l.degree(l.weights);
    zero["zero_hpz_partition_size"] = l.degree(l.secondary);
    zero["zero_quantized_weights"] = s.weight_wire == DType::I8;
    zero["zero_quantized_gradients"] = is_quantized(s.grad_wire);
  }
  nlohmann::ordered_json j = {{"_strata", comment_lines(f, kDeepSpeedSource)},
                              {"train_batch_size", f.global_batch()},
                              {"train_micro_batch_size_per_gpu", f.micro_batch},
                              {"gradient_accumulation_steps", f.micro_batches},
                              {"bf16", {{"enabled", bf16}}}};
  if (!is_quantized(s.grad_wire)) j["communication_data_type"] = s.grad_wire == DType::BF16 ? "bf16" : "fp32";
  j["zero_optimization"] = zero;
  if (f.plan.workload.recompute == Recompute::Full)
    j["activation_checkpointing"] = {{"partition_activations", false},
                                     {"contiguous_memory_optimization", false},
                                     {"cpu_checkpointing", false},
                                     {"number_checkpoints", f.request.model.layers},
                                     {"synchronize_checkpoint_boundary", false},
                                     {"profile", false}};
  return j.dump(2) + "\n";
}

std::string torchtitan_toml(const Facts& f) {
  const shard::ShardSpec& s = f.plan.spec;
  const shard::LevelSpec l = shard::resolve(s, f.dp_topology);
  const int shard = l.degree(l.weights);
  const Workload& w = f.plan.workload;
  std::string out = hash_comment(comment_lines(f, kTorchtitanSource));
  // Under a pipeline the local batch is split into micro-batches; otherwise the global batch
  // over the local one is the accumulation.
  const int local = f.strata.pipeline_stages > 1 ? f.micro_batch * f.micro_batches : f.micro_batch;
  out += fmt::format("\n[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\n"
                     "mixed_precision_param = \"{}\"\nmixed_precision_reduce = \"float32\"\n",
                     local, f.global_batch(), w.seq, w.precision == Precision::BF16 ? "bfloat16" : "float32");
  out += fmt::format("\n[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n"
                     "fsdp_reshard_after_forward = \"{}\"\ntensor_parallel_degree = {}\npipeline_parallel_degree = {}\n",
                     f.dp / shard, shard, s.free_after_forward ? "always" : "never", f.strata.tensor_parallel,
                     f.strata.pipeline_stages);
  if (f.strata.pipeline_stages > 1)
    out += fmt::format("pipeline_parallel_schedule = \"1F1B\"\npipeline_parallel_microbatch_size = {}\n", f.micro_batch);
  out += fmt::format("\n[activation_checkpoint]\nmode = \"{}\"\n", w.recompute == Recompute::Full          ? "full"
                                                                  : w.recompute == Recompute::SelectiveOp ? "selective"
                                                                                                          : "none");
  if (w.recompute == Recompute::SelectiveOp) out += "selective_ac_option = \"op\"\n";
  return out;
}

std::string torch_dtype(DType d) { return d == DType::BF16 ? "torch.bfloat16" : "torch.float32"; }

std::string fsdp2_python(const Facts& f) {
  const shard::ShardSpec& s = f.plan.spec;
  const shard::LevelSpec l = shard::resolve(s, f.dp_topology);
  const int shard = l.degree(l.weights);
  std::string out = hash_comment(comment_lines(f, kFsdp2Source));
  out += "import torch\nfrom torch.distributed.device_mesh import init_device_mesh\n";
  const int tp = f.strata.tensor_parallel;
  const std::string tp_dim = tp > 1 ? fmt::format(", {}", tp) : "";
  const std::string tp_name = tp > 1 ? ", \"tp\"" : "";
  if (s.weights == "none") {
    out += "from torch.nn.parallel import DistributedDataParallel\n\n";
    // A Python tuple of one needs its comma.
    out += fmt::format("mesh = init_device_mesh(\"cuda\", ({}{}), mesh_dim_names=(\"dp\"{}))\n", f.dp,
                       tp > 1 ? tp_dim : ",", tp > 1 ? tp_name : ",");
    out += fmt::format("model = DistributedDataParallel(model, process_group=mesh[\"dp\"].get_group(), "
                       "bucket_cap_mb={:g})\n",
                       static_cast<double>(s.bucket_bytes) / (1 << 20));
    return out;
  }
  const std::string reshard = s.secondary != "none"      ? std::to_string(l.degree(l.secondary))
                              : s.free_after_forward ? "True"
                                                     : "False";
  out += "from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard\n\n";
  out += fmt::format("mesh = init_device_mesh(\"cuda\", ({}, {}{}), mesh_dim_names=(\"dp_replicate\", \"dp_shard\"{}))\n",
                     f.dp / shard, shard, tp_dim, tp_name);
  out += fmt::format("mp_policy = MixedPrecisionPolicy(param_dtype={}, reduce_dtype={})\n",
                     torch_dtype(compute_dtype(f.plan.workload.precision)),
                     torch_dtype(s.grad_wire));
  if (tp > 1) out += "# tensor parallelism: parallelize_module(block, mesh[\"tp\"], ...) on each block first\n";
  if (f.plan.workload.recompute != Recompute::None)
    out += "# recomputation: wrap each block with torch.utils.checkpoint before sharding it\n";
  out += "dp_mesh = mesh[\"dp_replicate\", \"dp_shard\"]\n";
  out += "for block in model.layers:  # one unit a transformer block, as strata prices it\n";
  out += fmt::format("    fully_shard(block, mesh=dp_mesh, reshard_after_forward={}, mp_policy=mp_policy)\n", reshard);
  out += fmt::format("fully_shard(model, mesh=dp_mesh, reshard_after_forward={}, mp_policy=mp_policy)\n", reshard);
  out += fmt::format("# a step: {} micro-batch(es) of {} sequence(s) a data-parallel rank", f.micro_batches,
                     f.micro_batch);
  out += f.dp / shard > 1 ? "; model.set_requires_all_reduce(False) on all but the last (the replicas' all-reduce "
                            "once a step, as strata prices it)\n"
                          : "\n";
  return out;
}

std::string megatron_args(const Facts& f) {
  const shard::ShardSpec& s = f.plan.spec;
  const shard::LevelSpec l = shard::resolve(s, f.dp_topology);
  const Workload& w = f.plan.workload;
  const ModelShape& m = f.request.model;
  std::string out = hash_comment(comment_lines(f, kMegatronSource));
  auto arg = [&out](const std::string& a) { out += a + "\n"; };
  arg(fmt::format("--tensor-model-parallel-size {}", f.strata.tensor_parallel));
  arg(fmt::format("--pipeline-model-parallel-size {}", f.strata.pipeline_stages));
  arg(fmt::format("--micro-batch-size {}", f.micro_batch));
  arg(fmt::format("--global-batch-size {}", f.global_batch()));
  arg(fmt::format("--seq-length {}", w.seq));
  if (w.precision == Precision::BF16) arg("--bf16");
  if (s.grad_wire == DType::BF16) arg("--grad-reduce-in-bf16");
  if (l.weights > 0) {
    arg("--use-torch-fsdp2");
  } else if (l.optimizer > 0) {
    arg("--use-distributed-optimizer");
    arg(fmt::format("--num-distributed-optimizer-instances {}", f.dp / l.degree(l.optimizer)));
    arg("--overlap-param-gather");
  } else {
    arg(fmt::format("--ddp-bucket-size {}", s.bucket_bytes / 4));
  }
  arg("--overlap-grad-reduce");
  if (w.recompute == Recompute::Full) {
    arg("--recompute-granularity full");
    arg("--recompute-method uniform");
    arg("--recompute-num-layers 1");
  }
  if (w.flash_attention) arg("--use-flash-attn");
  arg(fmt::format("--num-layers {}", m.layers));
  arg(fmt::format("--hidden-size {}", m.hidden));
  arg(fmt::format("--num-attention-heads {}", m.heads));
  if (m.kv_heads != m.heads) {
    arg("--group-query-attention");
    arg(fmt::format("--num-query-groups {}", m.kv_heads));
  }
  arg(fmt::format("--ffn-hidden-size {}", m.ffn));
  if (m.mlp == Mlp::SwiGlu) arg("--swiglu");
  if (m.norm == Norm::RmsNorm) arg("--normalization RMSNorm");
  if (!m.biases) arg("--disable-bias-linear");
  if (!m.tied_head) arg("--untie-embeddings-and-output-weights");
  arg(m.learned_positions > 0 ? "--position-embedding-type learned_absolute" : "--position-embedding-type rope");
  return out;
}

// Each framework in one row: its --emit name, its own name, how it runs strata's plan (the
// nearest it can express) and the file it reads.
struct FrameworkRow {
  Framework value;
  std::string_view name, shown;
  void (*layout)(FrameworkPlan&, const shard::LevelSpec&, const topo::Topology&, const ModelParallel&);
  std::string (*file)(const Facts&);
};
constexpr FrameworkRow kFrameworks[] = {
    {Framework::DeepSpeed, "deepspeed", "DeepSpeed", deepspeed_layout, deepspeed_json},
    {Framework::Fsdp2, "fsdp2", "PyTorch FSDP2", fsdp2_layout, fsdp2_python},
    {Framework::Torchtitan, "torchtitan", "torchtitan", torchtitan_layout, torchtitan_toml},
    {Framework::Megatron, "megatron", "Megatron-LM", megatron_layout, megatron_args},
};

}  // namespace

Framework parse_framework(std::string_view text) {
  if (const Framework* f = value_of(kFrameworks, text)) return *f;
  throw Error(fmt::format("--emit '{}': unknown framework (known: {})", text, fmt::join(names_of(kFrameworks), ", ")));
}

std::string_view framework_name(Framework f) { return row_of(kFrameworks, f).shown; }

FrameworkPlan nearest_plan(Framework framework, const shard::ShardSpec& spec, const Workload& workload,
                           const ModelParallel& mp, const topo::Topology& dp_topology) {
  FrameworkPlan p{framework, spec, workload, {}};
  const shard::LevelSpec l = shard::resolve(spec, dp_topology);
  if (framework == Framework::DeepSpeed) reduce_scatter_step(p, "DeepSpeed");
  row_of(kFrameworks, framework).layout(p, l, dp_topology, mp);
  p.spec.preset = p.gaps.empty() ? spec.preset : "custom";
  shard::resolve(p.spec, dp_topology);  // the nearest must be a valid spec of the same topology
  return p;
}

Emitted emit(const EmitRequest& r) {
  const ModelParallel& mp = r.chosen.mp;
  const ModelParallelPlan plan(r.model, r.topology, r.device, r.workload, mp, r.leave_out, r.calibration);
  Emitted out{{}, nearest_plan(r.framework, r.chosen.spec, r.workload, mp, plan.data_parallel_topology()),
              plan.estimate(r.chosen.name, r.chosen.spec), {}};
  if (out.plan.gaps.empty()) {
    out.framework = out.strata;
  } else {
    const ModelParallelPlan nearest(r.model, r.topology, r.device, out.plan.workload, mp, r.leave_out, r.calibration);
    out.framework = nearest.estimate("nearest", out.plan.spec);
  }
  Facts f{r, out.plan, out.strata, out.framework, plan.data_parallel_topology()};
  f.dp = plan.dims().world_size() / (mp.tp * mp.pp);
  f.micro_batch = r.workload.micro_batch * (r.workload.batch_per_device ? mp.tp : 1);
  f.micro_batches = r.workload.accumulation_steps * (r.workload.batch_per_device ? mp.pp : 1);
  for (int s = 0; s < mp.pp; ++s)
    for (std::size_t n : plan.stage(s).units().numel) f.largest_unit = std::max(f.largest_unit, n);
  out.text = row_of(kFrameworks, r.framework).file(f);
  return out;
}

}  // namespace strata::plan
