#include "plan/calibration.hpp"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "plan/cost_model.hpp"
#include "plan/model_parallel.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

// Points exactly on t = (n + half) / B.
CollectiveCurve exact_curve(double bus_GBps, double half_bytes, int messages) {
  std::vector<double> bytes{1e4, 1e5, 1e6, 1e7}, seconds;
  for (double n : bytes) seconds.push_back((n + half_bytes) / (bus_GBps * 1e9));
  return CollectiveCurve::fit(bytes, seconds, messages);
}

// A calibration of the dgx-h100 preset's tiers: `cluster_GBps` on the cluster tier.
Calibration h100_calibration(double cluster_GBps, double overlap_slowdown = 1.0) {
  Calibration c;
  c.topology = "dgx-h100";
  c.world_size = 32;
  c.command = "test";
  for (auto [name, group, bus] : {std::tuple{"node", 8, 300.0}, {"cluster", 4, cluster_GBps}}) {
    TierCalibration t{name, group, name == std::string("node") ? 1 : 8, {}};
    for (Collective k : kCollectives) t.curves[static_cast<int>(k)] = exact_curve(bus, 64e3, group - 1);
    c.tiers.push_back(t);
  }
  // The cluster tier also measured beside compute: three times its fixed cost, half its bandwidth.
  for (Collective k : kCollectives) {
    CollectiveCurve& curve = *c.tiers[1].curves[static_cast<int>(k)];
    std::vector<double> bytes{1e4, 1e7}, seconds;
    for (double n : bytes) seconds.push_back((n / 0.5 + 3 * 64e3) / (cluster_GBps * 1e9));
    curve.fit_under_compute(bytes, seconds);
  }
  ComputeCalibration& compute = c.compute.emplace();
  compute.peak_gflops = 600e3;
  compute.half_gflop = 2;
  compute.kernel_overhead = 1.2;
  compute.overlap_slowdown = overlap_slowdown;
  compute.optimizer_GBps = 2500;
  compute.int8_codec_GBps = 50;
  compute.int4_codec_GBps = 40;
  compute.gflop = {1, 10, 100};
  compute.seconds = {0.1, 0.2, 0.3};
  compute.passes = 3;
  compute.pass_spread = 1.5;
  return c;
}

PlanContext h100_plan(std::optional<Calibration> calibration) {
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(4));
  Workload w;
  w.seq = 4096;
  return PlanContext(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w, {},
                     std::move(calibration));
}

Estimate priced(const PlanContext& c, const std::string& strategy) {
  return c.estimate(strategy, apply_precision(strategy_spec(strategy, c.topology()), c.workload().precision));
}

