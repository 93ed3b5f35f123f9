// The flight recorder (comm/flight.hpp): the ring's bound, the dump's format, dumps read back
// (missing and damaged ones named), and the desync report a timed-out rank prints.
#include <gtest/gtest.h>

#include <fstream>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "comm/runtime/flight.hpp"
#include "comm/runtime/wait.hpp"
#include "support.hpp"

namespace strata::comm {
namespace {

topo::Topology two_by_two() {
  topo::Topology t = topo::Topology::from_toml_string(
      "[[tiers]]\nname = \"node\"\nsize = 2\nbandwidth_GBps = 10\nlatency_us = 1\n"
      "[[tiers]]\nname = \"cluster\"\nbandwidth_GBps = 1\nlatency_us = 5\n");
  t.resolve(4);
  return t;
}
const std::vector<std::string> kHosts = {"h0", "h0", "h1", "h1"};

FlightOp gather(int unit, std::string_view group) {
  return {7, "all-gather", "W gather (forward)", 1, group, 4096, unit, 0, 3};
}

// A recorder of rank `rank` that issued `issued` ops, finished the first `done` of them and
// started the next.
std::unique_ptr<FlightRecorder> rank_at(int rank, const std::filesystem::path& dir, int issued, int done) {
  auto f = std::make_unique<FlightRecorder>();
  f->configure(64, dir);
  f->set_places(rank, kHosts, two_by_two());
  for (int i = 1; i <= issued; ++i) {
    const std::uint64_t seq = f->issue(gather(i, rank < 2 ? "across-cluster#0.0" : "across-cluster#0.1"));
    if (i <= done + 1) f->start(seq);
    if (i <= done) f->end(seq);
  }
  return f;
}

TEST(FlightRecorder, KeepsTheLastOpsUpToItsCapacityWithTheirStates) {
  FlightRecorder f;
  f.configure(4, "");
  f.set_places(0, kHosts, two_by_two());
  for (int i = 1; i <= 10; ++i) {
    const std::uint64_t seq = f.issue(gather(i, "node#0"));
    EXPECT_EQ(seq, static_cast<std::uint64_t>(i));
    if (i <= 9) f.start(seq);
    if (i <= 8) f.end(seq);
  }
  f.end(3);  // a record the ring reused since: left alone
  EXPECT_EQ(f.issued(), 10u);
  const nlohmann::json ops = f.records();
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0]["seq"], 7);
  EXPECT_EQ(ops[0]["unit"], 7);
  EXPECT_EQ(ops[3]["seq"], 10);
  EXPECT_EQ(ops[1]["state"], "done");
  EXPECT_EQ(ops[2]["state"], "running");
  EXPECT_EQ(ops[3]["state"], "issued");
  EXPECT_EQ(ops[3]["start_ns"], 0);
  EXPECT_GE(ops[1]["end_ns"].get<std::int64_t>(), ops[1]["start_ns"].get<std::int64_t>());
  EXPECT_GE(ops[1]["start_ns"].get<std::int64_t>(), ops[1]["issue_ns"].get<std::int64_t>());
  EXPECT_EQ(ops[0]["tier"], "cluster");
  EXPECT_EQ(ops[0]["group"], "node#0");
  EXPECT_EQ(ops[0]["kind"], "all-gather");
  EXPECT_EQ(ops[0]["what"], "W gather (forward)");
  EXPECT_EQ(ops[0]["bytes"], 4096);
  EXPECT_EQ(ops[0]["op"], 7);
  EXPECT_EQ(ops[0]["step"], 3);
  EXPECT_EQ(ops[0]["micro_batch"], 0);
  EXPECT_TRUE(f.dump("signal").empty());  // no folder: nothing written

  FlightRecorder off;
  off.configure(0, "/nonexistent");
  EXPECT_EQ(off.issue(gather(0, "g")), 0u);
  EXPECT_TRUE(off.records().empty());
  EXPECT_TRUE(off.dump("exit").empty());
  EXPECT_THROW(off.configure(-1, ""), Error);
  EXPECT_THROW(parse_flight_dump("sometimes"), Error);
}

