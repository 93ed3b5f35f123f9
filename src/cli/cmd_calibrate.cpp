// strata calibrate: measures what the planner otherwise assumes, under mpirun
// (calibrate/measure.hpp), or imports a cluster's own measurements (calibrate/import.hpp), and
// writes one calibration file for `strata plan --calibration FILE` (docs/calibration.md).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "calibrate/import.hpp"
#include "calibrate/measure.hpp"
#include "cli/command.hpp"
#include "cli/format.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "plan/calibration.hpp"
#include "plan/gemm_bench.hpp"

namespace strata::cli {
namespace {

using calibrate::kCheapCollective_s;
using calibrate::kComputePasses;
using calibrate::kMinCollectiveTimings;
using calibrate::kMinComputeTimings;
using calibrate::kPassSpreadNoted;
using calibrate::overlap_bytes;
using calibrate::timings_per_pass;

struct Options {
  calibrate::MeasureOptions measure;
  calibrate::ImportOptions import;
};

void run_calibrate(const calibrate::MeasureOptions& o) {
  const calibrate::Measured measured = calibrate::measure(o);
  if (comm::mpi_session().world_rank() != 0) return;
  const plan::Calibration& cal = measured.calibration;
  atomic_write_file(o.out, cal.to_toml());

  fmt::print(
      "strata calibrate: topology '{}', {}; sizes {:g} KiB..{:g} MiB in {} points, median of {} (slowest rank; {} "
      "where a call takes under {:g} ms; {} for compute, {} in each of {} passes)\n",
      cal.topology, count_of(cal.world_size, "rank"), o.min_kib, o.max_mib, o.points, o.iterations,
      std::max(o.iterations, kMinCollectiveTimings), kCheapCollective_s * 1e3, timings_per_pass(o) * kComputePasses,
      timings_per_pass(o), kComputePasses);
  fmt::print("{:<10} {:>6} {:<15} {:>10} {:>12} {:>11}   {:>10} {:>11}\n", "tier", "group", "collective", "bus GB/s",
             "n1/2 bytes", "latency us", "busy GB/s", "busy lat us");
  for (const plan::TierCalibration& t : cal.tiers)
    for (Collective k : kCollectives) {
      const plan::CollectiveCurve& c = t.curve(k);
      fmt::print("{:<10} {:>6} {:<15} {:>10.4g} {:>12.4g} {:>11.4g}   {:>10.4g} {:>11.4g}\n", t.name, t.group_size,
                 collective_key(k), c.bus_GBps, c.half_bytes, c.latency_s() * 1e6, c.busy_GBps,
                 c.busy_latency_s() * 1e6);
    }
  fmt::print("(busy: the same collective while every rank computes beside it)\n");
  const plan::ComputeCalibration& c = *cal.compute;
  std::vector<std::string> beside;
  for (const plan::TierCalibration& t : cal.tiers)
    beside.push_back(fmt::format("x{:.3g} {}", t.overlap_slowdown, t.name));
  fmt::print("compute ({} a rank, model {}): matmul {:.4g} GFLOP/s, half of it at {:.3g} GFLOP; whole step x{:.3g} "
             "its matmuls; beside a tier's {:.3g} MB all-reduce {}; Adam {:.3g} GB/s; int8/int4 wire coding "
             "{:.3g}/{:.3g} GB/s\n",
             count_of(c.threads, "thread"), o.model, c.peak_gflops, c.half_gflop, c.kernel_overhead,
             static_cast<double>(overlap_bytes(o)) / 1e6, fmt::join(beside, ", "), c.optimizer_GBps,
             c.int8_codec_GBps, c.int4_codec_GBps);
  std::vector<std::string> passes;
  for (double r : measured.pass_ratios) passes.push_back(fmt::format("x{:.3g}", r));
  fmt::print("compute passes (before the collective sweep, between its halves, after it): matmul time {} the "
             "fastest pass's; each figure is the median of all passes' timings\n",
             fmt::join(passes, " / "));
  if (c.pass_spread > kPassSpreadNoted)
    fmt::print("note: a compute pass took x{:.3g} the fastest's matmul time: the machine changed speed while it "
               "calibrated. The pooled medians follow the majority of passes; if more than one pass was slow, "
               "calibrate again on a quieter machine\n",
               c.pass_spread);
  fmt::print("wrote {}\n", o.out);
  std::fflush(stdout);
}

void print_nccl_tests(const std::vector<plan::NcclTestsLog>& logs, const plan::Calibration& cal,
                      const std::vector<std::string>& tiers) {
  fmt::print("strata calibrate: {} from nccl-tests\n", count_of(static_cast<int>(logs.size()), "log"));
  fmt::print("{:<10} {:<15} {:>6} {:>6} {:>5} {:>12} {:>14} {:>11}  {}\n", "tier", "collective", "ranks", "hosts",
             "sizes", "bus GB/s", "log's largest", "latency us", "device, log");
  for (const plan::NcclTestsLog& log : logs) {
    const std::string& tier = log.hosts > 1 ? tiers.back() : tiers[tiers.size() - 2];
    const plan::CollectiveCurve& c = cal.tier(tier).curve(log.collective);
    // The curve is a rank's share of a host's NICs across hosts: the log's bus bandwidth over the ranks of a host.
    fmt::print("{:<10} {:<15} {:>6} {:>6} {:>5} {:>12.4g} {:>14.4g} {:>11.3g}  {}, {}\n", tier,
               collective_key(log.collective), log.ranks, log.hosts, log.rows.size(), c.bus_GBps,
               log.rows.back().bus_GBps / (log.hosts > 1 ? log.ranks_per_host() : 1), c.latency_s() * 1e6,
               log.device, log.path);
  }
  fmt::print("(bus GB/s a rank: fitted over the log's sizes; across hosts the log's bus bandwidth / ranks a host, "
             "every rank of a host crossing at once; an op is priced at the log's own times)\n");
}

void print_gemms(const plan::Calibration& cal, const std::string& path) {
  fmt::print("strata calibrate: {} ({}) from {} on the {}, peak {:g} TFLOP/s\n",
             count_of(static_cast<int>(cal.gemms.size()), "GEMM"), cal.gemms.front().dtype, path, cal.gemm_device,
             cal.gemm_peak_tflops);
  fmt::print("{:>7} {:>7} {:>7} {:>10} {:>8}\n", "m", "n", "k", "TFLOP/s", "of peak");
  for (const plan::GemmPoint& g : cal.gemms)
    fmt::print("{:>7g} {:>7g} {:>7g} {:>10.4g} {:>8.3f}\n", g.m, g.n, g.k, g.tflops, g.tflops / cal.gemm_peak_tflops);
  fmt::print("compute efficiency {:.4f}: the FLOP-weighted {:.4g} TFLOP/s (all FLOPs / all time) over the peak; the "
             "planner prices every matmul at it\n",
             cal.compute_efficiency, plan::flop_weighted_tflops(cal.gemms));
}

// --from-nccl-tests and --from-gemm-bench: the cluster's own measurements into one calibration
// file, no MPI run.
void import_measurements(const calibrate::ImportOptions& o, const std::string& out) {
  if (out.empty()) throw Error("calibrate: --out: required (the calibration file to write)");
  const calibrate::Imported imported = calibrate::import_measurements(o);
  const plan::Calibration& cal = imported.calibration;
  plan::Calibration::from_toml_string(cal.to_toml(), out);  // what plan --calibration will read
  atomic_write_file(out, cal.to_toml());

  if (!imported.logs.empty()) print_nccl_tests(imported.logs, cal, imported.tiers);
  if (!o.gemm_bench.empty()) print_gemms(cal, o.gemm_bench);
  fmt::print("wrote {}\n", out);
  std::fflush(stdout);
}

const CommandRegistrar kRegisterCalibrate(65, [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Under mpirun: measure each tier's collectives, the model's matmuls and kernels, Adam and "
                   "compute's slowdown beside each tier's collectives; write a calibration file for strata plan "
                   "--calibration");
  cmd->add_option("--topology", o->measure.topology, "frontier, dgx-a100, dgx-h100, host, or a TOML file of [[tiers]]");
  cmd->add_option("--from-nccl-tests", o->import.nccl_tests,
                  "instead of measuring: nccl-tests logs (all_gather_perf, reduce_scatter_perf, all_reduce_perf, "
                  "alltoall_perf output) into the curves of the node tier (a one-host log) and the cluster tier "
                  "(several hosts); with --topology or --cluster, that topology's tier names (docs/calibration.md)")
      ->expected(1, -1);
  cmd->add_option("--from-gemm-bench", o->import.gemm_bench,
                  "instead of measuring: a CSV of measured GEMMs (header m,n,k,dtype,tflops; bf16 or fp16) into the "
                  "compute efficiency, their FLOP-weighted TFLOP/s over the device's peak (--cluster or --topology "
                  "names the device; docs/calibration.md)");
  cmd->add_option("--cluster", o->import.cluster, "with --from-nccl-tests or --from-gemm-bench: the cluster whose tiers "
                                           "and device the file is of (as strata plan --cluster)");
  cmd->add_option("--tier", o->measure.tier_overrides, "override a tier field: NAME.FIELD=VALUE (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--out", o->measure.out, "the calibration file to write (TOML)");
  cmd->add_option("--min-kib", o->measure.min_kib, "smallest buffer of the collective sweep, KiB")->capture_default_str();
  cmd->add_option("--max-mib", o->measure.max_mib,
                  "largest buffer of the collective sweep, MiB (caps the run's time and the all-reduce compute is "
                  "timed beside)")
      ->capture_default_str();
  cmd->add_option("--points", o->measure.points, "buffer sizes in the sweep")->capture_default_str();
  cmd->add_option("--iterations", o->measure.iterations, fmt::format("timed runs of each measurement, the median kept (at least {} for a collective whose "
                              "call takes under {:g} ms; at least {} for compute, spread over {} passes)",
                              kMinCollectiveTimings, kCheapCollective_s * 1e3, kMinComputeTimings, kComputePasses))
      ->capture_default_str();
  cmd->add_option("--model", o->measure.model,
                  "strata model whose matmuls and step are timed (tiny, mini, small, gpt2-124m)")
      ->capture_default_str();
  cmd->add_option("--micro-batch", o->measure.micro_batch, "sequences a micro-batch")->capture_default_str();
  cmd->add_option("--seq", o->measure.seq, "tokens a sequence (default: the model's)");
  cmd->callback([o] {
    calibrate::MeasureOptions& m = o->measure;
    if (!o->import.nccl_tests.empty() || !o->import.gemm_bench.empty()) {
      o->import.topology = m.topology;  // the one --topology: what is measured, or what a file is of
      return import_measurements(o->import, m.out);
    }
    if (!o->import.cluster.empty())
      throw Error("calibrate: --cluster: only with --from-nccl-tests or --from-gemm-bench (measure with --topology)");
    m.command_line = fmt::format("strata calibrate --topology {} --model {} --micro-batch {} --seq {} --min-kib {:g} "
                                 "--max-mib {:g} --points {} --iterations {}{}",
                                 m.topology, m.model, m.micro_batch, m.seq, m.min_kib, m.max_mib, m.points,
                                 m.iterations, m.tier_overrides.empty() ? "" : " --tier ...");
    run_calibrate(m);
  });
});

}  // namespace
}  // namespace strata::cli
