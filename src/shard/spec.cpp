#include "shard/spec.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/dtype.hpp"

namespace strata::shard {

std::vector<std::string> ShardSpec::preset_names() {
  return {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"};
}

const std::vector<ShardSpec::Alias>& ShardSpec::preset_aliases() {
  // Sources: PyTorch's ShardingStrategy (torch/distributed/fsdp/api.py) and fully_shard;
  // DeepSpeed's ZeroStageEnum and ZeRO++ keys (deepspeed/runtime/zero/config.py).
  static const std::vector<Alias> aliases{
      {"fsdp", "zero3", "PyTorch FSDP's FULL_SHARD (FSDP2: fully_shard on a 1-D mesh)"},
      {"full_shard", "zero3", "PyTorch FSDP's FULL_SHARD (FSDP2: fully_shard on a 1-D mesh)"},
      {"zero-3", "zero3", "DeepSpeed ZeRO stage 3"},
      {"hybrid_shard", "hsdp", "PyTorch FSDP's HYBRID_SHARD (FSDP2: fully_shard on a 2-D replicate x shard mesh)"},
      {"shard_grad_op", "zero2",
       "PyTorch FSDP's SHARD_GRAD_OP, nearest: it also shards weights between steps, strata's zero2 keeps them whole"},
      {"zero-2", "zero2", "DeepSpeed ZeRO stage 2"},
      {"zero-1", "zero1", "DeepSpeed ZeRO stage 1 (Megatron-LM's --use-distributed-optimizer)"},
      {"no_shard", "ddp", "PyTorch FSDP's NO_SHARD (DistributedDataParallel)"},
      {"zero++", "zeropp", "DeepSpeed ZeRO++: ZeRO-3 with hpZ, qwZ and qgZ"},
  };
  return aliases;
}

std::string ShardSpec::alias_list() {
  std::vector<std::string> parts;
  for (const Alias& a : preset_aliases()) parts.push_back(fmt::format("{} = {}", a.name, a.preset));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string_view ShardSpec::canonical_preset(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const Alias& a : preset_aliases())
    if (a.name == lower) return a.preset;
  return name;
}

ShardSpec ShardSpec::preset_for(std::string_view given, const topo::Topology& topology) {
  const std::string_view name = canonical_preset(given);
  const int n = topology.num_tiers();
  if (n < 1) throw Error("topology: has no tiers");
  auto tier = [&](int t) { return topology.tier(t).name; };
  const std::string all = tier(n - 1);
  auto need_two = [&] {
    if (n < 2)
      throw Error(fmt::format("strategy {}: needs a topology with at least 2 tiers (a node inside the cluster); "
                              "'{}' has {}", name, topology.name(), n));
  };
  ShardSpec s;
  s.preset = std::string(name);
  if (name == "ddp") {
  } else if (name == "zero1") {
    s.optimizer = all;
  } else if (name == "zero2") {
    s.grads = s.optimizer = all;
  } else if (name == "zero3") {
    s.weights = s.grads = s.optimizer = all;
  } else if (name == "hsdp") {
    need_two();
    s.weights = s.grads = s.optimizer = tier(n - 2);
  } else if (name == "zeropp") {
    need_two();
    s.weights = s.grads = s.optimizer = all;
    s.secondary = tier(n - 2);
    s.weight_wire = DType::I8;
    s.grad_wire = DType::I4;
  } else if (name == "topo") {
    need_two();
    // ZeRO-topo: weights over the innermost tier, gradients over the node, optimizer over all.
    s.weights = tier(0);
    s.grads = tier(n - 2);
    s.optimizer = all;
    s.weight_wire = DType::I8;
    s.grad_wire = DType::I4;
  } else {
    throw Error(fmt::format("strategy '{}': unknown (known: {}; and the frameworks' names {})", given,
                            fmt::join(preset_names(), ", "), alias_list()));
  }
  return s;
}

void ShardSpec::apply_shard_string(std::string_view text) {
  for (std::string_view item : split_list(text)) {
    if (item.empty()) continue;
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      throw Error(fmt::format("--shard: '{}' is not STATE=TIER (e.g. W=gpu,G=node,OS=cluster)", item));
    std::string key(item.substr(0, eq));
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::toupper(c); });
    std::string value(item.substr(eq + 1));
    if (key == "W") weights = value;
    else if (key == "G") grads = value;
    else if (key == "OS") optimizer = value;
    else if (key == "S") secondary = value;
    else throw Error(fmt::format("--shard: unknown state '{}' (expected W, G, OS or S)", item.substr(0, eq)));
  }
  preset = "custom";
}

nlohmann::json ShardSpec::to_json() const {
  return {{"preset", preset},
          {"weights", weights},
          {"grads", grads},
          {"optimizer", optimizer},
          {"secondary", secondary},
          {"weight_wire", dtype_name(weight_wire)},
          {"grad_wire", dtype_name(grad_wire)},
          {"step_grad_wire", dtype_name(step_grad_wire)},
          {"block_size", block_size},
          {"prefetch", prefetch},
          {"reductions_in_flight", reductions_in_flight},
          {"free_after_forward", free_after_forward},
          {"bucket_bytes", bucket_bytes},
          {"first_bucket_bytes", first_bucket_bytes},
          {"step_grad_allreduce", step_grad_allreduce}};
}

int LevelSpec::degree(int levels) const {
  int d = 1;
  for (int t = 0; t < levels; ++t) d *= level_size[t];
  return d;
}

