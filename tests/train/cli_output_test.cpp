// What the commands show a user about runs: `strata compare` rows by run folder, progress
// against the schedule under --stop-after, counts in the right number.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/fileio.hpp"
#include "util.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

nlohmann::json tier(const char* name) { return {{"name", name}}; }

// A sharded run's summary.json, as the trainer writes it (the fields compare reads).
nlohmann::json sharded_summary(const std::string& strategy, const std::string& topology,
                               const std::vector<const char*>& tiers, double loss, double val_loss,
                               double bytes_inner) {
  nlohmann::json per_step = nlohmann::json::object(), tier_list = nlohmann::json::array();
  double b = bytes_inner;
  for (const char* t : tiers) {
    per_step[t] = {{"bytes_sent", b}, {"bytes_received", b}, {"messages", 4}};
    tier_list.push_back(tier(t));
    b /= 10;
  }
  return {{"strategy", strategy},
          {"model", {{"preset", "tiny"}, {"config", {{"n_layer", 4}, {"n_embd", 128}}}, {"params", 840000}}},
          {"world_size", 8},
          {"loss", {{"first", 5.5}, {"final", loss}}},
          {"val_loss", val_loss},
          {"tokens_per_s", 1000.0},
          {"compute_s", 0.5},
          {"exposed_comm_s", 0.25},
          {"topology", {{"name", topology}, {"tiers", tier_list}}},
          {"comm", {{"per_step", per_step}}},
          {"memory_bytes", {{"weights", 1e6}, {"secondary", 0}, {"grads", 2e6}, {"optimizer", 3e6}}}};
}

}  // namespace

TEST(CompareOutput, RowsAreRunFoldersWithValLossAndTiersOfEachTopologyApart) {
  test::ScratchDir dir;
  auto write = [&](const std::string& name, const nlohmann::json& summary) {
    fs::create_directories(dir / name);
    atomic_write_file(dir / name / "summary.json", summary.dump(2));
    return (dir / name).string();
  };
  // Two zero3 runs differing only in their folder and results, a run on another topology whose
  // tiers share names with the first, and a single-process run.
  const std::string a = write("a", sharded_summary("zero3", "two-node", {"node", "cluster"}, 2.5, 2.75, 4000));
  const std::string b = write("b", sharded_summary("zero3", "two-node", {"node", "cluster"}, 2.25, 2.5, 4000));
  const std::string c = write("c", sharded_summary("topo", "frontier", {"gpu", "node", "cluster"}, 2.0, 2.125, 9e6));
  nlohmann::json single = {{"world_size", 1},
                           {"loss", {{"first", 5.5}, {"final", 3.0}}},
                           {"val_loss", nullptr},
                           {"tokens_per_s", 500.0}};
  const std::string d = write("d", single);

  auto r = test::run_strata("compare " + a + " " + b + " " + c + " " + d);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  for (std::size_t pos = 0, end; (end = r.output.find('\n', pos)) != std::string::npos; pos = end + 1)
    lines.push_back(r.output.substr(pos, end - pos));
  ASSERT_GE(lines.size(), 5u) << r.output;
  // One column per tier of each topology: two-node's node and cluster, frontier's three.
  EXPECT_TRUE(contains(lines[0], "two-node:node B/step  two-node:cluster B/step  frontier:gpu B/step  "
                                 "frontier:node B/step  frontier:cluster B/step"))
      << lines[0];
  EXPECT_TRUE(contains(lines[0], "val loss")) << lines[0];
  EXPECT_TRUE(contains(lines[0], "run" + std::string(a.size() - 3, ' ') + "  model             strategy")) << lines[0];
  EXPECT_EQ(lines[1].rfind(a + "  tiny 4x128 0.84M  zero3", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind(b + "  tiny 4x128 0.84M  zero3", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind(c + "  tiny 4x128 0.84M  topo", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind(d + "  -                 single", 0), 0u) << lines[4];  // no model recorded
  EXPECT_TRUE(contains(lines[1], "2.5000    2.7500")) << lines[1];
  EXPECT_TRUE(contains(lines[2], "2.2500    2.5000")) << lines[2];
  // a: 4.0 kB on two-node's node, 400 B on its cluster, nothing on frontier's tiers.
  EXPECT_TRUE(std::regex_search(lines[1], std::regex(R"(s +4\.0 kB +400 B +- +- +- +1\.00 MB )"))) << lines[1];
  // c: frontier's gpu, node, cluster; none of two-node's.
  EXPECT_TRUE(std::regex_search(lines[3], std::regex(R"(s +- +- +9\.00 MB +900\.0 kB +90\.0 kB +1\.00 MB )")))
      << lines[3];
  // d: single process, no validation: marked, not blank or zero.
  EXPECT_TRUE(contains(lines[4], "3.0000         -")) << lines[4];
  // model, val loss, compute, exposed, five tiers, four memory states
  EXPECT_EQ(std::count(lines[4].begin(), lines[4].end(), '-'), 1 + 1 + 2 + 5 + 4) << lines[4];
  EXPECT_TRUE(contains(r.output, "single: a single-process run; it shards and communicates nothing")) << r.output;
}

TEST(ProgressOutput, StopAfterShowsTheSchedulesTotalAndWhereThisRunStops) {
  test::ScratchDir dir;
  const fs::path tokens = dir / "train.bin";
  test::write_tokens(tokens, test::sample_text_tokens(20000, 3));
  auto r = test::run_strata("train --model tiny --batch 2 --seq 32 --threads 1 --train-data " + tokens.string() +
                            " --steps 60 --stop-after 40 --log-every 20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "steps 1..40 of 60, 1 thread, ")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nstep 20/60 (stopping after 40) | loss ")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nstep 40/60 (stopping after 40) | loss ")) << r.output;
  EXPECT_FALSE(contains(r.output, "/40 ")) << r.output;
  r = test::run_strata("train --model tiny --batch 2 --seq 32 --threads 1 --train-data " + tokens.string() +
                       " --steps 20 --log-every 20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\nstep 20/20 | loss ")) << r.output;
}