TEST(FlightRecorder, DumpsItsRankAsJsonAndAMissingDumpIsNamed) {
  test::ScratchDir dir;
  auto f = rank_at(0, dir.path(), 5, 4);
  f->add_step_time(0.25, 0.5);
  const std::filesystem::path path = f->dump("signal", "SIGUSR2");
  EXPECT_EQ(path, dir / "rank_0.json");
  const nlohmann::json j = nlohmann::json::parse(read_file_text(path));
  EXPECT_EQ(j["format"], "strata-flight/1");
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["host"], "h0");
  EXPECT_EQ(j["hosts"], nlohmann::json(kHosts));
  EXPECT_EQ(j["reason"], "signal");
  EXPECT_EQ(j["message"], "SIGUSR2");
  EXPECT_EQ(j["capacity"], 64);
  EXPECT_EQ(j["issued"], 5);
  EXPECT_EQ(j["timed_steps"], 1);
  EXPECT_EQ(j["compute_s"], 0.25);
  EXPECT_EQ(j["exposed_comm_s"], 0.5);
  EXPECT_EQ(j["ops"].size(), 5u);
  EXPECT_FALSE(j.contains("timeout"));

  const FlightDumps d = read_flight_dumps(dir.path());
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.readable(), 1);
  EXPECT_EQ(d.hosts, kHosts);
  EXPECT_TRUE(d.problems[0].empty());
  EXPECT_EQ(d.problems[3], (dir / "rank_3.json").string() + ": missing");
}

TEST(FlightRecorder, ADamagedDumpIsSetAsideByNameAndAFolderWithoutDumpsRefused) {
  test::ScratchDir dir;
  EXPECT_THROW(read_flight_dumps(dir / "absent"), Error);
  try {
    read_flight_dumps(dir.path());
    ADD_FAILURE() << "an empty folder accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no flight dump (rank_N.json)"), std::string::npos) << e.what();
  }
  rank_at(0, dir.path(), 3, 3)->dump("exit");
  test::write_bytes(dir / "rank_1.json", "{\"format\": \"strata-fl");  // cut short
  nlohmann::json bad = nlohmann::json::parse(read_file_text(dir / "rank_0.json"));
  bad["rank"] = 2;
  bad["ops"][1]["seq"] = "two";
  test::write_bytes(dir / "rank_2.json", bad.dump());
  const FlightDumps d = read_flight_dumps(dir.path());
  EXPECT_EQ(d.readable(), 1);
  EXPECT_NE(d.problems[1].find((dir / "rank_1.json").string() + ": not a flight dump"), std::string::npos)
      << d.problems[1];
  EXPECT_EQ(d.problems[2], (dir / "rank_2.json").string() + ": field 'ops[1].seq' missing or not an integer");
  bad["ops"][1]["seq"] = 2;
  bad["rank"] = 0;
  test::write_bytes(dir / "rank_2.json", bad.dump());
  EXPECT_EQ(read_flight_dumps(dir.path()).problems[2],
            (dir / "rank_2.json").string() + ": field 'rank' is 0, the file's name says 2");
}

TEST(FlightRecorder, TheFirstTimedOutRankReportsWhoReachedWhichOpAndWhoLeftNoDump) {
  test::ScratchDir dir;
  // Ranks 0 and 1 wait in op 12; rank 3 never issued it (it is at op 10); rank 2 stalls.
  auto r1 = rank_at(1, dir.path(), 12, 11);
  auto r3 = rank_at(3, dir.path(), 10, 9);
  r1->dump("timeout");
  r3->dump("timeout");
  auto r0 = rank_at(0, dir.path(), 12, 11);
  const TimedOutWait w{0, "shard:weight_gather", "across-cluster#0.0", {"rank 2 (receive, tier cluster, host h1)"},
                       0.02, 0.02, {2}};
  EXPECT_TRUE(r0->on_timeout(w));
  EXPECT_FALSE(r1->on_timeout(w));  // the report is claimed: one rank speaks
  const std::string op12 = "op 12 (W gather (forward), unit 12, micro-batch 0, cluster tier, group across-cluster#0.0)";
  const std::string expected =
      "strata: desync report (flight recorder dumps in " + dir.path().string() + "):\n" +
      "  rank 2 (host h1) left no dump: it died or stalls (" + (dir / "rank_2.json").string() +
      ": missing); rank 0 (host h0) waited for it\n" +
      "  ranks 0-1 (host h0) timed out in " + op12 + "\n" +
      "  rank 3 (host h1) never issued " + op12 +
      "; it is at op 10 (W gather (forward), unit 10, micro-batch 0, cluster tier, group across-cluster#0.1)\n";
  EXPECT_EQ(read_file_text(dir / "desync.txt"), expected);
  const nlohmann::json r = nlohmann::json::parse(read_file_text(dir / "rank_0.json"));
  EXPECT_EQ(r["reason"], "timeout");
  EXPECT_EQ(r["timeout"]["waiting_for_ranks"], nlohmann::json({2}));
  EXPECT_EQ(r["ops"].back()["state"], "timed out");

  set_aside_flight_dumps(dir.path());  // a new run into the folder keeps these as .previous
  std::filesystem::path previous = dir.path();
  previous += ".previous";
  EXPECT_FALSE(std::filesystem::exists(dir.path()));
  EXPECT_TRUE(std::filesystem::exists(previous / "desync.txt"));
  std::filesystem::remove_all(previous);
}

}  // namespace
}  // namespace strata::comm