void expect_refused(const std::string& text, std::initializer_list<std::string_view> parts) {
  const std::string message = error_of([&] { Calibration::from_toml_string(text, "cal.toml"); });
  for (std::string_view p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' in: " << message;
}

std::string replace(std::string text, std::string_view from, std::string_view to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

}  // namespace

TEST(Calibration, FitsRecoverTheCurve) {
  const CollectiveCurve c = exact_curve(12.5, 256e3, 3);
  EXPECT_NEAR(c.bus_GBps, 12.5, 1e-9);
  EXPECT_NEAR(c.half_bytes, 256e3, 1e-3);
  EXPECT_NEAR(c.latency_s(), 256e3 / 12.5e9, 1e-15);
  // Half the bus bandwidth at n½: time = 2 n½ / B.
  EXPECT_NEAR(c.seconds_for(256e3, 3), 2 * 256e3 / 12.5e9, 1e-15);
  // A group of another size pays its own number of steps' latency.
  EXPECT_NEAR(c.seconds_for(256e3, 6), 3 * 256e3 / 12.5e9, 1e-15);
  // Noise that would give a negative fixed cost is fitted through the origin.
  const LineFit f = fit_line_relative({1, 2, 4}, {0.9, 2.1, 4.4});
  EXPECT_GE(f.intercept, 0);
  EXPECT_GT(f.slope, 0);
}

TEST(Calibration, RoundTripsThroughItsFile) {
  Calibration a = h100_calibration(40, 1.25);
  a.tiers[0].overlap_slowdown = 1.75;  // the node tier measured its own; the cluster tier takes compute's
  a.tiers[0].overlap_all_reduce_bytes = 2.5e6;  // and the all-reduces it was timed beside
  const std::string text = a.to_toml();
  const Calibration b = Calibration::from_toml_string(text, "cal.toml");
  EXPECT_EQ(b.version, Calibration::kVersion);
  EXPECT_EQ(b.topology, "dgx-h100");
  EXPECT_EQ(b.world_size, 32);
  EXPECT_EQ(b.command, "test");
  ASSERT_EQ(b.tiers.size(), 2u);
  for (std::size_t t = 0; t < 2; ++t) {
    EXPECT_EQ(b.tiers[t].name, a.tiers[t].name);
    EXPECT_EQ(b.tiers[t].group_size, a.tiers[t].group_size);
    EXPECT_EQ(b.tiers[t].ranks_sharing, a.tiers[t].ranks_sharing);
    EXPECT_DOUBLE_EQ(b.tiers[t].overlap_slowdown, a.tiers[t].overlap_slowdown);
    EXPECT_DOUBLE_EQ(b.overlap_slowdown(b.tiers[t].name), t == 0 ? 1.75 : 1.25);
    EXPECT_DOUBLE_EQ(b.tiers[t].overlap_all_reduce_bytes, t == 0 ? 2.5e6 : 0);
    for (Collective k : kCollectives) {
      const CollectiveCurve &x = a.tiers[t].curve(k), &y = b.tiers[t].curve(k);
      EXPECT_DOUBLE_EQ(y.bus_GBps, x.bus_GBps);
      EXPECT_DOUBLE_EQ(y.half_bytes, x.half_bytes);
      EXPECT_EQ(y.messages, x.messages);
      EXPECT_EQ(y.bytes, x.bytes);
      EXPECT_EQ(y.seconds, x.seconds);
      EXPECT_EQ(y.has_under_compute(), t == 1);
      EXPECT_DOUBLE_EQ(y.busy_GBps, x.busy_GBps);
      EXPECT_DOUBLE_EQ(y.busy_half_bytes, x.busy_half_bytes);
      EXPECT_EQ(y.busy_bytes, x.busy_bytes);
      EXPECT_EQ(y.busy_seconds, x.busy_seconds);
    }
  }
  EXPECT_DOUBLE_EQ(b.compute->int8_codec_GBps, 50);
  EXPECT_DOUBLE_EQ(b.compute->int4_codec_GBps, 40);
  EXPECT_DOUBLE_EQ(b.compute->peak_gflops, a.compute->peak_gflops);
  EXPECT_DOUBLE_EQ(b.compute->half_gflop, a.compute->half_gflop);
  EXPECT_DOUBLE_EQ(b.compute->kernel_overhead, a.compute->kernel_overhead);
  EXPECT_DOUBLE_EQ(b.compute->overlap_slowdown, a.compute->overlap_slowdown);
  EXPECT_DOUBLE_EQ(b.compute->optimizer_GBps, a.compute->optimizer_GBps);
  EXPECT_EQ(b.compute->threads, a.compute->threads);
  EXPECT_EQ(b.compute->gflop, a.compute->gflop);
  EXPECT_EQ(b.compute->passes, 3);
  EXPECT_DOUBLE_EQ(b.compute->pass_spread, 1.5);
  EXPECT_EQ(b.to_toml(), text);
  // A file written before compute was timed in passes reads as one pass.
  const Calibration old = Calibration::from_toml_string(replace(replace(text, "passes = 3", ""), "pass_spread = 1.5", ""));
  EXPECT_EQ(old.compute->passes, 1);
  EXPECT_DOUBLE_EQ(old.compute->pass_spread, 1);
}

// Compute timed in three passes over a calibration, one of which a spell of slow machine
// covered (x1.5, as run 30's 300mbit small calibration against its neighbours): the pooled
// median keeps the fast passes' figure, and the spread names the slow pass.
TEST(Calibration, ASlowComputePassDoesNotSetTheFigure) {
  PassTimings matmul{{{1.00, 1.02, 0.98}, {1.50, 1.53, 1.47}, {1.01, 0.99, 1.00}}};
  EXPECT_DOUBLE_EQ(matmul.pooled_median(), 1.01);  // the fast passes' slowest timing at most
  EXPECT_DOUBLE_EQ(matmul.pass_median(1), 1.50);
  PassTimings step{{{2.0, 2.0, 2.0}, {3.0, 3.0, 3.0}, {2.0, 2.0, 2.0}}};
  // Summed pass medians: 3.0, 4.5, 3.01.
  EXPECT_DOUBLE_EQ(pass_spread({matmul, step}), 4.5 / 3.0);
  // Two slow passes of three set it: the limit, which calibrate's note names.
  PassTimings twice{{{1.0, 1.0, 1.0}, {1.5, 1.5, 1.5}, {1.5, 1.5, 1.5}}};
  EXPECT_DOUBLE_EQ(twice.pooled_median(), 1.5);
  EXPECT_DOUBLE_EQ(pass_spread({PassTimings{{{1.0}}}}), 1);  // one pass: nothing to compare
  EXPECT_NE(error_of([&] { pass_spread({matmul, PassTimings{{{1.0}}}}); }).find("timed in 3 and 1 passes"),
            std::string::npos);
  EXPECT_NE(error_of([] { PassTimings{}.pooled_median(); }).find("no timings"), std::string::npos);
}

TEST(Calibration, MalformedFilesAreRefusedNamingTheField) {
  const std::string good = h100_calibration(40).to_toml();
  expect_refused(replace(good, "version = 1", "version = 2"), {"cal.toml: version = 2", "reads version 1"});
  expect_refused(replace(good, "version = 1", ""), {"cal.toml: version: missing"});
  expect_refused(replace(good, "version = 1", "version = 1\nspeed = 3"), {"cal.toml: speed: unknown field"});
  expect_refused(replace(good, "peak_gflops = ", "peak_gflops = -"), {"cal.toml: compute.peak_gflops = -", "positive"});
  expect_refused(replace(good, "kernel_overhead = 1.2", "kernel_overhead = 0.5"),
                 {"compute.kernel_overhead = 0.5", "at least 1"});
  expect_refused(replace(good, "bus_GBps = ", "bus_GBps = 'fast' # "),
                 {"cal.toml: tiers[0] ('node').all_gather.bus_GBps: must be a number"});
  expect_refused(replace(good, "group_size = 8", "group_size = 0"), {"tiers[0] ('node').group_size = 0"});
  expect_refused(replace(good, "group_size = 8", "group_size = 8\noverlap_slowdown = 0.5"),
                 {"cal.toml: tiers[0] ('node').overlap_slowdown = 0.5", "at least 1"});
  expect_refused(replace(good, "group_size = 8", "group_size = 8\noverlap_all_reduce_bytes = 0"),
                 {"cal.toml: tiers[0] ('node').overlap_all_reduce_bytes = 0", "positive"});
  expect_refused(replace(good, "group_size = 8", "group_size = 8\noverlap_all_reduce_bytes = 'many'"),
                 {"cal.toml: tiers[0] ('node').overlap_all_reduce_bytes: must be a number"});
  expect_refused(replace(good, "gflop = [ 1.0, 10.0, 100.0 ]", "gflop = [ 1.0, 10.0 ]"),
                 {"cal.toml: compute", "same number of points"});
  expect_refused("version = 1\n[compute\n", {"cal.toml:2:"});
  expect_refused(replace(good, "pass_spread = 1.5", "pass_spread = 0.5"), {"cal.toml: compute.pass_spread = 0.5", "at least 1"});
  expect_refused(replace(good, "passes = 3", "passes = 0"), {"cal.toml: compute.passes = 0"});
  expect_refused(replace(good, "int8_codec_GBps = 50", "int8_codec_GBps = 0"),
                 {"cal.toml: compute.int8_codec_GBps = 0", "positive"});
  const std::string busy = "[tiers.all_gather.under_compute]\n";
  ASSERT_NE(good.find(busy), std::string::npos) << good;
  expect_refused(replace(good, busy, busy + "speed = 1\n"),
                 {"cal.toml: tiers[1] ('cluster').all_gather.under_compute.speed: unknown field"});
  expect_refused(replace(good, busy, busy + "bus_GBps = -2\n# "),
                 {"tiers[1] ('cluster').all_gather.under_compute.bus_GBps = -2", "positive"});
  // The sweep an op is priced at: its sizes increasing.
  const std::string sweep = "bytes = [ 10000.0, 100000.0, 1000000.0, 10000000.0 ]";
  ASSERT_NE(good.find(sweep), std::string::npos) << good;
  expect_refused(replace(good, sweep, "bytes = [ 10000.0, 100000.0, 100000.0, 10000000.0 ]"),
                 {"cal.toml: tiers[0] ('node').all_gather.bytes[2] = 100000", "increasing"});
  expect_refused(replace(good, "bytes = [ 10000.0, 10000000.0 ]", "bytes = [ 10000.0, 1.0 ]"),
                 {"tiers[1] ('cluster').all_gather.under_compute.bytes[1] = 1: must be above the size before it (10000)"});
}

// A sweep that no line fits (a host link: small messages ride the socket buffers, larger
// ones wait on the shaper): an op is priced at the measured points, not at the fitted line.
TEST(Calibration, AnOpIsPricedAtTheMeasuredPointsWhereTheyLeaveTheLine) {
  // 3 sends a call; fast up to 100 KB, then 50 MB/s.
  const std::vector<double> bytes{1e4, 1e5, 3e5, 1e6, 3e6}, seconds{1e-3, 2e-3, 10e-3, 24e-3, 64e-3};
  const CollectiveCurve c = CollectiveCurve::fit(bytes, seconds, 3);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_NEAR(c.seconds_for(bytes[i], 3), seconds[i], 1e-12) << "at the measured size " << bytes[i];
    EXPECT_GT(std::abs(c.latency_s() + bytes[i] / (c.bus_GBps * 1e9) - seconds[i]), 1e-4)
        << "the line misses " << bytes[i] << ": the point, not the line, prices it";
  }
  EXPECT_NEAR(c.seconds_for(2e5, 3), 6e-3, 1e-12) << "halfway between two points";
  EXPECT_NEAR(c.seconds_for(5e6, 3), 64e-3 + 2e6 / (c.bus_GBps * 1e9), 1e-12) << "beyond: the fitted bandwidth";
  const double at_zero = std::min(c.latency_s(), 1e-3);
  EXPECT_NEAR(c.seconds_for(5e3, 3), at_zero + (1e-3 - at_zero) / 2, 1e-12) << "below: toward the fixed cost";
  EXPECT_NEAR(c.seconds_for(3e5, 6), 10e-3 + c.latency_s(), 1e-12) << "twice the steps: the fixed cost again";
  EXPECT_GE(c.seconds_for(1e4, 1), 0) << "fewer steps than measured: less, never negative";

  // Beside compute, at its own points: the factor is the ratio of the two sweeps' times.
  CollectiveCurve busy = c;
  busy.fit_under_compute(bytes, {40e-3, 40e-3, 45e-3, 60e-3, 100e-3});
  EXPECT_NEAR(busy.under_compute_factor(3e5, 3), 4.5, 1e-9);
  EXPECT_NEAR(busy.under_compute_factor(2e6, 3), (80e-3) / (44e-3), 1e-9);
  EXPECT_DOUBLE_EQ(busy.under_compute_factor(5e6, 3),
                   std::max(1.0, (100e-3 + 2e6 / (busy.busy_GBps * 1e9)) / c.seconds_for(5e6, 3)));

  // A file without points (published figures) is priced by the fitted curve.
  CollectiveCurve shipped = c;
  shipped.bytes.clear(), shipped.seconds.clear();
  EXPECT_NEAR(shipped.seconds_for(3e5, 3), c.latency_s() + 3e5 / (c.bus_GBps * 1e9), 1e-15);
}

