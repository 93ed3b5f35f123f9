// strata train: flags and an optional TOML config file (flags win) -> Trainer.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "cli/setting_flags.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/flight.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "comm/runtime/pieces.hpp"
#include "comm/runtime/wait.hpp"
#include "device/device.hpp"
#include "model/layout.hpp"
#include "shard/pipeline_engine.hpp"
#include "shard/pipeline_report.hpp"
#include "shard/runtime.hpp"
#include "shard/schedule.hpp"
#include "shard/spec.hpp"
#include "train/config.hpp"
#include "train/local_engine.hpp"
#include "train/preemption.hpp"
#include "train/trainer.hpp"

namespace strata::cli {
namespace {

struct TrainArgs {
  std::string config_path;
  bool emulate_links = false;
  bool print_schedule = false;
  bool schedule_json = false;  // --json: --print-schedule as one JSON document
  int preview_world_size = 0;  // --world-size: lay the schedule out for that many ranks from one process
  CLI::Option* preview_world_size_option = nullptr;
  std::vector<std::string> tier_overrides;
  std::string resume;
  bool overwrite = false;
  std::int64_t stop_after = 0;
  SettingFlags settings;
};

train::Settings collect_settings(const TrainArgs& args) {
  train::Settings settings;
  if (!args.config_path.empty()) settings = train::read_config_file(args.config_path);
  for (auto& [key, value] : args.settings.given()) settings[key] = value;
  return settings;
}

// Ranks of this job on this machine, as mpirun tells its processes (1 outside mpirun).
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void report(const train::TrainConfig& config, const train::TrainResult& result) {
  const auto& s = result.summary;
  if (result.preempted) {
    const int sig = train::PreemptionHandler::requested();
    fmt::print("{}: stopped after step {} on request ({}){}\n", sig == SIGINT ? "interrupted" : "preempted",
               s["steps"].get<std::int64_t>(), sig != 0 ? train::signal_name(sig) : "a signal to another rank",
               s["checkpoint"].is_null() ? std::string("; no --out, nothing saved")
                                         : fmt::format("; checkpoint {}; continue with --resume latest",
                                                       s["checkpoint"].get<std::string>()));
  }
  if (s["skipped_steps"].get<std::int64_t>() > 0)
    fmt::print("skipped {} steps with a non-finite loss or gradient norm\n", s["skipped_steps"].get<std::int64_t>());
  fmt::print("done: step {}, loss {:.4f} -> {:.4f}, {:.0f} tokens/s\n", s["steps"].get<std::int64_t>(),
             s["loss"]["first"].get<double>(), s["loss"]["final"].get<double>(), s["tokens_per_s"].get<double>());
  if (!s["val_loss"].is_null())
    fmt::print("validation loss {:.4f} nats/token; unigram entropy of the training data {:.4f} nats/token\n",
               s["val_loss"].get<double>(), s["data"]["unigram_entropy"].get<double>());
  if (s.contains("strategy"))
    fmt::print("strategy {} on {}{}: compute {:.3f} s, exposed communication {:.3f} s per step\n",
               s["strategy"].get<std::string>(), count_of(s["world_size"].get<int>(), "rank"),
               s["link_emulation"].get<bool>() ? " (link emulation on)" : "", s["compute_s"].get<double>(),
               s["exposed_comm_s"].get<double>());
  if (!config.out_dir.empty()) fmt::print("results in {}/ (summary.json, metrics.jsonl, ckpt/)\n", config.out_dir);
}

// A sharded run encodes its wires on the compute device: a wire the device has no codec for is
// refused by the device's name, before the device or any NCCL communicator starts.
void check_wires(const train::TrainConfig& config) {
  if (!config.shard.sharded()) return;
  const std::pair<std::string_view, const std::string&> wires[] = {{"shard.weight_wire", config.shard.weight_wire},
                                                                   {"shard.grad_wire", config.shard.grad_wire},
                                                                   {"shard.step_grad_wire", config.shard.step_grad_wire}};
  for (const auto& [key, value] : wires) {
    if (value.empty()) continue;  // the preset's: fp32, int8 or int4, which every device encodes
    if (device::has_codec(config.device, parse_dtype(value, key))) continue;
    throw Error(fmt::format("{} = '{}' ({}): the {} device has no codec for this wire (docs/gpu.md); bf16 takes "
                            "the same 2 bytes a value",
                            key, value, train::setting_info(key).flag, config.device));
  }
}

// The compute device and precision a run names, refused before anything runs where they
// cannot work together.
device::Device& check_device(const train::TrainConfig& config) {
  check_wires(config);
  device::Device& device = device::device_named(config.device, "train.device");
  const Precision precision = precision_named(config.precision, "train.precision");
  if (device.host_visible() && precision != Precision::F32)
    throw Error(fmt::format("train.precision = '{}' (--precision): the {} device computes in fp32; bf16 needs "
                            "--device cuda",
                            config.precision, device.name()));
  // A sharded run on a GPU moves its buffers with NCCL (tier_collectives_for); tensor
  // parallelism's model computes with the host's kernels.
  if (!device.host_visible() && config.shard.sharded()) {
    for (const auto& [flag, degree, what] : {std::tuple{"--tp", config.shard.tp, "tensor parallelism computes"},
                                             std::tuple{"--pp", config.shard.pp, "pipeline stages compute"}})
      if (degree > 1)
        throw Error(fmt::format("{} {}: {} on the cpu in fp32 only, not on the {} device (train.device)", flag,
                                degree, what, config.device));
    if (!comm::nccl_built())
      throw Error(fmt::format("train.device = '{}' (--device): a sharded run (--strategy, mpirun) on it moves its "
                              "buffers with NCCL communicators per tier group, and this strata was built without "
                              "NCCL (nccl.h and libnccl not found at configure time); one GPU trains alone, or the "
                              "sharded run computes on the cpu",
                              config.device));
  }
  return device;
}

// What a sharded run's levels run on: strata's MPI collectives over host memory, NCCL's over
// a GPU's (check_device refused a GPU in a build without NCCL).
shard::TierCollectivesFactory tier_collectives_for(const device::Device& device) {
#ifdef STRATA_HAVE_NCCL
  if (!device.host_visible()) return shard::nccl_tier_collectives;
#else
  static_cast<void>(device);
#endif
  return shard::host_tier_collectives;
}

train::TrainConfig build_run_config(const TrainArgs& args, int launched_ranks) {
  train::TrainConfig config = train::build_config(collect_settings(args));
  config.resume = args.resume;
  config.overwrite = args.overwrite;
  config.stop_after = args.stop_after;
  config.shard.emulate_links = args.emulate_links;
  config.shard.keep_weights_after_forward = args.settings.keep_weights_after_forward;
  config.shard.sequence_parallel = args.settings.sequence_parallel;
  config.shard.tier_overrides = args.tier_overrides;
  if (config.shard.strategy.empty() && launched_ranks > 1) config.shard.strategy = "ddp";
  if (!config.shard.sharded() && (args.emulate_links || args.print_schedule || !args.tier_overrides.empty()))
    throw Error("--emulate-links, --print-schedule and --tier need a sharded run: give --strategy");
  if (config.shard.tp > 1 && !config.shard.sharded())
    throw Error(fmt::format("--tp {}: tensor parallelism needs ranks under mpirun (or --print-schedule --world-size)",
                            config.shard.tp));
  if (config.shard.pp > 1 && !config.shard.sharded())
    throw Error(fmt::format("--pp {}: pipeline stages run under mpirun", config.shard.pp));
  if (config.threads == 0 && launched_ranks > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // Share the cores among the ranks of this machine rather than oversubscribe them. An
    // OMP_NUM_THREADS the user set wins, as it does outside mpirun: only they know when
    // "this machine" is a share of a larger one (hosts in namespaces, a container's cgroup).
    const int local = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", launched_ranks));
    config.threads = std::max(1, omp_get_num_procs() / local);
  }
  config.validate();
  check_device(config);  // refused here, before anything runs
  return config;
}

// Each rank's host. Collective.
std::vector<std::string> hosts_of_ranks(train::Engine& engine) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  return engine.all_gather_strings(std::string(name, len));
}

// "n0 (ranks 0-3), n1 (ranks 4-7)" when the ranks run on more than one host, else empty: with
// it, a lost host that mpirun names (its daemon died) names its ranks too.
std::string ranks_by_host(const std::vector<std::string>& hosts) {
  std::vector<std::pair<std::string, std::vector<int>>> by_host;  // in order of first rank
  for (int r = 0; r < int(hosts.size()); ++r) {
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& h) { return h.first == hosts[r]; });
    if (it == by_host.end()) it = by_host.insert(by_host.end(), {hosts[r], {}});
    it->second.push_back(r);
  }
  if (by_host.size() < 2) return "";
  std::vector<std::string> parts;
  for (auto& [host, ranks] : by_host) parts.push_back(fmt::format("{} (ranks {})", host, comm::rank_ranges(ranks)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// "1..60", or "1..40 of 60" when --stop-after ends this invocation before the schedule does.
std::string steps_of(const train::TrainConfig& config, const train::Trainer& trainer) {
  return fmt::format("{}..{}{}", trainer.start_step() + 1, config.last_step(),
                     config.last_step() < config.steps ? fmt::format(" of {}", config.steps) : "");
}

// The shape trained, not only the preset it started from: "gpt2 4 layers x 128 wide, 2 heads,
// 0.84M parameters".
std::string model_shape(const model::ModelConfig& m) {
  const std::string kv = m.kv_heads() != m.n_head ? fmt::format(" over {} K/V", m.kv_heads()) : "";
  return fmt::format("{} {} layers x {} wide, {} heads{}, {:.2f}M parameters", model::family_name(m.family),
                     m.n_layer, m.n_embd, m.n_head, kv, static_cast<double>(m.num_params()) / 1e6);
}

// Said once, at start: settings that run but are likely not what was meant. A run without an
// output folder leaves nothing behind; a warm-up longer than the run never reaches optim.lr.
void warn_at_start(const train::TrainConfig& config) {
  std::fflush(stdout);
  if (config.out_dir.empty())
    fmt::print(stderr, "strata: no --out: this run saves nothing (no checkpoint, metrics.jsonl or summary.json)\n");
  if (config.warmup > config.steps)
    fmt::print(stderr,
               "strata: warning: optim.warmup = {} is longer than train.steps = {}: the learning rate never reaches "
               "optim.lr = {} (shorten --warmup)\n",
               config.warmup, config.steps, config.lr);
}

void print_schedule(const shard::Schedule& schedule, bool json) {
  if (json) fmt::print("{}\n", schedule.to_json().dump(2));
  else fmt::print("{}", schedule.table());
}

// --print-schedule --world-size N: the schedule N ranks would run, built by one process exactly
// as each rank builds it (same topology, spec and layout), without launching them.
void preview_schedule(const TrainArgs& args) {
  if (env_int("OMPI_COMM_WORLD_SIZE", 1) > 1)
    throw AgreedError("--world-size: previews a layout from one process; under mpirun the world is the launched "
                      "ranks");  // every rank refuses alike: said once
  const train::TrainConfig config = build_run_config(args, args.preview_world_size);
  if (config.shard.pp > 1)
    throw Error(fmt::format("--world-size: a pipeline (--pp {}) prints its schedule under mpirun, each stage as its "
                            "ranks build it: mpirun -np N strata train ... --print-schedule",
                            config.shard.pp));
  if (config.shard.topology == "host")
    throw Error("--world-size: give --topology (a preset or a TOML file): 'host' is measured under mpirun, from the "
                "ranks it launched");
  const shard::RunLayout run = shard::resolve_run(config.shard, config.model, args.preview_world_size);
  const shard::Schedule schedule(
      model::ParamLayout(config.model, {run.dims.tensor, 0}), run.data_parallel, run.spec, config.grad_accum,
      shard::tensor_parallel_plan(run.dims, config.model, config.batch, config.seq_len(), config.recomputes(),
                                  config.shard.sequence_parallel));
  print_schedule(schedule, args.schedule_json);
}

// After the leader's opening lines: the leader's warnings, trainer.run() with the flight
// recorder dumped on a fatal error (and at the end when asked; a run that did not configure it
// dumps nothing), and the leader's report. Returns whether SIGINT stopped the run.
bool train_and_report(train::Trainer& trainer, const train::TrainConfig& config, bool leader) {
  if (leader) {
    warn_at_start(config);
    std::fflush(stdout);
  }
  train::TrainResult result;
  try {
    result = trainer.run();
    if (comm::parse_flight_dump(config.flight_dump) == comm::FlightDump::Always) comm::flight_recorder().dump("exit");
  } catch (const std::exception& e) {
    comm::flight_recorder().dump("error", e.what());
    throw;
  }
  if (leader) report(config, result);
  return result.preempted && train::PreemptionHandler::requested() == SIGINT;
}

// A sharded run started without mpirun is one rank: when its topology takes more, the refusal
// says how to launch them, not only that one rank does not fill the topology.
void check_ranks_launched(const train::TrainConfig& config) {
  if (!config.shard.sharded() || config.shard.topology == "host") return;
  try {
    shard::resolve_topology(config.shard, 1);
  } catch (const Error& e) {
    throw Error(fmt::format("{}\n  a sharded run needs its ranks launched: mpirun -np {} strata train ... (these "
                            "options; scripts/compare_strategies.sh shows a whole line)",
                            e.what(), shard::fewest_ranks(config.shard)));
  }
}

// A --pp run (shard/pipeline_engine.hpp), or its schedule printed; returns whether SIGINT
// stopped it.
bool run_pipelined(const train::TrainConfig& config, const TrainArgs& args) {
  shard::PipelineEngine engine(config.shard, config.model, config.batch, config.seq_len(), config.grad_accum,
                               config.seed, config.recomputes());
  if (args.print_schedule) {
    const nlohmann::json doc = shard::pipeline_schedule_json(engine);  // collective
    if (engine.rank() == 0) {
      if (args.schedule_json) fmt::print("{}\n", doc.dump(2));
      else fmt::print("{}", shard::pipeline_schedule_table(doc));
    }
    return false;
  }
  train::PreemptionHandler preemption;
  train::Trainer trainer(config, engine);
  const bool leader = engine.rank() == 0;
  if (leader) {
    const parallel::ParallelDims dims = engine.parallel_dims();
    fmt::print("strata train: model {} ({}), {} pipeline stages of {} {} {}{} on {} of topology '{}', "
               "batch {} x seq {} x accum {} per replica, steps {}, {} a rank\n",
               config.model_name, model_shape(config.model), dims.pipeline, dims.data_parallel_size(),
               config.shard.strategy, dims.data_parallel_size() == 1 ? "replica" : "replicas",
               dims.tensor > 1 ? fmt::format(" with tensor parallelism {}", dims.tensor) : "",
               count_of(engine.world_size(), "rank"),
               config.shard.topology, config.batch, config.seq_len(), config.grad_accum, steps_of(config, trainer),
               count_of(omp_get_max_threads(), "thread"));
  }
  return train_and_report(trainer, config, leader);
}

// Returns whether an interrupt (SIGINT) stopped the run before its last step.
bool run_train(const TrainArgs& args) {
  if (args.schedule_json && !args.print_schedule) throw Error("--json: only with --print-schedule");
  if (args.preview_world_size_option->count() > 0) {
    if (!args.print_schedule) throw Error("--world-size: only with --print-schedule (a preview of that layout)");
    if (args.preview_world_size < 1)
      throw Error(fmt::format("--world-size {}: must be at least 1", args.preview_world_size));
    preview_schedule(args);
    return false;
  }
  const int launched_ranks = env_int("OMPI_COMM_WORLD_SIZE", 1);
  // Each rank's GPU, chosen before the first CUDA call (the cuda device is made on it).
  device::choose_gpu(env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0));
  train::TrainConfig config;
  if (launched_ranks > 1) {
    // Every rank builds the same configuration from the same input: agreed, a refusal
    // prints once, not once a rank.
    comm::mpi_session();
    comm::agree(MPI_COMM_WORLD, "world", [&] { config = build_run_config(args, launched_ranks); });
  } else {
    config = build_run_config(args, launched_ranks);
    check_ranks_launched(config);
  }
  if (config.threads > 0) omp_set_num_threads(config.threads);  // OpenBLAS (OpenMP build) follows

  if (!config.shard.sharded()) {
    train::PreemptionHandler preemption;
    device::Device& device = check_device(config);
    train::LocalEngine engine(config.model, config.batch, config.seq_len(), config.seed, config.recomputes(), device,
                              precision_named(config.precision, "train.precision"));
    train::Trainer trainer(config, engine);
    const std::string where = device.host_visible()
                                  ? fmt::format("{}, {}", count_of(omp_get_max_threads(), "thread"),
                                                isa_name(detected_isa()))
                                  : fmt::format("{} in {}", device.name(), config.precision);
    fmt::print("strata train: model {} ({}), batch {} x seq {} x accum {}, steps {}, {}\n",
               config.model_name, model_shape(config.model), config.batch,
               config.seq_len(), config.grad_accum, steps_of(config, trainer), where);
    return train_and_report(trainer, config, true);
  }

  comm::mpi_session();
  comm::set_collective_timeout(config.collective_timeout);
  comm::set_piece_bytes(config.piece_bytes());
  const std::filesystem::path flight_dir = config.out_dir.empty() ? "" : std::filesystem::path(config.out_dir) / "flight";
  comm::flight_recorder().configure(config.flight_ops, flight_dir);
  device::Device& device = check_device(config);
  if (config.shard.pp > 1) return run_pipelined(config, args);
  shard::ShardedRuntime runtime(config.shard, config.model, config.batch, config.seq_len(), config.grad_accum,
                                config.seed, device, config.recomputes(),
                                precision_named(config.precision, "train.precision"),
                                tier_collectives_for(device));
  shard::ShardedEngine& engine = runtime.engine();
  const bool leader = engine.rank() == 0;
  if (args.print_schedule) {
    if (leader) print_schedule(engine.schedule(), args.schedule_json);
    return false;
  }
  train::PreemptionHandler preemption;  // after MPI_Init: ours, not the MPI library's
  comm::flight_recorder().install_dump_signal();
  train::Trainer trainer(config, engine);
  if (leader && !flight_dir.empty()) comm::set_aside_flight_dumps(flight_dir);  // the folder is this run's now
  const std::vector<std::string> hosts = hosts_of_ranks(engine);
  comm::flight_recorder().set_places(engine.rank(), hosts, runtime.topology());
  const std::string placement = ranks_by_host(hosts);
  if (leader) {
    const int tp = engine.parallel_dims().tensor;
    fmt::print("strata train: model {} ({}), strategy {}{} on {} of topology '{}'{}, "
               "batch {} x seq {} x accum {} per {}, steps {}, {}\n",
               config.model_name, model_shape(config.model),
               engine.schedule().spec().preset, tp > 1 ? fmt::format(" with tensor parallelism {}", tp) : "",
               count_of(engine.world_size(), "rank"), runtime.topology().name(),
               config.shard.emulate_links ? fmt::format(" (link emulation on, scale {})", config.shard.emulate_scale)
                                          : "",
               config.batch, config.seq_len(), config.grad_accum, tp > 1 ? "replica" : "rank",
               steps_of(config, trainer),
               device.host_visible()
                   ? fmt::format("{} a rank, {}", count_of(omp_get_max_threads(), "thread"), isa_name(detected_isa()))
                   : fmt::format("{} in {} a rank", device.name(), config.precision));
    if (!placement.empty()) fmt::print("hosts: {}\n", placement);
  }
  return train_and_report(trainer, config, leader);
}

CommandRegistrar registrar(10, [](CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT on token files (flags override --config values)");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  cmd->add_option("--config", args->config_path, "TOML config file: [model], [data], [optim], [train] sections");
  for (const train::SettingInfo& info : train::setting_infos()) add_setting_flag(cmd, info, args->settings);
  cmd->add_option("--resume", args->resume,
                  "continue from a checkpoint folder, or from the newest intact checkpoint of an output folder "
                  "('latest': of --out)");
  cmd->add_flag("--overwrite", args->overwrite, "replace the results of an earlier run in --out");
  cmd->add_flag("--emulate-links", args->emulate_links,
                "hold every message back to the time the topology's bandwidth and latency give its tier");
  add_switch_flags(cmd, args->settings);
  cmd->add_flag("--print-schedule", args->print_schedule,
                "print the step's schedule of collectives, per tier, and exit");
  cmd->add_flag("--json", args->schedule_json,
                "with --print-schedule: one JSON document (each op's issue points, slots and algorithm; the "
                "program's prefetch depth and reductions in flight)");
  args->preview_world_size_option =
      cmd->add_option("--world-size", args->preview_world_size,
                      "with --print-schedule: the schedule of that many ranks, from one process (no mpirun)");
  cmd->add_option("--tier", args->tier_overrides, "override a topology figure: NAME.FIELD=VALUE (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--stop-after", args->stop_after,
                  "end this invocation after that step, with a checkpoint (the schedule still spans --steps)");
  cmd->callback([args] {
    // Everything the run built is gone by now; exit() still finalises MPI (a static session).
    if (run_train(*args)) {
      std::fflush(nullptr);
      std::exit(train::kInterruptedExitStatus);
    }
  });
});

}  // namespace
}  // namespace strata::cli