LevelSpec resolve(const ShardSpec& spec, const topo::Topology& topology) {
  if (!topology.resolved()) throw Error("topology: not resolved against a world size");
  LevelSpec l;
  l.num_levels = topology.num_tiers();
  for (int t = 0; t < l.num_levels; ++t) l.level_size.push_back(topology.tier(t).size);
  auto levels = [&](const std::string& tier, const char* field) {
    if (tier == "none") return 0;
    auto idx = topology.find_tier(tier);
    if (!idx)
      throw Error(fmt::format("shard.{} = '{}': no such tier in topology '{}' (tiers: none, {})", field, tier,
                              topology.name(), fmt::join(topology.tier_names(), ", ")));
    return *idx + 1;
  };
  l.weights = levels(spec.weights, "weights");
  l.grads = levels(spec.grads, "grads");
  l.optimizer = levels(spec.optimizer, "optimizer");
  l.secondary = levels(spec.secondary, "secondary");

  if (l.grads < l.weights)
    throw Error(fmt::format("shard: degree(G) >= degree(W) violated: grads over '{}' (degree {}) is narrower than "
                            "weights over '{}' (degree {})",
                            spec.grads, l.degree(l.grads), spec.weights, l.degree(l.weights)));
  if (l.optimizer < l.grads)
    throw Error(fmt::format("shard: degree(OS) >= degree(G) violated: optimizer over '{}' (degree {}) is narrower "
                            "than grads over '{}' (degree {})",
                            spec.optimizer, l.degree(l.optimizer), spec.grads, l.degree(l.grads)));
  if (l.secondary > 0 && l.secondary >= l.weights)
    throw Error(fmt::format("shard.secondary = '{}': the secondary weight copy must be sharded over a tier inside "
                            "the weights' tier '{}'",
                            spec.secondary, spec.weights));
  if (spec.block_size <= 0)
    throw Error(fmt::format("shard.block_size = {}: must be positive", spec.block_size));
  bool any_int4 = spec.grad_wire == DType::I4 || spec.step_grad_wire == DType::I4;
  if (any_int4 && spec.block_size % 2 != 0)
    throw Error(fmt::format("shard.block_size = {}: int4 packs two values a byte, so the block size must be even",
                            spec.block_size));
  if (spec.weight_wire == DType::I4)
    throw Error("shard.weight_wire = int4: weight gathers carry fp32, bf16, fp16 or int8");
  if (spec.prefetch < 0) throw Error(fmt::format("shard.prefetch = {}: must be >= 0", spec.prefetch));
  if (spec.reductions_in_flight < 0)
    throw Error(fmt::format("shard.reductions_in_flight = {}: must be >= 0", spec.reductions_in_flight));
  return l;
}

std::string ShardSpec::describe(const topo::Topology& topology) const {
  const LevelSpec l = resolve(*this, topology);
  auto over = [&](const std::string& tier, int levels) {
    const int d = l.degree(levels);
    return levels == l.num_levels ? fmt::format("over all {} ranks", d)
                                  : fmt::format("over the {} ranks of a '{}'", d, tier);
  };
  auto wire = [](DType w) {
    if (w == DType::I8 || w == DType::I4)
      return fmt::format("{} with an fp32 scale per block", dtype_name(w));
    return std::string(dtype_name(w));
  };
  std::vector<std::string> parts;
  parts.push_back(l.weights == 0 ? std::string("W=-: every rank holds all the weights")
                                 : fmt::format("W={}: weights sharded {} (1/{} each), gathered for each unit's forward"
                                               "{}",
                                               weights, over(weights, l.weights), l.degree(l.weights),
                                               free_after_forward ? " and again for its backward"
                                                                  : ", kept until its backward"));
  parts.push_back(l.grads == 0 ? std::string("G=-: gradients whole on every rank, summed once a step")
                               : fmt::format("G={}: gradients reduce-scattered {} each micro-batch", grads,
                                             over(grads, l.grads)));
  parts.push_back(l.optimizer == 0 ? std::string("OS=-: every rank keeps all of Adam's state and updates every weight")
                                   : fmt::format("OS={}: Adam's fp32 master weights, m and v sharded {}", optimizer,
                                                 over(optimizer, l.optimizer)));
  if (l.secondary > 0)
    parts.push_back(fmt::format("S={}: a second copy of the weights sharded {}, kept from forward so backward gathers "
                                "inside it (ZeRO++'s hpZ, zero_hpz_partition_size {})",
                                secondary, over(secondary, l.secondary), l.degree(l.secondary)));
  if (l.weights > 0 || l.optimizer > l.weights)
    parts.push_back(fmt::format("w:{}: weights travel as {}{}", dtype_name(weight_wire), wire(weight_wire),
                                weight_wire == DType::I8 ? " (ZeRO++'s qwZ)" : ""));
  if (l.grads > 0)
    parts.push_back(fmt::format("g:{}: the per-micro-batch gradient reduction sends {}{}", dtype_name(grad_wire),
                                wire(grad_wire),
                                grad_wire == DType::I8 || grad_wire == DType::I4
                                    ? " as an all-to-all (ZeRO++'s qgZ)"
                                    : ""));
  parts.push_back(fmt::format("s:{}: the once-a-step gradient reduction (to the optimizer's shard, or across "
                              "replicas) sends {}{}",
                              dtype_name(step_grad_wire), wire(step_grad_wire),
                              step_grad_allreduce ? ", as an all-reduce" : ""));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace strata::shard