// A shipped file may calibrate compute by a published run's fraction of peak alone
// (configs/calibration/): it round-trips, it is all [compute] says, and it is a fraction.
TEST(Calibration, APublishedEfficiencyStandsAloneInComputeAndRoundTrips) {
  const std::string text =
      "version = 1\ntopology = \"dgx-h100\"\ncommand = \"shipped\"\n[compute]\nefficiency = 0.4644\n"
      "[[tiers]]\nname = \"node\"\n[[tiers]]\nname = \"cluster\"\n";
  const Calibration c = Calibration::from_toml_string(text, "cal.toml");
  EXPECT_DOUBLE_EQ(c.compute_efficiency, 0.4644);
  EXPECT_FALSE(c.compute.has_value()) << "no measured curve: Adam and overlap stay the device's";
  EXPECT_DOUBLE_EQ(c.to_json()["compute"]["efficiency"].get<double>(), 0.4644);
  const Calibration again = Calibration::from_toml_string(c.to_toml(), "again.toml");
  EXPECT_DOUBLE_EQ(again.compute_efficiency, 0.4644);
  EXPECT_EQ(again.to_toml(), c.to_toml());
  expect_refused(replace(text, "efficiency = 0.4644", "efficiency = 1.5"),
                 {"cal.toml: compute.efficiency = 1.5", "at most 1"});
  expect_refused(replace(text, "efficiency = 0.4644", "efficiency = 0"),
                 {"cal.toml: compute.efficiency = 0", "positive"});
  expect_refused(replace(text, "efficiency = 0.4644", "efficiency = 0.5\npeak_gflops = 300"),
                 {"cal.toml: compute.efficiency", "stands alone"});
  expect_refused(replace(text, "efficiency = 0.4644", "eficiency = 0.5"),
                 {"cal.toml: compute.eficiency: unknown field", "efficiency"});
  // A measured calibration never carries one.
  EXPECT_EQ(h100_calibration(40).compute_efficiency, 0);
}

