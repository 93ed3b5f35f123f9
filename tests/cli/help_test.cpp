// `strata train --help` states, for every setting, the default a run really uses: each
// printed default is checked against what the code that decides it gives (a config built
// from no settings, the model presets, the shard presets), not against the help's source.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "shard/runtime.hpp"
#include "support.hpp"
#include "train/config.hpp"

using namespace strata;

namespace {

// Each option's help text by flag ("--steps" -> "optimizer steps ... [default: 100]"); a
// description CLI11 puts on the next line (after a long flag) belongs to the flag above.
std::map<std::string, std::string> help_by_flag(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in(help);
  std::string line, flag;
  const std::regex option_line(R"(^  (?:-\w,)?(--[\w-]+)(.*)$)");
  for (std::smatch m; std::getline(in, line);) {
    if (std::regex_match(line, m, option_line)) {
      flag = m[1];
      out[flag] = m[2];
    } else if (!flag.empty() && line.starts_with("     ")) {
      out[flag] += " " + line;
    } else {
      flag.clear();
    }
  }
  return out;
}

// The text inside "[default: ...]", "" when there is none; fails the test on two of them.
std::string printed_default(const std::string& flag, const std::string& text) {
  const std::regex note(R"(\[default: ([^\]]*)\])");
  std::string found;
  int count = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), note); it != std::sregex_iterator(); ++it, ++count)
    found = (*it)[1];
  EXPECT_LE(count, 1) << flag << " states its default twice: " << text;
  EXPECT_EQ(text.find("(default"), std::string::npos) << flag << " states a default in its prose: " << text;
  return found;
}

std::string plain(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

train::Settings with_data(train::Settings s = {}) {
  s["data.train"] = std::string("train.bin");
  return s;
}

}  // namespace

TEST(CliHelp, EveryTrainFlagStatesTheDefaultARunUses) {
  const auto r = test::run_command(std::string(STRATA_EXE) + " train --help", test::Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto help = help_by_flag(r.output);

  const train::TrainConfig config = train::build_config(with_data());  // nothing given but the data
  const nlohmann::json effective = config.to_json();
  topo::Topology topology = topo::Topology::load(test::source_path("configs/topology/2node-2gpu-2die.toml").string());
  topology.resolve(8);

  for (const train::SettingInfo& info : train::setting_infos()) {
    SCOPED_TRACE(info.key);
    ASSERT_TRUE(help.contains(info.flag)) << info.flag << " missing from:\n" << r.output;
    const std::string printed = printed_default(info.flag, help.at(info.flag));
    const std::string key = info.key;
    const std::string section = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);

    if (section == "model" && name != "preset") {
      // "the --model preset's: tiny 2, small 6, gpt2-124m 12": each preset's own value.
      ASSERT_TRUE(printed.starts_with("the --model preset's: ")) << printed;
      std::vector<std::string> expected;
      for (const std::string& preset : model::ModelConfig::preset_names())
        expected.push_back(fmt::format(
            "{} {}", preset, plain(train::build_model({{"model.preset", preset}}).to_json()[name])));
      EXPECT_EQ(printed, fmt::format("the --model preset's: {}", fmt::join(expected, ", ")));
    } else if (key == "optim.min_lr") {
      EXPECT_EQ(printed, "optim.lr / 10");
      EXPECT_EQ(config.min_lr, config.lr * 0.1f);
      EXPECT_EQ(train::build_config(with_data({{"optim.lr", 1e-3}})).min_lr, 1e-3f * 0.1f);
    } else if (key == "train.seq") {
      EXPECT_EQ(printed, "model.seq_len");
      for (const std::string& preset : model::ModelConfig::preset_names()) {
        const auto c = train::build_config(with_data({{"model.preset", preset}}));
        EXPECT_EQ(c.seq_len(), c.model.seq_len) << preset;
      }
    } else if (key == "train.threads") {
      EXPECT_EQ(printed,
                "OMP_NUM_THREADS or all cores; under mpirun without OMP_NUM_THREADS, cores / local ranks");
      EXPECT_EQ(config.threads, 0);  // 0: OpenMP's own default; cmd_train shares cores under mpirun
    } else if (key == "shard.strategy") {
      EXPECT_EQ(printed, "none (one process); under mpirun, ddp");
      EXPECT_FALSE(config.shard.sharded());
    } else if (key == "shard.shard" || key == "shard.secondary" || key.ends_with("_wire")) {
      EXPECT_EQ(printed, "the strategy's");
      EXPECT_EQ(effective["shard"][name], "") << "an option left to the strategy is empty";
    } else if (key == "shard.block_size" || key == "shard.prefetch" || key == "shard.bucket_bytes" ||
               key == "shard.first_bucket_bytes") {
      // The options hold 'unset'; what runs is the strategy's: the same for every strategy.
      for (const std::string& strategy : shard::ShardSpec::preset_names()) {
        parallel::ShardOptions options = config.shard;
        options.strategy = strategy;
        const shard::ShardSpec spec = shard::build_spec(options, topology);
        const std::uint64_t value = name == "block_size" ? static_cast<std::uint64_t>(spec.block_size)
                                    : name == "prefetch" ? static_cast<std::uint64_t>(spec.prefetch)
                                    : name == "bucket_bytes" ? spec.bucket_bytes
                                                             : spec.first_bucket_bytes;
        EXPECT_EQ(printed, std::to_string(value)) << strategy;
      }
    } else if (key == "shard.pp_layers") {
      EXPECT_EQ(printed, "equal stages");
      EXPECT_TRUE(config.shard.pp_layers.empty());
    } else if (key == "data.train" || key == "data.val" || key == "train.out") {
      EXPECT_EQ(printed, "") << "no default to state";
      EXPECT_EQ(effective[section][name == "train" || name == "val" ? name : "out"], name == "train" ? "train.bin" : "");
    } else {
      ASSERT_TRUE(effective[section].contains(name));
      EXPECT_EQ(printed, plain(effective[section][name]));
    }
  }
}

// `strata plan` takes `strata train`'s flags for what shapes a spec: the same set, each with the
// same help and default. The set is read from train's side (its shard.* settings, less the
// strategy and topology, which plan takes as lists and with --cluster, and link emulation,
// which plan does not run), so a flag plan drops or registers on its own shows here.
TEST(CliHelp, PlanTakesTrainsSpecFlagsWithTheSameHelpAndDefaults) {
  const auto train_help = test::run_command(std::string(STRATA_EXE) + " train --help", test::Stderr::Capture);
  const auto plan_help = test::run_command(std::string(STRATA_EXE) + " plan --help", test::Stderr::Capture);
  ASSERT_EQ(train_help.exit_code, 0) << train_help.output;
  ASSERT_EQ(plan_help.exit_code, 0) << plan_help.output;
  const auto in_train = help_by_flag(train_help.output), in_plan = help_by_flag(plan_help.output);
  std::vector<std::string> flags{"--keep-weights-after-forward"};
  for (const train::SettingInfo& info : train::setting_infos()) {
    const std::string key = info.key;
    if (key.starts_with("shard.") && key != "shard.strategy" && key != "shard.topology" && key != "shard.emulate_scale")
      flags.push_back(info.flag);
  }
  ASSERT_GE(flags.size(), 11u);  // tiers, secondary, three wires, block, prefetch, buckets, tp, tp tier, kept weights
  for (const std::string& flag : flags) {
    SCOPED_TRACE(flag);
    ASSERT_TRUE(in_train.contains(flag));
    ASSERT_TRUE(in_plan.contains(flag)) << plan_help.output;
    EXPECT_EQ(in_plan.at(flag), in_train.at(flag));
  }
}
