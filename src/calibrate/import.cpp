#include "calibrate/import.hpp"

#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "plan/cluster.hpp"
#include "plan/device.hpp"
#include "plan/gemm_bench.hpp"
#include "topo/topology.hpp"

namespace strata::calibrate {
namespace {

// The topology an import names its tiers after (--cluster or --topology; none: node and cluster),
// and the device a GEMM table's rate is a fraction of.
struct ImportTarget {
  std::optional<topo::Topology> topology;
  std::optional<plan::DeviceFacts> device;
  std::vector<std::string> tiers{"node", "cluster"};  // the presets' and --cluster's names
};

ImportTarget import_target(const ImportOptions& o) {
  if (!o.topology.empty() && !o.cluster.empty()) throw Error("calibrate: --topology or --cluster, not both");
  if (o.topology == "host") throw Error("calibrate --from-nccl-tests: --topology host needs an MPI run; name a preset or file");
  ImportTarget t;
  if (!o.cluster.empty()) {
    const plan::ClusterSpec cluster = plan::ClusterSpec::parse(o.cluster);
    t.topology = cluster.topology();
    t.device = cluster.device();
  } else if (!o.topology.empty()) {
    t.topology = topo::Topology::load(o.topology);
    t.device = plan::device_for_topology(o.topology);
  }
  if (t.topology) {
    t.tiers.clear();
    for (const topo::Tier& tier : t.topology->tiers()) t.tiers.push_back(tier.name);
  }
  if (!o.gemm_bench.empty() && !t.device)
    throw Error("calibrate --from-gemm-bench: no device whose peak the table's rate is a fraction of: give --cluster "
                "...,gpu=NAME or --topology frontier|dgx-a100|dgx-h100 (a topology file names no device)");
  return t;
}

}  // namespace

Imported import_measurements(const ImportOptions& o) {
  const ImportTarget target = import_target(o);
  const std::string topology = target.topology ? target.topology->name() : std::string("nccl-tests");
  std::vector<std::string> sources;
  if (!o.nccl_tests.empty()) sources.push_back(fmt::format("--from-nccl-tests {}", fmt::join(o.nccl_tests, " ")));
  if (!o.gemm_bench.empty()) sources.push_back("--from-gemm-bench " + o.gemm_bench);
  if (!o.cluster.empty()) sources.push_back("--cluster " + o.cluster);
  if (!o.topology.empty()) sources.push_back("--topology " + o.topology);
  const std::string command = fmt::format("strata calibrate {}", fmt::join(sources, " "));

  Imported out;
  out.tiers = target.tiers;
  for (const std::string& path : o.nccl_tests) out.logs.push_back(plan::read_nccl_tests_log(path));
  plan::Calibration& cal = out.calibration;
  if (!out.logs.empty()) {
    cal = plan::calibration_from_nccl_tests(out.logs, target.tiers, topology, command);
  } else {  // every tier keeps the topology's figures
    cal.topology = topology;
    cal.command = command;
    for (const std::string& name : target.tiers) cal.tiers.emplace_back().name = name;
  }
  if (!o.gemm_bench.empty())
    plan::set_compute_from_gemms(cal, plan::read_gemm_bench(o.gemm_bench), *target.device, o.gemm_bench);
  return out;
}

}  // namespace strata::calibrate
