// strata calibrate --from-nccl-tests: logs in nccl-tests' own format (src/util.cu's header,
// Rank lines and table rows, its getFloatStr widths), written here from published bus
// bandwidths, read into a calibration's curves whose bus bandwidths are the log's.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "plan/nccl_tests.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using strata::test::error_of;

namespace {

// nccl-tests' getFloatStr: as many decimals as the width leaves.
std::string float_str(double value, int width) {
  int power = 0;
  for (std::uint64_t v = 1; value >= static_cast<double>(v); v *= 10) power++;
  if (power < width - 2) return fmt::format("{:>{}.2f}", value, width);
  if (power < width - 1) return fmt::format("{:>{}.1f}", value, width);
  return fmt::format("{:>{}.0f}", value, width);
}

struct LogSpec {
  std::string test = "all_gather_perf";  // empty: an older log without the "Collective test starting" line
  int hosts = 1, ranks_per_host = 8;
  double bus_GBps = 240;  // the large-message bus bandwidth the log reaches
  double latency_us = 20;
  std::vector<double> sizes{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30};
  bool nccl_info = false;  // NCCL_DEBUG=INFO lines interleaved
  int header_ranks = 0;    // Rank lines written (0: all)
};

double bus_factor(const std::string& test, int n) {
  const double ring = static_cast<double>(n - 1) / n;
  return test == "all_reduce_perf" ? 2 * ring : ring;
}

// A log as nccl-tests prints it: the time of each size from the published bus bandwidth and a
// fixed cost, in-place 1% faster, bandwidths recomputed from the printed time as nccl-tests does.
std::string nccl_log(const LogSpec& s, const std::string& test_for_factor) {
  const int n = s.hosts * s.ranks_per_host;
  std::string out = "# nccl-tests version 2.14.1 nccl-headers=22104 nccl-library=22104\n";
  if (!s.test.empty()) out += fmt::format("# Collective test starting: {}\n", s.test);
  out += fmt::format("# nThread 1 nGpus 1 minBytes {} maxBytes {} step: 4(factor) warmup iters: 5 iters: 20 agg "
                     "iters: 1 validation: 1 graph: 0\n#\n# Using devices\n",
                     s.sizes.front(), s.sizes.back());
  for (int r = 0; r < (s.header_ranks ? s.header_ranks : n); ++r)
    out += fmt::format("#  Rank {:>2} Group  0 Pid {:>6} on {:>10} device {:>2} [{:04x}:{:02x}:00] NVIDIA H100 80GB HBM3\n",
                       r, 4000 + r, fmt::format("node-{:02}", r / s.ranks_per_host), r % s.ranks_per_host, 0,
                       0x18 + r % s.ranks_per_host);
  const bool reduces = test_for_factor == "all_reduce_perf" || test_for_factor == "reduce_scatter_perf";
  out += fmt::format("#\n# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place "
                     "         \n",
                     "", "", "", "", "");
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
                     "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                     "busbw", "#wrong");
  out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
                     "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  const double f = bus_factor(test_for_factor, n);
  for (double size : s.sizes) {
    out += fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", static_cast<long>(size), static_cast<long>(size / 4),
                       "float", reduces ? "sum" : "none", -1);
    for (double scale : {1.0, 0.99}) {
      const double us = std::round((s.latency_us + size * f / (s.bus_GBps * 1e3)) * scale * 100) / 100;
      const double algbw = size / us / 1e3;
      out += fmt::format("  {}  {}  {}  {:>6}", float_str(us, 7), float_str(algbw, 6), float_str(algbw * f, 6), 0);
    }
    out += "\n";
    if (s.nccl_info) out += "node-00:4000:4000 [0] NCCL INFO comm 0x5581 rank 0 nranks 16 - Init COMPLETE\n";
  }
  out += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 123.4 \n#\n";
  if (!s.test.empty()) out += fmt::format("# Collective test concluded: {}\n", s.test);
  return out;
}

class NcclTests : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const LogSpec& s, const std::string& test_for_factor = "") {
    const auto path = dir_ / name;
    test::write_bytes(path, nccl_log(s, test_for_factor.empty() ? s.test : test_for_factor));
    return path.string();
  }
  test::ScratchDir dir_;
};

}  // namespace

