// Drives `strata bench collectives` under mpirun -np 8 as a user would and checks its JSON:
// every collective timed three ways, the per-tier traffic of one call against the ring and
// hierarchical closed forms, and emulated times never below the alpha-beta prediction.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct Result {
  int rc = -1;
  std::string out;
};

Result run(const std::string& command) {
  Result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string bench(const std::string& args) {
  const char* root = std::getenv("STRATA_SOURCE_DIR");
  std::string file = (std::filesystem::path(root ? root : ".") / "configs/topology/2node-2gpu-2die.toml").string();
  return std::string(STRATA_MPIEXEC_LINE) + " -np 8 " + STRATA_EXE + " bench collectives --topology " + file +
         " --iterations 1 --warmup 0 " + args;
}

nlohmann::json parse(const Result& r) {
  EXPECT_EQ(r.rc, 0) << r.out;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.out;
    return {};
  }
}

const nlohmann::json& result(const nlohmann::json& doc, const std::string& kind) {
  for (const auto& r : doc["results"])
    if (r["collective"] == kind) return r;
  static const nlohmann::json none;
  ADD_FAILURE() << "no result for " << kind;
  return none;
}

TEST(BenchCollectivesCli, TimesEveryCollectiveAndCountsTrafficPerTier) {
  nlohmann::json doc = parse(run(bench("--sizes-mib 0.25 --json")));
  ASSERT_EQ(doc["world_size"], 8);
  EXPECT_EQ(doc["emulated"], false);
  ASSERT_EQ(doc["results"].size(), 4u);
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["bytes"], 262144);
    for (const char* impl : {"ring", "hier", "mpi"}) {
      EXPECT_GT(r[impl]["seconds"].get<double>(), 0) << r["collective"] << " " << impl;
      EXPECT_GT(r[impl]["algbw_GBps"].get<double>(), 0);
    }
    EXPECT_FALSE(r["mpi"].contains("per_rank_traffic"));  // Open MPI's messages are not strata's
  }
  // One all-gather of S = 256 KiB, bytes sent per rank averaged over the 8 ranks.
  // Ring 0..7: each rank sends 7 chunks of S/8 to its right neighbour; 4 of those hops stay
  // on a GPU (0-1, 2-3, 4-5, 6-7), 2 cross GPUs of a node (1-2, 5-6), 2 cross nodes (3-4, 7-0).
  const std::uint64_t S = 262144, chunk = S / 8;
  const auto& ag = result(doc, "all_gather");
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["gpu"]["bytes_sent"], 4 * 7 * chunk / 8);
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["node"]["bytes_sent"], 2 * 7 * chunk / 8);
  EXPECT_EQ(ag["ring"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * 7 * chunk / 8);
  // Hierarchical: every rank sends S/2 inside its GPU, S/4 across GPUs, S/8 across nodes.
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["gpu"]["bytes_sent"], S / 2);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["node"]["bytes_sent"], S / 4);
  EXPECT_EQ(ag["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], S / 8);
  const auto& ar = result(doc, "all_reduce");
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["bytes_sent"], 2 * S / 8);
  EXPECT_EQ(ar["hier"]["per_rank_traffic"]["cluster"]["messages"], 2);
}

TEST(BenchCollectivesCli, EmulatedTimesAreNeverBelowTheAlphaBetaPrediction) {
  // Scale 200: the cluster tier runs at 125 MB/s, so emulated link time dominates.
  nlohmann::json doc = parse(run(bench("--sizes-mib 0.5 --emulate-links --emulate-scale 200 --json")));
  EXPECT_EQ(doc["emulated"], true);
  EXPECT_EQ(doc["emulate_scale"], 200.0);
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"})
    for (const char* impl : {"ring", "hier"}) {
      const auto& r = result(doc, kind)[impl];
      EXPECT_GT(r["predicted_seconds"].get<double>(), 0) << kind << " " << impl;
      EXPECT_GE(r["seconds"].get<double>(), r["predicted_seconds"].get<double>()) << kind << " " << impl;
    }
  // The hierarchy sends 1/8 of the buffer over the slow cluster tier, the flat ring 7/8.
  const auto& ag = result(doc, "all_gather");
  EXPECT_LT(ag["hier"]["predicted_seconds"].get<double>(), ag["ring"]["predicted_seconds"].get<double>());
}

TEST(BenchCollectivesCli, TextSaysWhetherLinksAreEmulatedAndBadOptionsAreRefused) {
  Result text = run(bench("--sizes-mib 0.0625 --emulate-links --emulate-scale 2"));
  EXPECT_EQ(text.rc, 0) << text.out;
  EXPECT_NE(text.out.find("link emulation ON (scale 2)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("all_to_all"), std::string::npos) << text.out;

  Result int8 = run(bench("--sizes-mib 1 --dtype int8"));
  EXPECT_NE(int8.rc, 0);
  EXPECT_NE(int8.out.find("--dtype int8"), std::string::npos) << int8.out;
  Result scale_alone = run(bench("--sizes-mib 1 --emulate-scale 2"));
  EXPECT_NE(scale_alone.rc, 0);
  EXPECT_NE(scale_alone.out.find("--emulate-links"), std::string::npos) << scale_alone.out;
}

}  // namespace
