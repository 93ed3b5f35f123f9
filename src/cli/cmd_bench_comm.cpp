// strata bench collectives: under mpirun, times each collective three ways on the same
// buffers - strata's flat ring over all ranks, strata's hierarchical composition over the
// tiers, and Open MPI's own flat collective - for buffer sizes from 1 MiB to 64 MiB, and
// prints algorithm bandwidth (buffer bytes / time) and the hierarchical composition's speed
// against the other two as ratios. With --emulate-links, strata's messages are held to the
// topology's alpha-beta link times, and the table adds measured against predicted time;
// Open MPI's collectives are never emulated (their messages are not strata's). --piece-kib
// (comm.piece_kib of the settings table) sets the pieces strata's messages go on the wire in.
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "cli/setting_flags.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/context.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "comm/runtime/pieces.hpp"
#include "plan/calibration.hpp"
#include "plan/predict.hpp"
#include "topo/groups.hpp"

namespace strata::cli {

namespace {

struct Options {
  std::string topology = "configs/topology/2node-2gpu-2die.toml";
  std::vector<std::string> tier_overrides;
  std::vector<double> sizes_mib{1, 4, 16, 64};
  std::string dtype = "fp32";
  int iterations = 3;
  int warmup = 1;
  bool emulate = false;
  double emulate_scale = 1.0;
  bool json = false;
  SettingFlags settings;  // the settings table's flags this command takes (--piece-kib)
};

// One collective of `kind` on `g` over the benchmark's buffers (the full buffer has n elements).
struct Buffers {
  DType dtype;
  std::size_t n = 0, c = 0;
  int d = 1;
  AlignedBuffer<std::byte> full, shard, recv;
  Buffers(DType t, std::size_t n_, int d_) : dtype(t), n(n_), c(comm::chunk_count(n_, d_, 1)), d(d_) {
    full.resize(data_bytes(t, n));
    shard.resize(data_bytes(t, c));
    recv.resize(data_bytes(t, c * std::size_t(d)));
    // Small integers: sums stay finite in every precision, whatever the iteration count.
    for (std::size_t i = 0; i < n; ++i) {
      float v = float(int(i % 7) - 3);
      if (t == DType::F32) std::memcpy(full.data() + 4 * i, &v, 4);
      else {
        std::uint16_t h = t == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        std::memcpy(full.data() + 2 * i, &h, 2);
      }
    }
  }
  void run(comm::Collectives& g, Collective kind) {
    comm::Buf f(dtype, full.data(), n), s(dtype, shard.data(), c), r(dtype, recv.data(), c * std::size_t(d));
    switch (kind) {
      case Collective::AllGather: return g.all_gather(s, f);
      case Collective::ReduceScatter: return g.reduce_scatter(f, s, comm::ReduceOp::Avg);
      case Collective::AllReduce: return g.all_reduce(f, comm::ReduceOp::Avg);
      case Collective::AllToAll: return g.all_to_all(f, r);
    }
  }
};

struct Timing {
  double seconds = 0;    // median over iterations of the slowest rank's time
  double predicted = 0;  // alpha-beta (emulated runs, strata's algorithms only)
  comm::CommStats traffic;  // one call, mean over ranks
};

Timing time_collective(comm::Collectives& g, comm::Accounting& acc, Buffers& b, Collective kind,
                       const Options& o) {
  for (int i = 0; i < o.warmup; ++i) b.run(g, kind);
  std::vector<double> times;
  Timing t;
  for (int i = 0; i < o.iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    comm::CommStats before = acc.snapshot();
    double t0 = MPI_Wtime();
    b.run(g, kind);
    double mine = MPI_Wtime() - t0, slowest = 0;
    if (i == 0) t.traffic = acc.snapshot() - before;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times.push_back(slowest);
  }
  t.seconds = plan::median(times);
  // Mean traffic per rank of one call, per tier.
  for (auto& tier : t.traffic.tiers) {
    std::uint64_t mine[3] = {tier.bytes_sent, tier.bytes_received, tier.messages}, sum[3];
    MPI_Allreduce(mine, sum, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tier = {sum[0] / world, sum[1] / world, sum[2] / world};
  }
  return t;
}

nlohmann::json timing_json(const Timing& t, std::size_t bytes, bool emulated) {
  nlohmann::json j{{"seconds", t.seconds}, {"algbw_GBps", double(bytes) / t.seconds / 1e9}};
  if (emulated) j["predicted_seconds"] = t.predicted;
  nlohmann::json tiers = t.traffic.to_json()["tiers"];
  if (t.traffic.total().messages > 0) j["per_rank_traffic"] = tiers;
  return j;
}

void run_bench(const Options& o) {
  const comm::MpiSession& mpi = comm::mpi_session();
  // Every rank checks the same flags and reads the same topology: a refusal prints once.
  std::optional<topo::Topology> loaded;
  DType dtype{};
  comm::agree(MPI_COMM_WORLD, "world", [&] {
    if (o.iterations < 1) throw Error(fmt::format("bench collectives: --iterations {} must be at least 1", o.iterations));
    if (o.warmup < 0) throw Error(fmt::format("bench collectives: --warmup {} must not be negative", o.warmup));
    if (o.emulate && !(o.emulate_scale > 0))
      throw Error(fmt::format("bench collectives: --emulate-scale {} must be positive", o.emulate_scale));
    for (double s : o.sizes_mib)
      if (!(s > 0)) throw Error(fmt::format("bench collectives: --sizes-mib {} must be positive", s));
    dtype = parse_dtype(o.dtype, "--dtype");
    if (!is_reducible(dtype))
      throw Error(fmt::format("bench collectives: --dtype {} cannot be reduced; use fp32, bf16 or fp16", o.dtype));

    comm::set_piece_bytes(train::build_piece_bytes(o.settings.given()));
    loaded.emplace(topo::Topology::load(o.topology));
    for (const auto& spec : o.tier_overrides) loaded->apply_override(topo::parse_tier_override(spec));
    loaded->resolve(mpi.world_size());
  });
  const topo::Topology& topology = *loaded;
  comm::Context ctx(topology, comm::EmulationOptions{o.emulate, o.emulate_scale});
  topo::ProcessGroups groups(ctx.topology());
  comm::TierComms comms(ctx, groups);
  const int outer = topology.num_tiers() - 1;
  comm::Communicator& ring = comms.within(outer);
  comm::Hierarchy& hier = comms.hierarchical(outer);
  comm::MpiFlat& flat = comms.mpi(outer);
  const bool root = mpi.world_rank() == 0;

  std::vector<std::string> shape;
  for (const auto& t : topology.tiers()) shape.push_back(fmt::format("{} {}", t.name, t.size));
  const std::string emulation =
      o.emulate ? fmt::format("link emulation ON (scale {})", o.emulate_scale) : std::string("link emulation off");
  if (root && !o.json) {
    fmt::print("strata bench collectives: topology '{}' ({}), {}, {}, median of {} (slowest rank), {}\n",
               topology.name(), fmt::join(shape, " x "), count_of(topology.world_size(), "rank"), o.dtype, o.iterations,
               emulation);
    std::vector<std::string> transport;
    for (const auto& t : mpi.transport())
      transport.push_back(fmt::format("{} {} ({})", t.name, t.value, t.given ? "given" : "strata's default"));
    if (!transport.empty()) fmt::print("transport: {}\n", fmt::join(transport, ", "));
    const std::size_t piece = comm::piece_bytes();
    fmt::print("pieces on the wire: {}\n",
               piece == 0 ? std::string("whole messages") : fmt::format("{} KiB (--piece-kib)", piece / 1024));
    fmt::print("algbw = buffer bytes / time; ring = strata flat ring over all ranks; hier = strata {}; "
               "mpi = Open MPI's own (never emulated)\n",
               hier.name());
    fmt::print("{:>8} {:<15} {:>9} {:>9} {:>9} {:>9} {:>9}", "MiB", "collective", "ring GB/s", "hier GB/s",
               "mpi GB/s", "hier/mpi", "hier/ring");
    if (o.emulate)
      fmt::print(" {:>10} {:>10} {:>7} {:>10} {:>10} {:>7}", "ring ms", "pred ms", "meas/p", "hier ms", "pred ms",
                 "meas/p");
    fmt::print("\n");
  }

  nlohmann::json results = nlohmann::json::array();
  for (double mib : o.sizes_mib) {
    const std::size_t bytes = std::size_t(mib * 1024 * 1024);
    Buffers b(dtype, bytes / data_bytes(dtype, 1), topology.world_size());
    const std::size_t wire = data_bytes(dtype, b.c * std::size_t(b.d));  // padded bytes on the wire
    for (Collective kind : kCollectives) {
      Timing tr = time_collective(ring, ctx.accounting(), b, kind, o);
      Timing th = time_collective(hier, ctx.accounting(), b, kind, o);
      Timing tm = time_collective(flat, ctx.accounting(), b, kind, o);
      if (o.emulate) {
        tr.predicted = plan::predict_seconds(topology, ring, kind, wire, o.emulate_scale);
        th.predicted = plan::predict_seconds(topology, hier, kind, wire, o.emulate_scale);
      }
      const std::string name(collective_key(kind));
      results.push_back({{"bytes", bytes},
                         {"collective", name},
                         {"ring", timing_json(tr, bytes, o.emulate)},
                         {"hier", timing_json(th, bytes, o.emulate)},
                         {"mpi", timing_json(tm, bytes, false)},
                         {"hier_speedup_vs_mpi", tm.seconds / th.seconds},
                         {"hier_speedup_vs_ring", tr.seconds / th.seconds}});
      if (!root || o.json) continue;
      auto bw = [&](const Timing& t) { return double(bytes) / t.seconds / 1e9; };
      fmt::print("{:>8.4g} {:<15} {:>9.3f} {:>9.3f} {:>9.3f} {:>8.2f}x {:>8.2f}x", mib, name, bw(tr), bw(th), bw(tm),
                 tm.seconds / th.seconds, tr.seconds / th.seconds);
      if (o.emulate)
        fmt::print(" {:>10.2f} {:>10.2f} {:>7.2f} {:>10.2f} {:>10.2f} {:>7.2f}", tr.seconds * 1e3, tr.predicted * 1e3,
                   tr.seconds / tr.predicted, th.seconds * 1e3, th.predicted * 1e3, th.seconds / th.predicted);
      fmt::print("\n");
      std::fflush(stdout);
    }
  }
  if (root && o.json) {
    nlohmann::json doc{{"benchmark", "collectives"},
                       {"topology", topology.to_json()},
                       {"world_size", topology.world_size()},
                       {"dtype", o.dtype},
                       {"iterations", o.iterations},
                       {"piece_bytes", comm::piece_bytes()},
                       {"emulated", o.emulate},
                       {"results", results}};
    if (o.emulate) doc["emulate_scale"] = o.emulate_scale;
    nlohmann::json transport = nlohmann::json::object();
    for (const auto& t : mpi.transport()) transport[t.name] = {{"value", t.value}, {"given", t.given}};
    doc["transport"] = transport;
    fmt::print("{}\n", doc.dump(2));
  } else if (root) {
    fmt::print("hier/mpi, hier/ring: how many times faster the hierarchical composition ran{}\n",
               o.emulate ? "; pred = alpha-beta time of the emulated links, meas/p = measured / predicted" : "");
  }
}

const CommandRegistrar registrar(60, [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench_group(app)->add_subcommand(
      "collectives", "Bandwidth of each collective: strata's ring and hierarchical algorithms vs Open MPI's (mpirun)");
  cmd->add_option("--topology", o->topology, "preset name or TOML file (default: the 2-node test topology)");
  cmd->add_option("--tier", o->tier_overrides, "override a tier field: NAME.FIELD=VALUE (repeatable)");
  cmd->add_option("--sizes-mib", o->sizes_mib, "buffer sizes in MiB")->delimiter(',');
  cmd->add_option("--dtype", o->dtype, "element type: fp32, bf16, fp16");
  cmd->add_option("--iterations", o->iterations, "timed calls per measurement (the median is reported)");
  cmd->add_option("--warmup", o->warmup, "untimed calls before each measurement");
  CLI::Option* emulate = cmd->add_flag("--emulate-links", o->emulate, "hold each message to its tier's alpha-beta time");
  cmd->add_option("--emulate-scale", o->emulate_scale, "multiply every emulated link time (0.1 = 10x faster links)")
      ->needs(emulate);
  cmd->add_flag("--json", o->json, "print JSON instead of a table");
  add_setting_flag(cmd, train::setting_info("comm.piece_kib"), o->settings);
  cmd->callback([o] { run_bench(*o); });
});

}  // namespace
}  // namespace strata::cli