TEST(Calibration, ThePlanChangesWithTheCalibration) {
  const PlanContext datasheet = h100_plan(std::nullopt);
  const PlanContext fast = h100_plan(h100_calibration(40)), slow = h100_plan(h100_calibration(5));
  for (const char* name : {"zero3", "hsdp"}) {
    const Estimate d = priced(datasheet, name), f = priced(fast, name), s = priced(slow, name);
    EXPECT_EQ(d.bytes_on("cluster"), s.bytes_on("cluster")) << name;  // the bytes are the schedule's
    EXPECT_NE(d.step_time_s, f.step_time_s) << name;
    // 8x slower bytes, same latency (alone: what compute beside them adds is its own term)
    EXPECT_GT(s.tiers[1].busy_s - s.tiers[1].under_compute_s, 7 * (f.tiers[1].busy_s - f.tiers[1].under_compute_s))
        << name;
    EXPECT_GT(s.step_time_s, f.step_time_s) << name;
    EXPECT_GT(f.tiers[1].latency_s, 0) << name;
    EXPECT_EQ(f.to_json()["comm_time_per_step"]["cluster"]["latency_s"], f.tiers[1].latency_s);
  }
  // Compute follows the calibrated matmul curve: each unit's forward is
  // overhead x (FLOPs + matmuls x F½) / R, the backward twice that.
  const Calibration cal = h100_calibration(40);
  const ModelShape& m = fast.model();
  const std::vector<double> flops = m.forward_flops_per_token(4096);
  const std::vector<int> matmuls = m.forward_matmuls();
  double expected = 0;
  for (std::size_t u = 0; u < flops.size(); ++u)
    expected += 3 * cal.compute->kernel_overhead * cal.compute->matmul_seconds(flops[u] * 4096, matmuls[u]);
  EXPECT_NEAR(priced(fast, "zero3").compute_s, expected, 1e-12 * expected);
  // Adam at the calibrated rate.
  const Estimate d = priced(datasheet, "ddp"), f = priced(fast, "ddp");
  EXPECT_NEAR(f.optimizer_s / d.optimizer_s, 3350.0 / 2500.0, 1e-12);
  // Compute beside communication slows: the step grows by what the model says it lost.
  const Estimate plain = priced(fast, "zero3"), slowed = priced(h100_plan(h100_calibration(40, 1.5)), "zero3");
  EXPECT_EQ(plain.overlap_slowdown_s, 0);
  EXPECT_GT(slowed.overlap_slowdown_s, 0);
  EXPECT_NEAR(slowed.step_time_s,
              slowed.compute_s + slowed.overlap_slowdown_s + slowed.exposed_micro_s + slowed.step_comm_s +
                  slowed.optimizer_s,
              1e-9 * slowed.step_time_s);
  EXPECT_GT(slowed.step_time_s, plain.step_time_s);
  EXPECT_EQ(fast.assumptions()["calibration"]["compute"]["overlap_slowdown"], 1.0);
  // A tier's own factor replaces the compute's for its ops: every tier at 1 undoes compute's
  // 1.5; the node tier alone at 1.5 slows compute beside its ops only, less than every tier.
  Calibration per_tier = h100_calibration(40, 1.5);
  for (TierCalibration& t : per_tier.tiers) t.overlap_slowdown = 1;
  EXPECT_EQ(priced(h100_plan(per_tier), "zero3").overlap_slowdown_s, 0);
  per_tier.tiers[0].overlap_slowdown = 1.5;
  const Estimate node_only = priced(h100_plan(per_tier), "zero3");
  EXPECT_GT(node_only.overlap_slowdown_s, 0);
  EXPECT_LT(node_only.overlap_slowdown_s, slowed.overlap_slowdown_s);
  EXPECT_EQ(h100_plan(per_tier).assumptions()["calibration"]["tiers"][0]["overlap_slowdown"], 1.5);
}

