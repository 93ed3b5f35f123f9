#include "plan/doctor.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "comm/runtime/flight.hpp"
#include "comm/runtime/wait.hpp"
#include "model/layout.hpp"
#include "plan/cost_model.hpp"
#include "shard/runtime.hpp"
#include "shard/schedule.hpp"

namespace strata::plan {

namespace {

// A slow link or a straggler is named when its median delay is this many times the next
// host's or rank's, and at least kMinLinkDelay (kMinLateness) seconds: noise on a busy machine
// stays below both.
constexpr double kStandsOut = 3.0;
constexpr double kMinLinkDelay = 1e-3;
constexpr double kMinLateness = 0.5e-3;  // a straggler's extra compute a step

// ---- The run's plan ------------------------------------------------------------------------

// The run's physical topology from its summary.json, which holds the sharding's view of it: a
// tensor-parallel run's TP tier has `tp` times the ranks (its ports' shares are the view's).
topo::Topology topology_of(const nlohmann::json& t, int world, int tp, const std::string& tp_tier,
                           const std::string& origin) {
  std::string text;
  const auto& tiers = t.at("tiers");
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const auto& tier = tiers[i];
    const std::string name = tier.at("name").get<std::string>();
    const bool tp_here = tp_tier.empty() ? i == 0 : name == tp_tier;
    text += fmt::format("[[tiers]]\nname = {}\n", nlohmann::json(name).dump());
    if (i + 1 < tiers.size()) text += fmt::format("size = {}\n", tier.at("size").get<int>() * (tp_here ? tp : 1));
    text += fmt::format("bandwidth_GBps = {}\nlatency_us = {}\nefficiency = {}\n", tier.at("bandwidth_GBps").get<double>(),
                        tier.at("latency_us").get<double>(), tier.at("efficiency").get<double>());
    if (tier.at("ports").get<int>() > 0)
      text += fmt::format("ports = {}\nport_GBps = {}\n", tier.at("ports").get<int>(), tier.at("port_GBps").get<double>());
  }
  topo::Topology topology = topo::Topology::from_toml_string(text, origin);
  topology.resolve(world);
  return topology;
}

struct RunPlan {
  topo::Topology topology;
  shard::Schedule schedule;
  std::vector<const shard::ScheduledOp*> by_id;  // Schedule::op_id order
};

RunPlan plan_of_run(const std::filesystem::path& path) {
  const nlohmann::json s = nlohmann::json::parse(read_file_text(path));
  const std::string origin = path.string();
  try {
    const auto& config = s.at("config");
    const int world = s.at("world_size").get<int>();
    const model::ModelConfig model = model::ModelConfig::from_json(s.at("model").at("config"));
    const auto& sh = config.at("shard");
    const auto& tr = config.at("train");
    parallel::ShardOptions options;
    options.strategy = sh.at("strategy").get<std::string>();
    if (options.strategy.empty()) throw Error("a single-process run: nothing to diagnose");
    options.shard = sh.at("shard").get<std::string>();
    options.secondary = sh.at("secondary").get<std::string>();
    options.weight_wire = sh.at("weight_wire").get<std::string>();
    options.grad_wire = sh.at("grad_wire").get<std::string>();
    options.step_grad_wire = sh.at("step_grad_wire").get<std::string>();
    options.block_size = sh.at("block_size").get<int>();
    options.prefetch = sh.at("prefetch").get<int>();
    options.bucket_bytes = sh.at("bucket_bytes").get<std::int64_t>();
    options.first_bucket_bytes = sh.value("first_bucket_bytes", std::int64_t{-1});  // summaries from before it: the default
    options.tp = sh.at("tp").get<int>();
    options.tp_tier = sh.at("tp_tier").get<std::string>();
    topo::Topology topology =
        topology_of(s.at("topology"), world, options.tp, options.tp_tier, origin + ": topology");
    const parallel::ParallelDims dims = shard::build_dims(options, topology);
    const topo::Topology data_parallel = dims.tensor > 1 ? dims.data_parallel_topology(topology) : topology;
    const int batch = tr.at("batch").get<int>(), seq = tr.at("seq").get<int>();
    const bool recompute = tr.at("recompute").get<std::string>() == "full";
    shard::Schedule schedule(model::ParamLayout(model, {dims.tensor, 0}), data_parallel,
                             shard::build_spec(options, data_parallel), tr.at("grad_accum").get<int>(),
                             shard::tensor_parallel_plan(dims, model, batch, seq, recompute,
                                                         sh.value("sequence_parallel", false)));
    RunPlan plan{std::move(topology), std::move(schedule), {}};
    for (const auto* ops : {&plan.schedule.micro_batch_ops(), &plan.schedule.tensor_parallel_ops(),
                            &plan.schedule.bucket_ops(), &plan.schedule.step_ops()})
      for (const auto& op : *ops) plan.by_id.push_back(&op);
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not the summary of a sharded run: {}", origin, e.what()));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
}

// ---- Ops as recorded -----------------------------------------------------------------------

struct Seen {
  int rank;
  const nlohmann::json* op;
  double start, end;  // seconds on the wall clock
};

double seconds(const nlohmann::json& op, const char* field) { return op[field].get<std::int64_t>() * 1e-9; }

// Every finished op of every dump, by sequence number (the same op on every rank).
std::map<std::int64_t, std::vector<Seen>> finished_ops(const comm::FlightDumps& d) {
  std::map<std::int64_t, std::vector<Seen>> by_seq;
  for (int r = 0; r < d.world_size; ++r) {
    if (d.dumps[r].is_null()) continue;
    for (const auto& op : d.dumps[r]["ops"])
      if (op["state"] == "done" && op["start_ns"].get<std::int64_t>() > 0)
        by_seq[op["seq"].get<std::int64_t>()].push_back({r, &op, seconds(op, "start_ns"), seconds(op, "end_ns")});
  }
  return by_seq;
}

// The members of each group one op ran over (rank order: the ring's order).
std::map<std::string, std::vector<const Seen*>> groups_of(const std::vector<Seen>& seen) {
  std::map<std::string, std::vector<const Seen*>> g;
  for (const Seen& s : seen) g[(*s.op)["group"].get<std::string>()].push_back(&s);
  return g;
}

void tier_table(const std::map<std::int64_t, std::vector<Seen>>& ops, const RunPlan* plan, const Calibration* cal,
                DoctorReport& out) {
  struct Sum {
    int ops = 0;
    double measured = 0, planned = 0;
  };
  std::map<std::pair<std::string, std::string>, Sum> sums;
  for (const auto& [seq, seen] : ops)
    for (const Seen& s : seen) {
      Sum& sum = sums[{(*s.op)["tier"].get<std::string>(), (*s.op)["kind"].get<std::string>()}];
      ++sum.ops;
      sum.measured += s.end - s.start;
      const int id = (*s.op)["op"].get<int>();
      if (plan && id >= 0 && id < static_cast<int>(plan->by_id.size())) {
        // Tensor parallelism's ops run over the physical tiers, the sharding's over the
        // data-parallel ones (the schedule's own topology).
        const shard::ScheduledOp& op = *plan->by_id[id];
        const bool tp = op.purpose == shard::Purpose::TensorParallel ||
                        op.purpose == shard::Purpose::TensorParallelScalars;
        sum.planned += price_op(op, tp ? plan->topology : plan->schedule.topology(), cal).seconds();
      }
    }
  out.lines.push_back(fmt::format("per tier and op kind, milliseconds an op (mean over ranks and ops){}:",
                                  plan ? ", measured against the plan" : " (no summary.json: no plan)"));
  out.lines.push_back(fmt::format("  {:<10} {:<15} {:>7} {:>11} {:>11} {:>7}", "tier", "kind", "ops", "measured",
                                  "planned", "ratio"));
  out.json["tiers"] = nlohmann::json::array();
  for (const auto& [key, sum] : sums) {
    const double measured = sum.measured / sum.ops, planned = sum.planned / sum.ops;
    out.lines.push_back(fmt::format("  {:<10} {:<15} {:>7} {:>11.4f} {:>11.4f} {:>7}", key.first, key.second, sum.ops,
                                    1e3 * measured, 1e3 * planned,
                                    planned > 0 ? fmt::format("{:.1f}x", measured / planned) : "-"));
    out.json["tiers"].push_back({{"tier", key.first},
                                 {"kind", key.second},
                                 {"ops", sum.ops},
                                 {"measured_s", measured},
                                 {"planned_s", plan ? nlohmann::json(planned) : nlohmann::json(nullptr)}});
  }
}

// For each op over a group, how long after the later of (receiver ready, sender ready) the op
// ended on the receiver: the time the sender's data took to arrive. Charged to the sender's
// host and the op's tier. A straggler delays every ring it is in, which would read as slow
// links around it: links are judged only when no straggler is named.
void slow_links(const std::map<std::int64_t, std::vector<Seen>>& ops, const comm::FlightDumps& d, bool straggler,
                DoctorReport& out) {
  std::map<std::string, std::map<std::string, std::vector<double>>> delay;  // tier -> sender host -> delays
  for (const auto& [seq, seen] : ops)
    for (const auto& [group, members] : groups_of(seen)) {
      if (members.size() < 2) continue;
      const std::string tier = (*members.front()->op)["tier"].get<std::string>();
      for (std::size_t m = 0; m < members.size(); ++m) {
        const Seen& receiver = *members[m];
        const Seen& sender = *members[(m + members.size() - 1) % members.size()];
        delay[tier][d.hosts[sender.rank]].push_back(receiver.end - std::max(receiver.start, sender.start));
      }
    }
  out.json["links"] = nlohmann::json::array();
  for (const auto& [tier, by_host] : delay) {
    std::vector<std::pair<double, std::string>> medians;
    for (const auto& [host, v] : by_host) medians.push_back({median(v), host});
    std::sort(medians.rbegin(), medians.rend());
    for (const auto& [m, host] : medians)
      out.json["links"].push_back({{"tier", tier}, {"host", host}, {"median_delay_s", m}});
    if (medians.size() < 2 || straggler) continue;
    const auto& [worst, host] = medians[0];
    const double next = medians[1].first;
    if (worst < kMinLinkDelay || worst < kStandsOut * next) continue;
    out.lines.push_back(fmt::format("slow link: host {}'s link on the {} tier: what it sends arrives {:.2f} ms after "
                                    "its receiver is ready (median over its ops), the next host's {:.2f} ms ({:.0f}x)",
                                    host, tier, 1e3 * worst, 1e3 * next, worst / std::max(next, 1e-9)));
    out.json["slow_links"].push_back({{"host", host}, {"tier", tier}, {"median_delay_s", worst}, {"next_s", next}});
  }
}

// A rank whose steps compute far longer than the other ranks' (its dump's compute_s: the
// step's time less its waits for collectives) holds them all up: they wait for it in every
// collective. Returns whether one is named.
bool stragglers(const comm::FlightDumps& d, DoctorReport& out) {
  std::vector<std::pair<double, int>> per_step;  // compute seconds a step, rank
  for (int r = 0; r < d.world_size; ++r) {
    if (d.dumps[r].is_null()) continue;
    const auto steps = d.dumps[r]["timed_steps"].get<std::int64_t>();
    if (steps > 0) per_step.push_back({d.dumps[r]["compute_s"].get<double>() / steps, r});
  }
  std::sort(per_step.rbegin(), per_step.rend());
  out.json["ranks"] = nlohmann::json::array();
  for (const auto& [s, rank] : per_step)
    out.json["ranks"].push_back({{"rank", rank}, {"host", d.hosts[rank]}, {"compute_s_per_step", s}});
  if (per_step.size() < 2) return false;
  std::vector<double> others;
  for (std::size_t i = 1; i < per_step.size(); ++i) others.push_back(per_step[i].first);
  const auto& [worst, rank] = per_step[0];
  const double typical = median(others);
  if (worst - typical < kMinLateness || worst < kStandsOut * typical) return false;
  out.lines.push_back(fmt::format("straggler: rank {} (host {}) computes {:.2f} ms a step, the other ranks {:.2f} ms "
                                  "(median; {:.0f}x): they wait for it in every collective",
                                  rank, d.hosts[rank], 1e3 * worst, 1e3 * typical, worst / std::max(typical, 1e-9)));
  out.json["straggler"] = {{"rank", rank}, {"host", d.hosts[rank]}, {"compute_s_per_step", worst},
                           {"others_s", typical}};
  return true;
}

}  // namespace

DoctorReport diagnose_run(const std::filesystem::path& out_dir, const Calibration* calibration) {
  DoctorReport out;
  const comm::FlightDumps dumps = comm::read_flight_dumps(out_dir / "flight");
  std::set<std::string> reasons;
  for (const auto& j : dumps.dumps)
    if (!j.is_null()) reasons.insert(j["reason"].get<std::string>());
  out.lines.push_back(fmt::format("{}: {} of {} ranks dumped their flight recorder ({})", out_dir.string(),
                                  dumps.readable(), dumps.world_size, fmt::join(reasons, ", ")));
  out.json = {{"folder", out_dir.string()}, {"world_size", dumps.world_size}, {"dumps", dumps.readable()},
              {"problems", nlohmann::json::array()}, {"slow_links", nlohmann::json::array()}};
  for (int r = 0; r < dumps.world_size; ++r)
    if (!dumps.problems[r].empty()) out.json["problems"].push_back({{"rank", r}, {"problem", dumps.problems[r]}});
  const std::filesystem::path printed = out_dir / "flight" / "desync.txt";
  if (std::filesystem::exists(printed)) {
    // The report as the job printed it when it hung: what ranks did after (mpirun's SIGCONT
    // resumes a stopped rank, which then times out and dumps too) is not part of the hang.
    out.lines.push_back(fmt::format("hang (the report printed then, {}):", printed.string()));
    std::istringstream text(read_file_text(printed));
    std::vector<std::string> report;
    for (std::string line; std::getline(text, line);)
      if (line.starts_with("  ")) report.push_back(line.substr(2));
    for (const std::string& l : report) out.lines.push_back("  " + l);
    out.json["desync_printed"] = report;
  }
  if (reasons.count("timeout")) {
    const comm::DesyncReport desync = comm::desync_report(dumps);
    out.lines.push_back("hang, from the dumps now in the folder:");
    for (const std::string& l : desync.lines) out.lines.push_back("  " + l);
    out.json["desync"] = desync.json;
  } else {
    for (int r = 0; r < dumps.world_size; ++r)
      if (!dumps.problems[r].empty()) out.lines.push_back(fmt::format("rank {}: {}", r, dumps.problems[r]));
  }
  std::optional<RunPlan> plan;
  const std::filesystem::path summary = out_dir / "summary.json";
  if (std::filesystem::exists(summary)) plan.emplace(plan_of_run(summary));
  if (plan && calibration) calibration->check_covers(plan->topology, "--calibration");
  const auto ops = finished_ops(dumps);
  tier_table(ops, plan ? &*plan : nullptr, calibration, out);
  const bool straggler = stragglers(dumps, out);
  slow_links(ops, dumps, straggler, out);
  return out;
}

}  // namespace strata::plan
