// Drives `strata plan` as a user would and checks what it prints.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/layout.hpp"
#include "shard/schedule.hpp"
#include "topo/topology.hpp"

namespace {

struct Result {
  int rc = -1;
  std::string out;
};

Result run(const std::string& args, bool with_stderr = false) {
  Result r;
  const std::string command = std::string(STRATA_EXE) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
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

std::string test_topology() {
  const char* root = std::getenv("STRATA_SOURCE_DIR");
  return (std::filesystem::path(root ? root : ".") / "configs/topology/2node-2gpu-2die.toml").string();
}

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("strata_plan_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST(PlanCli, NeoxOnFrontierJsonHasEveryStrategysAccount) {
  nlohmann::json doc =
      parse(run("plan --model gpt-neox-20b --topology frontier --nodes 48 --strategy all --json"));
  ASSERT_TRUE(doc.contains("strategies"));
  for (const char* name : {"ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "topo", "topo-paper"}) {
    ASSERT_TRUE(doc["strategies"].contains(name)) << name;
    const nlohmann::json& s = doc["strategies"][name];
    for (const char* tier : {"gpu", "node", "cluster"}) EXPECT_TRUE(s["bytes_per_step"][tier].contains("bytes_sent"));
    for (const char* state : {"weights", "secondary", "grads", "optimizer", "activations"})
      EXPECT_TRUE(s["memory_bytes"].contains(state)) << state;
    for (const char* key : {"step_time_s", "tflops_per_device", "mfu"}) EXPECT_GT(s[key].get<double>(), 0) << key;
  }
  EXPECT_EQ(doc["topology"]["world_size"], 384);
  EXPECT_EQ(doc["assumptions"]["precision"], "bf16");
  EXPECT_EQ(doc["assumptions"]["device"]["peak_tflops"], 191.5);
  EXPECT_EQ(doc["strategies"]["ddp"]["fits"], false);
}

TEST(PlanCli, TextOutputShowsTheTableAndTheMemoryVerdicts) {
  Result r = run("plan --model llama2-70b --topology dgx-h100 --nodes 2 --strategy ddp,zero3 --recompute", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("llama2-70b (68.98 B parameters)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not fit: needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("zero3"), std::string::npos);
}

TEST(PlanCli, BadInputIsRefusedNamingTheField) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : {Case{"plan --model gpt5 --topology frontier --nodes 2", "--model 'gpt5'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 2 --strategy zero4", "--strategy 'zero4'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 0", "--nodes 0"},
                        Case{"plan --model llama2-7b --topology frontier", "--nodes: required"},
                        Case{"plan --model llama2-7b --topology mars --nodes 1", "topology: 'mars'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --precision fp8", "--precision 'fp8'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --grad-wire int3", "--grad-wire = 'int3'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --shard W=cluster,G=node",
                             "degree(G) >= degree(W)"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --seq 0", "--seq 0: must be positive"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --search --strategy zero3", "--search"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --svg x.svg", "--svg: only with"},
                        Case{"plan --model llama2-7b --topology " + test_topology() + " --nodes 2", "--peak-tflops"}}) {
    Result r = run(c.args, true);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("strata: error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(PlanCli, Fp32PlanEqualsTheRuntimesScheduleForEveryPresetOnTheTestTopology) {
  // The runtime builds its schedule from tiny's ParamLayout; a summary.json in its format
  // (comm.scheduled_per_step and comm.per_step, per tier) must equal the planner's bytes.
  auto topology = strata::topo::Topology::from_toml_file(test_topology());
  topology.resolve(8);
  const strata::model::ParamLayout layout(strata::model::GPTConfig::preset("tiny"));
  for (const std::string& preset : strata::shard::ShardSpec::preset_names()) {
    strata::shard::Schedule s(layout, topology, strata::shard::ShardSpec::preset_for(preset, topology), 3);
    nlohmann::json per_tier = nlohmann::json::object();
    for (const auto& t : s.traffic_per_step())
      per_tier[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
    nlohmann::json summary = {{"strategy", preset},
                              {"world_size", 8},
                              {"comm", {{"scheduled_per_step", per_tier}, {"per_step", per_tier}}}};
    const auto path = scratch(preset + "_summary.json");
    std::ofstream(path) << summary.dump(2);
    const std::string args = "plan --model tiny --topology " + test_topology() + " --nodes 2 --strategy " + preset +
                             " --accum 3 --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50"
                             " --compare-summary " + path.string();
    Result ok = run(args, true);
    EXPECT_EQ(ok.rc, 0) << ok.out;
    EXPECT_NE(ok.out.find("all equal"), std::string::npos) << ok.out;

    // A byte off on the network is caught and named.
    summary["comm"]["per_step"]["cluster"]["bytes_sent"] = s.traffic_per_step().back().bytes_sent + 1;
    std::ofstream(path) << summary.dump(2);
    Result off = run(args, true);
    EXPECT_EQ(off.rc, 2) << off.out;
    EXPECT_NE(off.out.find("comm.per_step.cluster.bytes_sent"), std::string::npos) << off.out;
  }
  // bf16 planning does not price the fp32 runtime, and says so.
  Result bf16 = run("plan --model tiny --topology " + test_topology() +
                        " --nodes 2 --strategy zero3 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50"
                        " --compare-summary " + scratch("zero3_summary.json").string(),
                    true);
  EXPECT_EQ(bf16.rc, 2);
  EXPECT_NE(bf16.out.find("--precision fp32"), std::string::npos) << bf16.out;
  std::filesystem::remove_all(scratch("").parent_path());
}

TEST(PlanCli, SearchRanksSpecsAndSaysWhyTheOthersLost) {
  Result r = run("plan --model gpt-neox-20b --topology frontier --nodes 48 --recompute --search --top 3", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("next 3 and why they lost to #1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% step time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not fit: needs"), std::string::npos) << r.out;
  nlohmann::json doc =
      parse(run("plan --model gpt-neox-20b --topology frontier --nodes 48 --recompute --search --top 3 --json"));
  EXPECT_EQ(doc["search"]["best"].size(), 3u);
  EXPECT_LE(doc["search"]["best"][0]["step_time_s"].get<double>(), doc["search"]["best"][1]["step_time_s"].get<double>());
}

TEST(PlanCli, SweepPrintsScalingAndWritesAnSvg) {
  const auto svg = scratch("sweep.svg");
  Result r = run("plan --model llama2-7b --topology dgx-a100 --strategy zero3,hsdp,topo --sweep-nodes 1,2,4,8 --svg " +
                     svg.string(),
                 true);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("n0 = 8 devices"), std::string::npos) << r.out;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  nlohmann::json doc = parse(run("plan --model llama2-7b --topology dgx-a100 --strategy zero3 --sweep-nodes 1,2 --json"));
  EXPECT_EQ(doc["sweep"][0]["points"][0]["scaling_efficiency"], 1.0);
  EXPECT_EQ(doc["sweep"][0]["n0_devices"], 8);
  std::filesystem::remove_all(svg.parent_path());
}