// With the all-reduces its slowdown was timed beside, a tier slows compute by the bytes a
// second an op moves: s at the rate its busy all-reduce curve gives them, less below it, more
// above it (capped), and the plan follows.
TEST(Calibration, AnOpMovingFewerBytesASecondSlowsComputeLess) {
  Calibration c = h100_calibration(40, 1.5);
  EXPECT_DOUBLE_EQ(c.compute_slowdown("cluster", 1e6), 1.5) << "not recorded: the factor whatever the rate";
  c.tiers[1].overlap_all_reduce_bytes = 1e7;
  // The cluster's busy curve: (n / 0.5 + 3 x 64 KB) / 40 GB/s for n bytes a rank sends.
  const double R = 1e7 / ((1e7 / 0.5 + 3 * 64e3) / 40e9);
  EXPECT_NEAR(c.overlap_bytes_per_second("cluster"), R, 1e-9 * R);
  EXPECT_NEAR(c.compute_slowdown("cluster", R), 1.5, 1e-12);
  EXPECT_NEAR(c.compute_slowdown("cluster", R / 2), 1 / (1 - (1 - 1 / 1.5) / 2), 1e-12);
  EXPECT_DOUBLE_EQ(c.compute_slowdown("cluster", 0), 1);
  EXPECT_NEAR(c.compute_slowdown("cluster", 2 * R), 3, 1e-12);
  EXPECT_NEAR(c.compute_slowdown("cluster", 1e3 * R), 20, 1e-9) << "compute keeps at least 5% of its speed";
  const nlohmann::json shown = h100_plan(c).assumptions()["calibration"]["tiers"][1];
  EXPECT_EQ(shown["overlap_all_reduce_bytes"], 1e7);
  EXPECT_NEAR(shown["overlap_bytes_per_second"].get<double>(), R, 1e-9 * R);

  // Timed beside all-reduces far larger than a step's ops (so at a higher rate), the same s
  // costs compute less time; beside far smaller ones, more.
  for (TierCalibration& t : c.tiers) t.overlap_all_reduce_bytes = 0;
  const double flat = priced(h100_plan(c), "zero3").overlap_slowdown_s;
  for (TierCalibration& t : c.tiers) t.overlap_all_reduce_bytes = 1e12;
  const double beside_large = priced(h100_plan(c), "zero3").overlap_slowdown_s;
  for (TierCalibration& t : c.tiers) t.overlap_all_reduce_bytes = 1e3;
  const double beside_small = priced(h100_plan(c), "zero3").overlap_slowdown_s;
  EXPECT_GT(flat, 0);
  EXPECT_GT(beside_large, 0);
  EXPECT_LT(beside_large, flat);
  EXPECT_GT(beside_small, flat);
}

// Under a calibration, selective-op's rerun projections take the matmul curve (no kernel
// overhead: the rerun non-matmul ops are their own term, at the calibrated Adam rate); full
// recomputation reruns the calibrated forward, overhead included.
TEST(Calibration, RecomputationRerunsAtTheCalibratedRates) {
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(4));
  Workload w;
  w.seq = 4096;
  w.flash_attention = true;
  const Calibration cal = h100_calibration(40);
  auto plan = [&](Recompute r) {
    w.recompute = r;
    return PlanContext(ModelShape::preset("llama2-7b"), t, *device_for_topology("dgx-h100"), w, {}, cal);
  };
  const PlanContext none = plan(Recompute::None), selective = plan(Recompute::SelectiveOp), full = plan(Recompute::Full);
  const ModelShape& m = selective.model();
  const Rerun block = m.rerun_per_token(4096, Recompute::SelectiveOp, 2)[1];
  const Estimate s = priced(selective, "zero3");
  EXPECT_NEAR(s.recompute_matmul_s, 32 * cal.compute->matmul_seconds(block.matmul_flops * 4096, 3),
              1e-12 * s.recompute_matmul_s);
  EXPECT_NEAR(s.recompute_memory_bound_s, 32 * block.memory_bound_bytes * 4096 / 2500e9,
              1e-12 * s.recompute_memory_bound_s);
  EXPECT_NEAR(s.compute_s - priced(none, "zero3").compute_s, s.recompute_matmul_s + s.recompute_memory_bound_s,
              1e-9 * s.compute_s);
  const double block_forward = cal.compute->kernel_overhead *
                               cal.compute->matmul_seconds(m.forward_flops_per_token(4096)[1] * 4096, 7);
  EXPECT_NEAR(priced(full, "zero3").recompute_matmul_s, 32 * block_forward, 1e-12 * 32 * block_forward);
  EXPECT_NE(selective.recompute_means().find("the calibration's matmul curve"), std::string::npos);
}

