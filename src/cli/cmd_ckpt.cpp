// strata ckpt inspect | convert: what a checkpoint holds, and the same checkpoint laid out
// for another strategy and world size.
#include <map>
#include <memory>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/checkpoints.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "model/layout.hpp"
#include "shard/reshard.hpp"
#include "train/checkpoint.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct InspectArgs {
  std::string checkpoint;
  bool json = false;
  bool verify = false;
};

std::string str_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

int int_or(const nlohmann::json& j, const char* key, int fallback) {
  return j.is_object() && j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : fallback;
}

// The newest checkpoint as it is, damage and all: a damaged one is refused (inspect shows
// what is there, it does not pick another), naming the newest intact one beside it.
train::Checkpoint open_for_inspection(const fs::path& dir, bool verify) {
  try {
    train::Checkpoint ckpt = train::Checkpoint::open(dir);
    if (verify) {
      ckpt.verify();
      train::read_trainer_state(ckpt);  // what a resume reads besides the shards
    }
    return ckpt;
  } catch (const Error& e) {
    throw Error(e.what() + train::intact_alternative(dir));
  }
}

void run_inspect(const InspectArgs& a) {
  const fs::path dir = train::find_checkpoint(a.checkpoint);
  const train::Checkpoint ckpt = open_for_inspection(dir, a.verify);
  const train::CheckpointInfo& info = ckpt.info();
  if (a.json) {
    nlohmann::json j = nlohmann::json::parse(read_file_text(dir / train::kManifestName));
    j["path"] = dir.string();
    j["verified"] = a.verify;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  const model::ParamLayout layout(info.model);
  std::map<std::string, std::vector<const train::ShardRecord*>> files;
  std::uint64_t total = 0;
  std::size_t runs = 0;
  for (const auto& r : ckpt.shards()) {
    files[r.file].push_back(&r);
    total += r.bytes;
    runs += r.runs.size();
  }
  fmt::print("checkpoint {} (format {})\n", dir.string(), train::kCheckpointVersion);
  fmt::print("  step {}; model n_layer {}, n_head {}, n_embd {}, vocab {} ({:.2f}M parameters, {} arena floats)\n",
             info.step, info.model.n_layer, info.model.n_head, info.model.n_embd, info.model.vocab_size,
             static_cast<double>(layout.num_params()) / 1e6, ckpt.arena_floats());
  const int tp = int_or(info.engine, "tensor_parallel", 1), pp = int_or(info.engine, "pp", 1);
  std::string split;
  if (tp > 1) split += fmt::format(" with tensor parallelism {}", tp);
  if (pp > 1) split += fmt::format("{} {} pipeline stages", tp > 1 ? " and" : " with", pp);
  fmt::print("  written by {}{} on {}{}\n", str_or(info.engine, "strategy", "?"), split,
             count_of(info.world_size, "rank"),
             info.engine.contains("topology") ? fmt::format(" of topology '{}'", str_or(info.engine["topology"], "name", "?"))
                                              : "");
  if (info.engine.contains("shard_spec")) fmt::print("  shard spec {}\n", info.engine["shard_spec"].dump());
  if (info.engine.contains("converted_from"))
    fmt::print("  converted from {}\n", str_or(info.engine["converted_from"], "checkpoint", "?"));
  fmt::print("  run {}\n  data {}\n  trainer {}\n", info.run.dump(), info.data.dump(), info.trainer.dump());
  fmt::print("  state digest {} (master weights, exp_avg, exp_avg_sq; the same in any layout)\n",
             train::digest_hex(ckpt.state_digest()));
  fmt::print("  {} shard file{}, {} records of {} arena runs (whole-model coordinates), {}\n", files.size(),
             files.size() == 1 ? "" : "s", ckpt.shards().size(), runs, human_bytes(static_cast<double>(total)));
  for (auto& [file, recs] : files) {
    std::uint64_t bytes = 0;
    std::size_t floats = 0, file_runs = 0;
    for (auto* r : recs) bytes += r->bytes, floats += r->floats(), file_runs += r->runs.size();
    fmt::print("    {}  rank {:>4}  {:>4} records  {:>6} runs  {:>12} floats  {:>10}\n", file, recs.front()->rank,
               recs.size(), file_runs, floats, human_bytes(static_cast<double>(bytes)));
  }
  if (a.verify) fmt::print("verified: every shard's checksum and content digest, and the state digest\n");
}

struct ConvertArgs {
  std::string source, destination;
  std::string strategy = "single";
  int world_size = 0;
  parallel::ShardOptions options = [] {
    parallel::ShardOptions o;
    o.topology.clear();  // no default: see run_convert
    return o;
  }();
};

void run_convert(ConvertArgs a) {
  const std::filesystem::path dir = intact_checkpoint("convert", a.source);
  const train::Checkpoint ckpt = train::Checkpoint::open(dir);
  const model::ParamLayout layout(ckpt.info().model);
  shard::CheckpointLayout target;
  if (a.strategy == "single") {
    if (a.world_size > 1) throw Error(fmt::format("--world-size {}: the single-process layout has one rank", a.world_size));
    target = shard::single_process_layout(layout);
  } else {
    if (a.world_size <= 0) throw Error("--world-size: required with --strategy (the ranks of the job to load it)");
    // Slices follow the tiers, and `host` describes the machine a job runs on, measured
    // under mpirun: offline, the job's topology must be named.
    if (a.options.topology.empty() || a.options.topology == "host")
      throw Error("--topology: name the topology of the job that will load it (frontier, dgx-a100, dgx-h100 or a "
                  "TOML file); 'host' is measured under mpirun, not offline");
    a.options.strategy = a.strategy;
    target = shard::sharded_layout(layout, a.options, a.world_size);
  }
  shard::convert_checkpoint(ckpt, a.destination, target);
  std::size_t runs = 0;
  for (auto& r : target.runs) runs += r.size();
  fmt::print("converted {} (step {}, {} on {}) to {}: {} on {}, {}, {}; state digest {} unchanged\n", dir.string(),
             ckpt.info().step, str_or(ckpt.info().engine, "strategy", "?"), count_of(ckpt.info().world_size, "rank"),
             a.destination, target.describe["strategy"].get<std::string>(), count_of(target.world_size, "rank"),
             count_of(static_cast<std::int64_t>(target.runs.size()), "shard file"),
             count_of(static_cast<std::int64_t>(runs), "run"), train::digest_hex(ckpt.state_digest()));
}

CommandRegistrar registrar(25, [](CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("ckpt", "Inspect a checkpoint, or convert it for another strategy or world size");
  cmd->require_subcommand(1);

  auto i = std::make_shared<InspectArgs>();
  CLI::App* inspect = cmd->add_subcommand("inspect", "What a checkpoint holds: step, model, layout, shards, digests");
  inspect->add_option("checkpoint", i->checkpoint, "checkpoint folder, or an output folder (its newest checkpoint)")
      ->required();
  inspect->add_flag("--json", i->json, "print the manifest as JSON");
  inspect->add_flag("--verify", i->verify, "read every shard: checksums and content digests");
  inspect->callback([i] { run_inspect(*i); });

  auto c = std::make_shared<ConvertArgs>();
  CLI::App* convert = cmd->add_subcommand(
      "convert", "Write a checkpoint laid out as another strategy and world size would write it (any layout also "
                 "loads directly: this is for moving it ahead of a job)");
  convert->add_option("source", c->source, "checkpoint folder, or an output folder (its newest intact checkpoint)")
      ->required();
  convert->add_option("destination", c->destination, "new checkpoint folder (must not exist)")->required();
  convert->add_option("--strategy", c->strategy, "single (one file, the default), ddp, zero1, zero2, zero3, hsdp, "
                                                 "zeropp, topo");
  convert->add_option("--world-size", c->world_size, "ranks of the job that will load it (with --strategy)");
  convert->add_option("--topology", c->options.topology, "topology of that job: host, frontier, dgx-a100, dgx-h100, "
                                                         "or a TOML file");
  convert->add_option("--shard", c->options.shard, "tier of each state on top of the strategy, e.g. W=gpu,OS=cluster");
  convert->add_option("--tier", c->options.tier_overrides, "override a topology figure: NAME.FIELD=VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  convert->callback([c] { run_convert(*c); });
});

}  // namespace
}  // namespace strata::cli