TEST_F(NcclTests, OneHostIsTheNodeTiersCurveAndSeveralTheClusterTiersWithTheLogsBusBandwidths) {
  // DGX A100 in a node: all-gather bus bandwidth 240 GB/s (configs/calibration/dgx-a100.toml's
  // published figure); DGX H100 across 2 nodes: ring all-reduce at 8 x 47 GB/s (46-48 GB/s a
  // NIC, nccl-tests issue 290), an older log named after its test, NCCL INFO lines in it.
  const NcclTestsLog node = read_nccl_tests_log(write("ag.log", {}));
  LogSpec across;
  across.test = "";
  across.hosts = 2;
  across.bus_GBps = 8 * 47;
  across.nccl_info = true;
  const NcclTestsLog cluster = read_nccl_tests_log(write("all_reduce_perf.log", across, "all_reduce_perf"));
  EXPECT_EQ(node.collective, Collective::AllGather);
  EXPECT_EQ(node.ranks, 8);
  EXPECT_EQ(node.hosts, 1);
  EXPECT_EQ(node.device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(cluster.collective, Collective::AllReduce);
  EXPECT_EQ(cluster.ranks, 16);
  EXPECT_EQ(cluster.hosts, 2);
  ASSERT_EQ(cluster.rows.size(), 6u);

  const Calibration cal = calibration_from_nccl_tests({node, cluster}, {"node", "cluster"}, "dgx", "test");
  const TierCalibration& n = cal.tier("node");
  const TierCalibration& c = cal.tier("cluster");
  EXPECT_EQ(n.group_size, 8);
  EXPECT_EQ(c.group_size, 2);
  EXPECT_EQ(c.ranks_sharing, 8);
  EXPECT_FALSE(n.find(Collective::AllReduce));
  EXPECT_FALSE(c.find(Collective::AllGather));
  // Each measured point's bus bandwidth is the log's (a rank's share of the hosts' NICs across
  // hosts), within the log's printed digits; each op at a logged size costs the logged time.
  for (const auto& [log, tier, share] : {std::tuple{&node, &n, 1.0}, std::tuple{&cluster, &c, 8.0}}) {
    const CollectiveCurve& curve = tier->curve(log->collective);
    ASSERT_EQ(curve.bytes.size(), log->rows.size());
    for (std::size_t i = 0; i < curve.bytes.size(); ++i) {
      EXPECT_NEAR(curve.bytes[i] / curve.seconds[i] / 1e9, log->rows[i].bus_GBps / share,
                  0.01 + 0.005 * log->rows[i].bus_GBps / share);
      EXPECT_DOUBLE_EQ(curve.seconds_for(curve.bytes[i], curve.messages), curve.seconds[i]);
    }
    // The fitted bandwidth is the log's large-message one.
    EXPECT_NEAR(curve.bus_GBps, log == &node ? 240.0 : 47.0, 0.01 * curve.bus_GBps);
  }
  EXPECT_EQ(c.curve(Collective::AllReduce).messages, 2 * 15);
  EXPECT_EQ(n.curve(Collective::AllGather).messages, 7);

  // Round trip through the calibration file: the same curves.
  const Calibration back = Calibration::from_toml_string(cal.to_toml(), "cal.toml");
  for (const char* tier : {"node", "cluster"})
    for (Collective k : kCollectives) {
      const CollectiveCurve* a = cal.tier(tier).find(k);
      const CollectiveCurve* b = back.tier(tier).find(k);
      ASSERT_EQ(a == nullptr, b == nullptr);
      if (!a) continue;
      EXPECT_DOUBLE_EQ(a->bus_GBps, b->bus_GBps);
      EXPECT_DOUBLE_EQ(a->half_bytes, b->half_bytes);
      EXPECT_EQ(a->messages, b->messages);
      EXPECT_EQ(a->bytes, b->bytes);
      EXPECT_EQ(a->seconds, b->seconds);
    }
  EXPECT_EQ(back.tier("cluster").ranks_sharing, 8);
}

TEST_F(NcclTests, BadLogsAreRefusedNamingTheFileAndLineOrWhatIsMissing) {
  const std::string good = nccl_log({}, "all_gather_perf");
  auto refused = [&](const std::string& name, const std::string& text) {
    test::write_bytes(dir_ / name, text);
    return error_of([&] { read_nccl_tests_log(dir_ / name); });
  };
  // A row cut short: the file and its line.
  std::string cut = good;
  const std::size_t row = cut.find("     1048576");
  cut.replace(cut.find('\n', row) - 20, 20, "");
  const int line = static_cast<int>(std::count(good.begin(), good.begin() + static_cast<long>(row), '\n')) + 1;
  std::string e = refused("cut.log", cut);
  EXPECT_NE(e.find(fmt::format("cut.log:{}:", line)), std::string::npos) << e;
  EXPECT_NE(e.find("columns where the table's header has 13"), std::string::npos) << e;

  std::string garbled = good;
  garbled.replace(row + 5, 7, "1O48576");
  e = refused("garbled.log", garbled);
  EXPECT_NE(e.find(fmt::format("garbled.log:{}: size '1O48576' is not a number", line)), std::string::npos) << e;

  LogSpec bcast;
  bcast.test = "broadcast_perf";
  e = error_of([&] { read_nccl_tests_log(write("b.log", bcast, "all_gather_perf")); });
  EXPECT_NE(e.find("a log of broadcast_perf"), std::string::npos) << e;

  LogSpec one;
  one.sizes = {1 << 20};
  e = error_of([&] { read_nccl_tests_log(write("one.log", one)); });
  EXPECT_NE(e.find("a curve needs at least 2 sizes"), std::string::npos) << e;

  LogSpec unnamed;
  unnamed.test = "";
  e = error_of([&] { read_nccl_tests_log(write("run3.log", unnamed, "all_gather_perf")); });
  EXPECT_NE(e.find("which collective?"), std::string::npos) << e;

  // A header listing 4 of the 8 ranks the table's bandwidths were measured over.
  LogSpec half;
  half.header_ranks = 4;
  e = error_of([&] { read_nccl_tests_log(write("half.log", half)); });
  EXPECT_NE(e.find("over 4 ranks (the header's Rank lines)"), std::string::npos) << e;

  std::string wrong = good;
  const std::size_t last = wrong.rfind("      0\n");
  wrong.replace(last, 8, "      3\n");
  EXPECT_NE(refused("wrong.log", wrong).find("counted 3 wrong elements"), std::string::npos);

  // Two logs of one collective on one tier.
  const NcclTestsLog a = read_nccl_tests_log(write("a.log", {}));
  e = error_of([&] { calibration_from_nccl_tests({a, a}, {"node", "cluster"}, "t", "c"); });
  EXPECT_NE(e.find("a second all_gather log on tier 'node'"), std::string::npos) << e;
}