TEST(Calibration, MustCoverEveryTierOfThePlan) {
  Calibration c = h100_calibration(40);
  c.tiers.pop_back();
  EXPECT_NE(error_of([&] { h100_plan(c); }).find("--calibration: tiers: no tier 'cluster' of topology 'dgx-h100'"),
            std::string::npos);
}

// A shipped calibration (configs/calibration/) knows what a public source states and no more:
// here the cluster tier's all-gather bus bandwidth alone, no compute.
TEST(Calibration, APartialCalibrationPricesWhatItKnowsAndLeavesTheRestToTheTopology) {
  const std::string text = R"(version = 1
topology = "dgx-h100"
command = "shipped"
[[tiers]]
name = "node"
[[tiers]]
name = "cluster"
[tiers.all_gather]
bus_GBps = 47
)";
  const Calibration cal = Calibration::from_toml_string(text, "cal.toml");
  EXPECT_FALSE(cal.compute);
  EXPECT_EQ(cal.world_size, 0);
  ASSERT_NE(cal.tier("cluster").find(Collective::AllGather), nullptr);
  EXPECT_FALSE(cal.tier("cluster").find(Collective::AllGather)->latency_known);
  EXPECT_EQ(cal.tier("cluster").find(Collective::ReduceScatter), nullptr);
  EXPECT_EQ(cal.tier("node").find(Collective::AllGather), nullptr);
  EXPECT_EQ(Calibration::from_toml_string(cal.to_toml(), "again.toml").to_toml(), cal.to_toml());

  // Hand-priced: a ring all-gather over the 4 nodes' across-group sends 3 chunks of 1 MB.
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(4));
  shard::ScheduledOp gather{{strata::Collective::AllGather}, shard::When::Forward, shard::Purpose::WeightGatherForward};
  gather.level = 1;
  gather.group_size = 4;
  gather.messages = 3;
  gather.bytes_sent = gather.bytes_received = 3'000'000;
  const OpPrice p = price_op(gather, t, &cal);
  EXPECT_DOUBLE_EQ(p.latency_s, 3 * 5e-6);           // the preset's 5 us a message: no half_bytes given
  EXPECT_DOUBLE_EQ(p.bandwidth_s, 3e6 / 47e9);       // at the calibrated bus bandwidth, not 50 x 0.8
  shard::ScheduledOp reduce = gather;                 // no reduce-scatter curve: the topology's α-β
  reduce.kind = strata::Collective::ReduceScatter;
  EXPECT_DOUBLE_EQ(price_op(reduce, t, &cal).seconds(), price_op(reduce, t, nullptr).seconds());
  gather.level = 0;                                   // nothing calibrated on the node tier
  EXPECT_DOUBLE_EQ(price_op(gather, t, &cal).seconds(), price_op(gather, t, nullptr).seconds());

  // Without [compute], compute and Adam are the device's; zero3's cluster gathers get faster.
  const PlanContext datasheet = h100_plan(std::nullopt), shipped = h100_plan(cal);
  const Estimate d = priced(datasheet, "zero3"), s = priced(shipped, "zero3");
  EXPECT_EQ(s.compute_s, d.compute_s);
  EXPECT_EQ(s.optimizer_s, d.optimizer_s);
  EXPECT_EQ(s.overlap_slowdown_s, 0);
  EXPECT_EQ(s.tiers[0].busy_s, d.tiers[0].busy_s);
  EXPECT_LT(s.tiers[1].busy_s, d.tiers[1].busy_s);
  EXPECT_EQ(s.tiers[1].latency_s, d.tiers[1].latency_s);
  EXPECT_LE(s.step_time_s, d.step_time_s);
  EXPECT_EQ(shipped.assumptions()["calibration"]["tiers"][1]["reduce_scatter"], "the topology's figures");

  expect_refused(replace(text, "bus_GBps = 47", "bus_GBps = 47\nmessages = 3"),
                 {"cal.toml: tiers[1] ('cluster').all_gather.half_bytes: missing"});
  expect_refused(replace(text, "[tiers.all_gather]\nbus_GBps = 47\n", ""), {"cal.toml: calibrates nothing"});
}

