#include "shard/spec.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "comm/dtype.hpp"

namespace strata::shard {

std::vector<std::string> ShardSpec::preset_names() {
  return {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo"};
}

ShardSpec ShardSpec::preset_for(std::string_view name, const topo::Topology& topology) {
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
    throw Error(fmt::format("strategy '{}': unknown (known: {})", name, fmt::join(preset_names(), ", ")));
  }
  return s;
}

void ShardSpec::apply_shard_string(std::string_view text) {
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
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
          {"weight_wire", comm::dtype_name(weight_wire)},
          {"grad_wire", comm::dtype_name(grad_wire)},
          {"step_grad_wire", comm::dtype_name(step_grad_wire)},
          {"block_size", block_size},
          {"prefetch", prefetch},
          {"reductions_in_flight", reductions_in_flight},
          {"free_after_forward", free_after_forward},
          {"bucket_bytes", bucket_bytes},
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
    if (!idx) {
      std::vector<std::string> names{"none"};
      for (auto& t : topology.tiers()) names.push_back(t.name);
      throw Error(fmt::format("shard.{} = '{}': no such tier in topology '{}' (tiers: {})", field, tier,
                              topology.name(), fmt::join(names, ", ")));
    }
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

}  // namespace strata::shard
