#include "cli/setting_flags.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "shard/spec.hpp"

namespace strata::cli {
namespace {

// " [default: 4]" for a key: what a run uses when neither flag nor config file gives it, read
// from the code that decides it (a default TrainConfig, the model presets, the shard presets),
// so help and code cannot disagree. Empty for settings without one (the training data).
std::string default_note(const std::string& key) {
  static const nlohmann::json defaults = train::TrainConfig{}.to_json();
  const auto dot = key.find('.');
  const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
  if (section == "model" && name != "preset") {
    std::vector<std::string> per_preset;
    for (const std::string& preset : model::ModelConfig::preset_names()) {
      const nlohmann::json v = model::ModelConfig::preset(preset).to_json()[name];
      per_preset.push_back(fmt::format("{} {}", preset, v.is_string() ? v.get<std::string>() : v.dump()));
    }
    return fmt::format(" [default: the --model preset's: {}]", fmt::join(per_preset, ", "));
  }
  // Defaults that follow other settings: the rule, as build_config and the engine apply it.
  if (key == "optim.min_lr") return " [default: optim.lr / 10]";
  if (key == "train.seq") return " [default: model.seq_len]";
  if (key == "train.threads") return " [default: OMP_NUM_THREADS or all cores; under mpirun without OMP_NUM_THREADS, cores / local ranks]";
  if (key == "shard.strategy") return " [default: none (one process); under mpirun, ddp]";
  if (key == "shard.shard" || key == "shard.secondary" || key.ends_with("_wire")) return " [default: the strategy's]";
  if (key == "shard.pp_layers") return " [default: equal stages]";
  // The shard options keep 'unset' apart from a value; every preset takes ShardSpec's own.
  if (key == "shard.block_size") return fmt::format(" [default: {}]", shard::ShardSpec{}.block_size);
  if (key == "shard.prefetch") return fmt::format(" [default: {}]", shard::ShardSpec{}.prefetch);
  if (key == "shard.bucket_bytes") return fmt::format(" [default: {}]", shard::ShardSpec{}.bucket_bytes);
  if (key == "shard.first_bucket_bytes") return fmt::format(" [default: {}]", shard::ShardSpec{}.first_bucket_bytes);
  const nlohmann::json& group = section == "model" ? defaults["model"] : defaults[section];
  if (!group.contains(name)) return "";
  const nlohmann::json& v = group[name];
  if (v.is_string()) return v.get<std::string>().empty() ? "" : fmt::format(" [default: {}]", v.get<std::string>());
  return fmt::format(" [default: {}]", v.dump());
}

}  // namespace

train::Settings SettingFlags::given() const {
  train::Settings settings;
  for (const auto& f : flags) {
    if (f->option->count() == 0) continue;
    const auto* text = std::get_if<std::string>(&f->value);
    settings[f->info->key] = f->info->bare && text && text->empty() ? std::string(f->info->bare) : f->value;
  }
  return settings;
}

void add_setting_flag(CLI::App* cmd, const train::SettingInfo& info, SettingFlags& flags) {
  auto f = std::make_unique<SettingFlag>();
  f->info = &info;
  const std::string help = fmt::format("{} ({}){}", info.help, info.key, default_note(info.key));
  const train::SettingValue unset[] = {std::int64_t{0}, 0.0, std::string()};  // by SettingKind
  f->value = unset[static_cast<int>(info.kind)];
  std::visit([&](auto& value) { f->option = cmd->add_option(info.flag, value, help); }, f->value);
  f->option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  if (info.bare) f->option->expected(0, 1);
  flags.flags.push_back(std::move(f));
}

void add_switch_flags(CLI::App* cmd, SettingFlags& flags) {
  cmd->add_flag("--keep-weights-after-forward", flags.keep_weights_after_forward,
                "keep gathered weights from forward to backward instead of gathering them again");
  cmd->add_flag("--sequence-parallel", flags.sequence_parallel,
                "with --tp: Megatron's sequence parallelism, the norms and residual sums on a 1/tp share of the "
                "token rows, reduce-scatter and all-gather instead of all-reduce");
}

void add_spec_flags(CLI::App* cmd, SettingFlags& flags) {
  for (const train::SettingInfo& info : train::setting_infos())
    if (train::shapes_spec(info)) add_setting_flag(cmd, info, flags);
  add_switch_flags(cmd, flags);
}

}  // namespace strata::cli