TEST(Calibration, TensorParallelAllReducesArePricedByTheirTiersAllReduceCurve) {
  // The schedule's TP ops are all-reduces: the node tier's all_reduce curve prices them, and a
  // slower one makes zero3+tp2's TP time grow by exactly the curve's difference.
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(4));
  Workload w;
  w.seq = 4096;
  const ModelShape model = ModelShape::preset("llama2-7b");
  Calibration slow = h100_calibration(25);
  auto& node_all_reduce = slow.tiers[0].curves[static_cast<int>(Collective::AllReduce)];
  node_all_reduce = exact_curve(30, 64e3, 7);  // a tenth of the node tier's other curves
  const ModelParallelPlan fast_plan(model, t, *device_for_topology("dgx-h100"), w, {2, 1, "", ""}, {},
                                    h100_calibration(25));
  const ModelParallelPlan slow_plan(model, t, *device_for_topology("dgx-h100"), w, {2, 1, "", ""}, {}, slow);
  const shard::ShardSpec spec =
      apply_precision(strategy_spec("zero3", fast_plan.data_parallel_topology()), Precision::BF16);
  const shard::Schedule schedule = fast_plan.stage(0).schedule(spec);
  double fast_s = 0, slow_s = 0;
  for (const shard::ScheduledOp& op : schedule.tensor_parallel_ops()) {
    if (op.kind != strata::Collective::AllReduce) continue;
    const Calibration fast = h100_calibration(25);
    fast_s += price_op(op, fast_plan.data_parallel_topology(), &fast).seconds();
    slow_s += price_op(op, fast_plan.data_parallel_topology(), &slow).seconds();
  }
  ASSERT_GT(slow_s, fast_s);
  const Estimate a = fast_plan.estimate("zero3", spec), b = slow_plan.estimate("zero3", spec);
  EXPECT_NEAR(b.tp_allreduce_s - a.tp_allreduce_s, slow_s - fast_s, 1e-12);
  EXPECT_NEAR(b.step_time_s - a.step_time_s, slow_s - fast_s, 1e-12);
}

// What calibrate measures on cores that compute and communicate at once: block quantization
// of an int8/int4 wire at the codec rate, and a collective beside compute at its busy curve.
TEST(Calibration, WireCodingAndCommunicationBesideComputeArePricedFromTheirMeasurements) {
  const Calibration cal = h100_calibration(40);
  topo::Topology t = topo::Topology::preset("dgx-h100");
  t.resolve(t.world_size_for_nodes(4));
  // An int8 ring gather of 1M elements a rank over the 4 nodes: it brings 3M elements in
  // (4 bytes each through the codec at 50 GB/s); an int4 all-to-all reduction of 4M elements
  // encodes them and decodes 4 chunks of 1M.
  shard::ScheduledOp gather{{strata::Collective::AllGather}, shard::When::Forward, shard::Purpose::WeightGatherForward};
  gather.level = 1, gather.group_size = 4, gather.messages = 3;
  gather.wire = DType::I8;
  gather.elements_in = 1'000'000, gather.elements_out = 4'000'000;
  gather.bytes_sent = gather.bytes_received = 3'000'000;
  EXPECT_DOUBLE_EQ(codec_elements(gather), 3e6);
  EXPECT_DOUBLE_EQ(price_op(gather, t, &cal).codec_s, 4 * 3e6 / 50e9);
  shard::ScheduledOp reduce = gather;
  reduce.kind = strata::Collective::AllToAll;
  reduce.wire = DType::I4;
  reduce.elements_in = 4'000'000, reduce.elements_out = 1'000'000;
  EXPECT_DOUBLE_EQ(codec_elements(reduce), 8e6);
  EXPECT_DOUBLE_EQ(price_op(reduce, t, &cal).codec_s, 4 * 8e6 / 40e9);
  gather.wire = DType::F32;  // nothing to code
  EXPECT_EQ(price_op(gather, t, &cal).codec_s, 0);
  EXPECT_EQ(price_op(gather, t, nullptr).codec_s, 0);

  // The busy curve: 3M bytes at half the bus bandwidth and three times the fixed cost,
  // against the curve alone; the node tier was not measured busy.
  const CollectiveCurve& curve = cal.tier("cluster").curve(Collective::AllGather);
  const double alone = curve.seconds_for(3e6, 3), busy = (3e6 / 0.5 + 3 * 64e3) / 40e9;
  EXPECT_NEAR(price_op(gather, t, &cal).under_compute, busy / alone, 1e-9);
  gather.level = 0;
  EXPECT_EQ(price_op(gather, t, &cal).under_compute, 1.0);

  // In the plan: zeropp's quantized wires pay coding, zero3's fp32 ones none; cross-node ops
  // that overlap compute take longer, so the step does, and --json shows both terms.
  const PlanContext with = h100_plan(cal);
  Calibration no_busy = cal;
  for (auto& curve : no_busy.tiers[1].curves) curve->busy_GBps = 0;
  const PlanContext without = h100_plan(no_busy);
  const Estimate zeropp = priced(with, "zeropp"), zero3 = priced(with, "zero3"), zero3_alone = priced(without, "zero3");
  EXPECT_GT(zeropp.tiers[1].codec_s, 0);
  EXPECT_EQ(zero3.tiers[1].codec_s, 0);
  EXPECT_GT(zero3.tiers[1].under_compute_s, 0);
  EXPECT_EQ(zero3_alone.tiers[1].under_compute_s, 0);
  EXPECT_EQ(zero3.tiers[0].under_compute_s, 0);
  EXPECT_GT(zero3.tiers[1].busy_s, zero3_alone.tiers[1].busy_s);
  EXPECT_GE(zero3.step_time_s, zero3_alone.step_time_s);
  const nlohmann::json j = zeropp.to_json()["comm_time_per_step"]["cluster"];
  EXPECT_EQ(j["codec_s"], zeropp.tiers[1].codec_s);
  EXPECT_EQ(j["under_compute_s"], zeropp.tiers[1].under_compute_s);
}

// Issue 40 item 4: a tier's achieved bus bandwidth by the size of the ring crossing it (here by
// nodes: 40 GB/s a rank over 4 nodes, 10 over 16). Hand-priced hierarchical all-gathers over the
// across-node group: at a point the point's rate, between two log-linear in size (8 nodes is
// half-way in log size from 4 to 16: 25 GB/s), outside the nearest point's, with the warning.
TEST(Calibration, ARingIsPricedOnTheCurveOfItsOwnGroupSize) {
  const std::string text = read_file_text(strata::test::source_path("tests/plan/group_size_curve.toml"));
  const Calibration cal = Calibration::from_toml_string(text, "cal.toml");
  EXPECT_EQ(Calibration::from_toml_string(cal.to_toml(), "again.toml").to_toml(), cal.to_toml());
  auto gather_seconds = [&](int nodes) {
    topo::Topology t = topo::Topology::preset("dgx-h100");
    t.resolve(t.world_size_for_nodes(nodes));
    shard::ScheduledOp gather{{strata::Collective::AllGather}, shard::When::Forward, shard::Purpose::WeightGatherForward};
    gather.level = 1;
    gather.group_size = nodes;
    gather.messages = nodes - 1;
    gather.bytes_sent = gather.bytes_received = 1'000'000;
    const OpPrice p = price_op(gather, t, &cal);
    EXPECT_DOUBLE_EQ(p.latency_s, (nodes - 1) * 5e-6) << nodes;  // latency stays the tier's
    return p.bandwidth_s;
  };
  EXPECT_DOUBLE_EQ(gather_seconds(4), 1e6 / 40e9);
  EXPECT_DOUBLE_EQ(gather_seconds(16), 1e6 / 10e9);
  EXPECT_NEAR(gather_seconds(8), 1e6 / 25e9, 1e-15);
  EXPECT_DOUBLE_EQ(gather_seconds(2), 1e6 / 40e9);   // below the sizes: 4's rate
  EXPECT_DOUBLE_EQ(gather_seconds(32), 1e6 / 10e9);  // above: 16's

  topo::Topology big = topo::Topology::preset("dgx-h100");
  big.resolve(big.world_size_for_nodes(32));
  const std::vector<std::string> notes = group_size_notes(&cal, big);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("tier cluster: bus bandwidth a rank by nodes in the ring, 4 40 GB/s, 16 10 GB/s"),
            std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("warning: rings of up to 32 nodes reach outside the measured sizes"), std::string::npos)
      << notes[0];
  topo::Topology small = topo::Topology::preset("dgx-h100");
  small.resolve(small.world_size_for_nodes(16));
  EXPECT_EQ(group_size_notes(&cal, small)[0].find("warning"), std::string::npos);
  EXPECT_NE(group_size_notes(nullptr, small)[0].find("tier cluster: no curve of achieved bandwidth by group size "
                                                     "(no --calibration)"),
            std::string::npos);
  const Calibration per_collective = h100_calibration(40);
  EXPECT_NE(group_size_notes(&per_collective, small)[0].find("(the calibration has none)"), std::string::npos);

  const std::string curve = "sizes = [4, 16]\nbus_GBps = [40, 10]";
  expect_refused(replace(text, curve, "sizes = [4, 4]\nbus_GBps = [40, 10]"),
                 {"cal.toml: tiers[1] ('cluster').bus_by_group_size.sizes[1] = 4: must be above the size before it"});
  expect_refused(replace(text, curve, "sizes = [4, 16]\nbus_GBps = [40, -10]"),
                 {"tiers[1] ('cluster').bus_by_group_size.bus_GBps[1]: must be a positive number"});
  expect_refused(replace(text, curve, "sizes = [4, 16]"), {"tiers[1] ('cluster').bus_by_group_size.bus_GBps: missing"});
  expect_refused(replace(text, "key = \"nodes\"\n", ""), {"tiers[1] ('cluster').bus_by_group_size.key: missing"});
  expect_refused(replace(text, "key = \"nodes\"", "key = \"gpus\""),
                 {"bus_by_group_size.key = 'gpus': must be nodes or ranks"});
  expect_refused(replace(text, curve, "sizes = [4, 16, 64]\nbus_GBps = [40, 10]"),
                 {"bus_by_group_size: sizes and bus_GBps must list the same number of points, at least 2 (3 and 2)"});
  expect_refused(replace(text, "[tiers.bus_by_group_size]", "[tiers.all_gather]\nbus_GBps = 47\n[tiers.bus_by_group_size]"),
                 {"tiers[1] ('cluster').bus_by_group_size: the tier's all_gather curve gives its rate too"});
}
