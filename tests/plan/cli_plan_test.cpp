// Drives `strata plan` as a user would and checks what it prints.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/layout.hpp"
#include "shard/schedule.hpp"
#include "cli_support.hpp"
#include "support.hpp"
#include "topo/topology.hpp"
#include "train/config.hpp"

namespace {

using strata::test::CommandResult;
using strata::test::parse_json_output;
using strata::test::run_strata;
using strata::test::Stderr;

std::string test_topology() {
  return strata::test::source_path("configs/topology/2node-2gpu-2die.toml").string();
}

}  // namespace

TEST(PlanCli, NeoxOnFrontierJsonHasEveryStrategysAccount) {
  nlohmann::json doc = parse_json_output(
      run_strata("plan --model gpt-neox-20b --topology frontier --nodes 48 --strategy all --json", Stderr::Discard));
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
  CommandResult r =
      run_strata("plan --model llama2-70b --topology dgx-h100 --nodes 2 --strategy ddp,zero3 --recompute", Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("llama2-70b (68.98 B parameters)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not fit: needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zero3"), std::string::npos);
}

// --recompute takes a mode; bare, it is full recomputation, as it always was.
TEST(PlanCli, RecomputeTakesAModeAndAloneMeansFull) {
  const std::string base = "plan --model llama2-7b --topology dgx-h100 --nodes 1 --strategy zero3 --flash-attention";
  CommandResult bare = run_strata(base + " --recompute", Stderr::Capture);
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  EXPECT_NE(bare.output.find("recompute full;"), std::string::npos) << bare.output;
  CommandResult before_flag = run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 1 --strategy zero3 "
                                         "--recompute --flash-attention",
                                         Stderr::Capture);
  ASSERT_EQ(before_flag.exit_code, 0) << before_flag.output;
  EXPECT_NE(before_flag.output.find("recompute full;"), std::string::npos) << before_flag.output;
  CommandResult selective = run_strata(base + " --recompute selective-op", Stderr::Capture);
  ASSERT_EQ(selective.exit_code, 0) << selective.output;
  EXPECT_NE(selective.output.find("recompute selective-op;"), std::string::npos) << selective.output;
  EXPECT_NE(selective.output.find("reruns the other projections (wk, wo, w3:"), std::string::npos) << selective.output;
  EXPECT_NE(selective.output.find("s of rerun memory-bound ops"), std::string::npos) << selective.output;

  nlohmann::json none = parse_json_output(run_strata(base + " --json", Stderr::Discard));
  nlohmann::json op = parse_json_output(run_strata(base + " --recompute selective-op --json", Stderr::Discard));
  nlohmann::json full = parse_json_output(run_strata(base + " --recompute full --json", Stderr::Discard));
  EXPECT_EQ(none["assumptions"]["recompute"], "none");
  EXPECT_EQ(op["assumptions"]["recompute"], "selective-op");
  EXPECT_EQ(full["assumptions"]["recompute"], "full");
  auto term = [](const nlohmann::json& doc, const char* key) { return doc["strategies"]["zero3"][key].get<double>(); };
  EXPECT_LT(term(none, "step_time_s"), term(op, "step_time_s"));
  EXPECT_LT(term(op, "step_time_s"), term(full, "step_time_s"));
  EXPECT_GT(term(op, "recompute_matmul_s"), 0);
  EXPECT_GT(term(op, "recompute_memory_bound_s"), 0);
  EXPECT_LT(term(op, "recompute_matmul_s"), term(full, "recompute_matmul_s"));
  EXPECT_EQ(term(none, "recompute_matmul_s"), 0);
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
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --precision fp8", "--precision = 'fp8'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --grad-wire int3", "--grad-wire = 'int3'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --shard W=cluster,G=node",
                             "degree(G) >= degree(W)"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --seq 0", "--seq 0: must be positive"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --search --strategy zero3", "--search"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --svg x.svg", "--svg: only with"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --recompute half",
                             "--recompute 'half': expected none, full"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --recompute selective-op",
                             "--recompute selective-op: prices torchtitan's per-op policy"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --collectives tree",
                             "--collectives 'tree'"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --granularity bucket",
                             "--granularity 'bucket'"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 1 --calibration "
                             "configs/calibration/missing.toml",
                             "configs/calibration/missing.toml"},
                        Case{"plan --model llama2-7b --topology frontier --nodes 1 --strategy zero3 --collectives "
                             "flat-ring --compare-summary x.json",
                             "runtime runs hierarchical collectives"},
                        Case{"plan --model llama2-7b --topology " + test_topology() + " --nodes 2", "--peak-tflops"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --tp 3",
                             "--tp 3: does not divide what tier 'node' has left (8)"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --pp 3", "--pp 3: does not divide"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --tp 2 --tp-tier rack",
                             "--tp-tier 'rack': unknown tier"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --strategy zero3+tq2",
                             "--strategy 'zero3+tq2'"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --pp 2 --print-schedule",
                             "--print-schedule: a pipeline's messages are priced beside the stages' schedules"},
                        Case{"plan --model llama2-7b --topology dgx-h100 --nodes 2 --search --tp 3", "--tp 3"}}) {
    CommandResult r = run_strata(c.args, Stderr::Capture);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("strata: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(PlanCli, Fp32PlanEqualsTheRuntimesScheduleForEveryPresetOnTheTestTopology) {
  // The runtime builds its schedule from tiny's ParamLayout; a summary.json in its format
  // (comm.scheduled_per_step and comm.per_step, per tier) must equal the planner's bytes.
  auto topology = strata::topo::Topology::from_toml_file(test_topology());
  topology.resolve(8);
  const strata::model::ParamLayout layout(strata::model::ModelConfig::preset("tiny"));
  strata::test::ScratchDir dir;
  for (const std::string& preset : strata::shard::ShardSpec::preset_names()) {
    strata::shard::Schedule s(layout, topology, strata::shard::ShardSpec::preset_for(preset, topology), 3);
    nlohmann::json per_tier = nlohmann::json::object();
    for (const auto& t : s.traffic_per_step())
      per_tier[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
    nlohmann::json summary = {{"strategy", preset},
                              {"world_size", 8},
                              {"comm", {{"scheduled_per_step", per_tier}, {"per_step", per_tier}}}};
    const auto path = dir / (preset + "_summary.json");
    std::ofstream(path) << summary.dump(2);
    const std::string args = "plan --model tiny --topology " + test_topology() + " --nodes 2 --strategy " + preset +
                             " --accum 3 --precision fp32 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50"
                             " --compare-summary " + path.string();
    CommandResult ok = run_strata(args, Stderr::Capture);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_NE(ok.output.find("all equal"), std::string::npos) << ok.output;

    // A byte off on the network is caught and named.
    summary["comm"]["per_step"]["cluster"]["bytes_sent"] = s.traffic_per_step().back().bytes_sent + 1;
    std::ofstream(path) << summary.dump(2);
    CommandResult off = run_strata(args, Stderr::Capture);
    EXPECT_EQ(off.exit_code, 2) << off.output;
    EXPECT_NE(off.output.find("comm.per_step.cluster.bytes_sent"), std::string::npos) << off.output;
  }
  // Tensor parallelism: the runtime's schedule of `--tp 2` (its split layout over the
  // data-parallel topology, its TP ops) against `--strategy zero3+tp2`; the summary names the
  // strategy's preset, its TP degree and the data-parallel topology, as the runtime writes them.
  {
    const strata::parallel::ParallelDims dims = strata::parallel::ParallelDims::model_parallel(topology, 2, 0, 1, 2);
    const strata::topo::Topology dp = dims.data_parallel_topology(topology);
    const strata::model::ModelConfig config = strata::model::ModelConfig::preset("tiny");
    strata::shard::Schedule s(strata::model::ParamLayout(config, {2, 0}), dp,
                              strata::shard::ShardSpec::preset_for("zero3", dp), 3,
                              strata::shard::tensor_parallel_plan(dims, config, 1, config.seq_len, false));
    nlohmann::json per_tier = nlohmann::json::object();
    for (const auto& t : s.traffic_per_step())
      per_tier[t.tier] = {{"bytes_sent", t.bytes_sent}, {"bytes_received", t.bytes_received}, {"messages", t.messages}};
    const nlohmann::json summary = {{"strategy", "zero3"},
                                    {"world_size", 8},
                                    {"tensor_parallel", 2},
                                    {"topology", dp.to_json()},
                                    {"comm", {{"scheduled_per_step", per_tier}, {"per_step", per_tier}}}};
    const auto path = dir / "tp_summary.json";
    std::ofstream(path) << summary.dump(2);
    const std::string args = "plan --model tiny --topology " + test_topology() +
                             " --nodes 2 --accum 3 --micro-batch 1 --precision fp32 --peak-tflops 1 "
                             "--device-memory-gb 8 --hbm-gbps 50 --compare-summary " + path.string() + " --strategy ";
    CommandResult ok = run_strata(args + "zero3+tp2", Stderr::Capture);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_NE(ok.output.find("all equal"), std::string::npos) << ok.output;
    CommandResult flat = run_strata(args + "zero3", Stderr::Capture);
    EXPECT_EQ(flat.exit_code, 2) << flat.output;
    EXPECT_NE(flat.output.find("strategy differs: the run has zero3+tp2, the plan zero3 (plan it with --strategy "
                               "zero3+tp2)"),
              std::string::npos) << flat.output;
  }
  // bf16 planning does not price the fp32 runtime, and says so.
  CommandResult bf16 = run_strata("plan --model tiny --topology " + test_topology() +
                                       " --nodes 2 --strategy zero3 --peak-tflops 1 --device-memory-gb 8 --hbm-gbps 50"
                                       " --compare-summary " + (dir / "zero3_summary.json").string(),
                                   Stderr::Capture);
  EXPECT_EQ(bf16.exit_code, 2);
  EXPECT_NE(bf16.output.find("--precision fp32"), std::string::npos) << bf16.output;
}

TEST(PlanCli, CompareSummaryNamesTheFirstSetupFieldThatDiffers) {
  // A run's summary.json as strata writes it: strategy, world size, the topology it resolved.
  auto topology = strata::topo::Topology::from_toml_file(test_topology());
  topology.resolve(8);
  strata::test::ScratchDir dir;
  const auto path = dir / "summary.json";
  auto compare = [&](const nlohmann::json& summary, const std::string& flags) {
    std::ofstream(path) << summary.dump(2);
    return run_strata("plan --model tiny --topology " + test_topology() + " --nodes 2 --peak-tflops 1 "
                      "--device-memory-gb 8 --hbm-gbps 50 --compare-summary " + path.string() + " " + flags,
                      Stderr::Capture);
  };
  const nlohmann::json ddp = {{"strategy", "ddp"}, {"world_size", 8}, {"topology", topology.to_json()}};
  const std::string where = "strata: error: --compare-summary " + path.string() + ": ";

  // A zero3 plan (bf16, the default) against a ddp run: the strategy, not the precision.
  CommandResult r = compare(ddp, "--strategy zero3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(where + "strategy differs: the run has ddp, the plan zero3 (plan it with --strategy ddp)"),
            std::string::npos) << r.output;

  // A run with sequence parallelism against a plan without it: named before any byte differs.
  auto other = ddp;
  other["config"] = {{"shard", {{"sequence_parallel", true}}}};
  r = compare(other, "--strategy ddp");
  EXPECT_NE(r.output.find(where + "sequence parallelism differs: the run has on, the plan off (give "
                                  "--sequence-parallel)"),
            std::string::npos)
      << r.output;

  // A pipeline run's blocks a stage against the plan's: an uneven run is not an even plan.
  other = ddp;
  other["pipeline_stages"] = 2;
  other["config"] = {{"shard", {{"pp_layers", {1, 3}}}}};
  r = compare(other, "--strategy ddp+pp2");
  EXPECT_NE(r.output.find(where + "blocks a stage differs: the run has 1,3, the plan 1,1 (give --pp-layers 1,3)"),
            std::string::npos)
      << r.output;

  other = ddp;
  other["world_size"] = 16;
  r = compare(other, "--strategy ddp");
  EXPECT_NE(r.output.find(where + "world size differs: the run has 16 ranks, the plan 8 ranks"), std::string::npos)
      << r.output;

  auto frontier = strata::topo::Topology::load("frontier");
  frontier.resolve(8);
  other = ddp;
  other["topology"] = frontier.to_json();
  r = compare(other, "--strategy ddp");
  EXPECT_NE(r.output.find(where + "topology differs: the run has 'frontier' (gpu 2 x node 4 x cluster 1), the plan "
                                  "'2node-2gpu-2die' (gpu 2 x node 2 x cluster 2)"), std::string::npos)
      << r.output;

  r = compare(ddp, "--strategy ddp");
  EXPECT_NE(r.output.find(where + "precision differs: the run has fp32 (strata's runtime), the plan bf16 (give "
                                  "--precision fp32)"),
            std::string::npos)
      << r.output;

  // Everything the same: on to the bytes (this summary has none).
  r = compare(ddp, "--strategy ddp --precision fp32");
  EXPECT_NE(r.output.find(where + "no comm.scheduled_per_step"), std::string::npos) << r.output;

  // A single-process run has no strategy to compare.
  r = compare(nlohmann::json{{"world_size", 1}}, "--strategy ddp --precision fp32");
  EXPECT_NE(r.output.find(where + "no strategy: a single-process run"), std::string::npos) << r.output;
}

TEST(PlanCli, SearchRanksSpecsAndSaysWhyTheOthersLost) {
  CommandResult r =
      run_strata("plan --model gpt-neox-20b --topology frontier --nodes 48 --recompute --search --top 3", Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("next 3 and why they lost to #1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% time a token"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not fit: needs"), std::string::npos) << r.output;
  nlohmann::json doc = parse_json_output(run_strata(
      "plan --model gpt-neox-20b --topology frontier --nodes 48 --recompute --search --top 3 --json", Stderr::Discard));
  EXPECT_EQ(doc["search"]["best"].size(), 3u);
  EXPECT_LE(doc["search"]["best"][0]["step_time_s"].get<double>(), doc["search"]["best"][1]["step_time_s"].get<double>());
}

TEST(PlanCli, SweepPrintsScalingAndWritesAnSvg) {
  strata::test::ScratchDir dir;
  const auto svg = dir / "sweep.svg";
  CommandResult r = run_strata(
      "plan --model llama2-7b --topology dgx-a100 --strategy zero3,hsdp,topo --sweep-nodes 1,2,4,8 --svg " + svg.string(),
      Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("n0 = 8 devices"), std::string::npos) << r.output;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  nlohmann::json doc = parse_json_output(
      run_strata("plan --model llama2-7b --topology dgx-a100 --strategy zero3 --sweep-nodes 1,2 --json", Stderr::Discard));
  EXPECT_EQ(doc["sweep"][0]["points"][0]["scaling_efficiency"], 1.0);
  EXPECT_EQ(doc["sweep"][0]["n0_devices"], 8);
}

// --pp-layers: each stage priced with its own blocks, its memory a row of its own.
TEST(PlanCli, UnevenPipelineStagesArePricedEachWithItsOwnBlocksAndMemory) {
  const std::string args =
      "plan --model llama2-7b --topology dgx-h100 --nodes 2 --accum 4 --flash-attention --strategy zero1 --pp 2 "
      "--pp-layers 8,24";
  CommandResult r = run_strata(args, Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"zero1+pp2 ", "  stage 0 ", "8 blocks: ", "  stage 1 ", "24 blocks: "})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  const nlohmann::json pp = parse_json_output(run_strata(args + " --json", Stderr::Discard))["strategies"]["zero1+pp2"];
  ASSERT_EQ(pp["pipeline"].size(), 2u);
  EXPECT_EQ(pp["pipeline"][0]["blocks"], 8);
  EXPECT_EQ(pp["pipeline"][1]["blocks"], 24);
  EXPECT_LT(pp["pipeline"][0]["params"].get<double>(), pp["pipeline"][1]["params"].get<double>() / 2);
  // The slow stage sets the pace: its idle share is the first stage's one micro-batch.
  EXPECT_NEAR(pp["pp_bubble_s"].get<double>(), pp["pipeline"][0]["micro_batch_s"].get<double>(), 1e-12);
  EXPECT_EQ(pp["memory_bytes"]["total"], pp["pipeline"][1]["memory_bytes"]["total"]);
  CommandResult bad = run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 2 --pp 2 --pp-layers 8,8",
                                 Stderr::Capture);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--pp-layers 8,8: 16 blocks in all, but the model has 32"), std::string::npos)
      << bad.output;
}

TEST(PlanCli, TensorAndPipelineTermsShowBesideEveryStrategyInTheTableAndJson) {
  const std::string args =
      "plan --model llama2-7b --topology dgx-h100 --nodes 4 --accum 8 --flash-attention --strategy zero3,hsdp+pp2 --tp 2";
  CommandResult r = run_strata(args, Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"zero3+tp2 ", "hsdp+tp2+pp2 ", "tp s", "p2p s", "bubble s", "J/token", "tokens/kWh"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  nlohmann::json doc = parse_json_output(run_strata(args + " --json", Stderr::Discard));
  const nlohmann::json& tp = doc["strategies"]["zero3+tp2"];
  const nlohmann::json& pp = doc["strategies"]["hsdp+tp2+pp2"];
  EXPECT_GT(tp["tp_allreduce_s"].get<double>(), 0);
  EXPECT_EQ(tp["pp_bubble_s"].get<double>(), 0);
  EXPECT_GT(pp["pp_bubble_s"].get<double>(), 0);
  EXPECT_GT(pp["pp_p2p_s"].get<double>(), 0);
  // Two stages alike but for the embedding and the head: a bubble a little under (p-1)/(m+p-1).
  EXPECT_LT(pp["pp_bubble_fraction"].get<double>(), 1.0 / 9);
  EXPECT_GT(pp["pp_bubble_fraction"].get<double>(), 1.0 / 9 - 0.02);
  ASSERT_EQ(pp["pipeline"].size(), 2u);
  EXPECT_EQ(pp["pipeline"][1]["blocks"], 16);
  EXPECT_GT(pp["pipeline"][1]["memory_bytes"]["total"].get<double>(), 0);
  EXPECT_EQ(pp["world_size"], 32);
  EXPECT_GT(tp["energy"]["joules_per_token"].get<double>(), 0);
  EXPECT_TRUE(doc["model_parallel_assumptions"].contains("tensor_parallel"));
  // --search ranks (tp, pp, spec) together.
  nlohmann::json search = parse_json_output(run_strata(
      "plan --model llama2-13b --topology dgx-h100 --nodes 4 --accum 4 --flash-attention --device-memory-gb 40 "
      "--search --top 3 --json",
      Stderr::Discard));
  std::set<std::pair<int, int>> splits;
  for (const char* list : {"best", "others"})
    for (const nlohmann::json& e : search["search"][list]) {
      EXPECT_LE(e["memory_bytes"]["total"].get<double>(), 40e9);
      splits.insert({e["tensor_parallel"].get<int>(), e["pipeline_stages"].get<int>()});
    }
  EXPECT_GT(splits.size(), 1u);
}

// A --tier override of a rate the calibration measured cannot move the collectives priced by
// its curves: the planner says which it moves, and the prediction moves only by those.
TEST(PlanCli, ATierOverrideUnderACalibrationSaysWhatItMoves) {
  const std::string calibrated = "plan --model gpt-neox-20b --topology frontier --nodes 48 --strategy zero3 "
                                 "--micro-batch 1 --calibration " +
                                 strata::test::source_path("configs/calibration/frontier.toml").string();
  const CommandResult noted = run_strata(calibrated + " --tier cluster.ports=8", Stderr::Capture);
  EXPECT_EQ(noted.exit_code, 0) << noted.output;
  EXPECT_NE(noted.output.find("note: --tier cluster.ports=8: the calibration prices the cluster tier's all_gather, "
                              "reduce_scatter at their measured rates; the override moves only its all_reduce, "
                              "all_to_all"),
            std::string::npos)
      << noted.output;
  // zero3's cluster traffic is gathers and reductions only: priced as measured, it does not move.
  const nlohmann::json before = parse_json_output(run_strata(calibrated + " --json", Stderr::Discard));
  const nlohmann::json after =
      parse_json_output(run_strata(calibrated + " --tier cluster.ports=8 --json", Stderr::Discard));
  EXPECT_EQ(after["strategies"]["zero3"]["comm_time_per_step"]["cluster"],
            before["strategies"]["zero3"]["comm_time_per_step"]["cluster"]);
  // Without a calibration, or for a field no curve replaces, nothing to say.
  for (const std::string& args : {std::string("plan --model gpt-neox-20b --topology frontier --nodes 48 --strategy "
                                              "zero3 --micro-batch 1 --tier cluster.ports=8"),
                                  calibrated + " --tier cluster.latency_us=9"}) {
    const CommandResult quiet = run_strata(args, Stderr::Capture);
    EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
    EXPECT_EQ(quiet.output.find("note: --tier"), std::string::npos) << args << "\n" << quiet.output;
  }
}

// Issue 13: the calibrations shipped for the presets (configs/calibration/, built from published
// figures) load through the same parser as a measured one, and move the prediction the way their
// figures say: a tier whose gathers and reductions are calibrated above the preset's rate x
// efficiency must move its bytes faster for zero3 over 4 nodes, one calibrated below must move them
// slower, a tier without figures must not change; compute runs at the file's published efficiency
// instead of the preset's, unless --compute-efficiency is given; bytes and latency stay as they were.
TEST(PlanCli, ShippedCalibrationsLoadAndMoveThePredictionTheWayTheirFiguresSay) {
  const std::set<std::string> expected{"dgx-a100", "dgx-h100", "frontier"};
  std::set<std::string> shipped;
  for (const auto& entry : std::filesystem::directory_iterator(strata::test::source_path("configs/calibration")))
    shipped.insert(entry.path().stem().string());
  // alps-gh200 calibrates a file topology's network only: PlanGroupSize checks it.
  EXPECT_EQ(shipped, (std::set<std::string>{"alps-gh200", "dgx-a100", "dgx-h100", "frontier"}))
      << "a shipped calibration no test checks";
  for (const std::string& preset : expected) {
    const std::string file = strata::test::source_path("configs/calibration/" + preset + ".toml").string();
    const std::string args =
        "plan --model llama2-13b --topology " + preset + " --nodes 4 --strategy zero3 --micro-batch 1 --json";
    const nlohmann::json plain = parse_json_output(run_strata(args, Stderr::Discard));
    const nlohmann::json calibrated = parse_json_output(run_strata(args + " --calibration " + file, Stderr::Discard));
    const nlohmann::json &p = plain["strategies"]["zero3"], &c = calibrated["strategies"]["zero3"];
    EXPECT_EQ(c["bytes_per_step"], p["bytes_per_step"]) << preset;
    const double preset_efficiency = plain["assumptions"]["device"]["compute_efficiency"].get<double>();
    const double published_efficiency = calibrated["assumptions"]["calibration"]["compute"]["efficiency"].get<double>();
    EXPECT_DOUBLE_EQ(calibrated["assumptions"]["device"]["compute_efficiency"].get<double>(), published_efficiency)
        << preset;
    EXPECT_NE(published_efficiency, preset_efficiency) << preset;
    EXPECT_NEAR(c["compute_s"].get<double>() / p["compute_s"].get<double>(), preset_efficiency / published_efficiency,
                1e-9)
        << preset << ": compute at the published efficiency";
    const std::string keep_efficiency = " --compute-efficiency " + std::to_string(preset_efficiency);
    const nlohmann::json overridden =
        parse_json_output(run_strata(args + " --calibration " + file + keep_efficiency, Stderr::Discard));
    EXPECT_EQ(overridden["strategies"]["zero3"]["compute_s"], p["compute_s"]) << preset << ": the command line wins";
    bool every_figure_faster = published_efficiency >= preset_efficiency;
    int calibrated_tiers = 0;
    for (std::size_t t = 0; t < plain["assumptions"]["tiers"].size(); ++t) {
      const nlohmann::json& preset_tier = plain["assumptions"]["tiers"][t];
      const std::string name = preset_tier["tier"].get<std::string>();
      const double preset_rate =
          preset_tier["rank_bandwidth_GBps"].get<double>() * preset_tier["efficiency"].get<double>();
      const nlohmann::json& cal = calibrated["assumptions"]["calibration"]["tiers"][t];
      ASSERT_EQ(cal["name"], name) << preset;
      const nlohmann::json &before = p["comm_time_per_step"][name], &after = c["comm_time_per_step"][name];
      EXPECT_EQ(after["latency_s"], before["latency_s"]) << preset << " " << name << ": no published latency";
      if (!cal["all_gather"].is_object()) {
        EXPECT_FALSE(cal["reduce_scatter"].is_object()) << preset << " " << name;
        EXPECT_EQ(after["bandwidth_s"], before["bandwidth_s"]) << preset << " " << name;
        continue;
      }
      ++calibrated_tiers;
      const double gather = cal["all_gather"]["bus_GBps"].get<double>();
      const double reduce = cal["reduce_scatter"]["bus_GBps"].get<double>();
      every_figure_faster = every_figure_faster && gather >= preset_rate && reduce >= preset_rate;
      // The tier's time is its gathers' bytes at one rate and its reductions' at the other.
      const double moved = after["bandwidth_s"].get<double>() / before["bandwidth_s"].get<double>();
      const double low = preset_rate / std::max(gather, reduce), high = preset_rate / std::min(gather, reduce);
      if (std::abs(low - 1) < 1e-9 && std::abs(high - 1) < 1e-9) {
        EXPECT_NEAR(moved, 1.0, 1e-9) << preset << " " << name << ": the preset's own figure";
      } else {
        EXPECT_GE(moved, low * 0.97) << preset << " " << name << ": the bytes move at the calibrated rates";
        EXPECT_LE(moved, high * 1.03) << preset << " " << name << ": the bytes move at the calibrated rates";
        EXPECT_NE(moved, 1.0) << preset << " " << name;
      }
    }
    EXPECT_GT(calibrated_tiers, 0) << preset;
    if (every_figure_faster) {
      EXPECT_LE(c["step_time_s"].get<double>(), p["step_time_s"].get<double>()) << preset;
    }
  }
}

// docs/planner-quickstart.md's path: a config.json, a cluster in a line, nccl-tests logs.
TEST(PlanCli, AConfigJsonAClusterLineAndNcclTestsLogs) {
  const std::string model = strata::test::source_path("configs/models/llama-3-8b").string();
  const std::string args = "plan --model " + model + " --seq 8192 --flash-attention --strategy zero3,hsdp --json ";
  // The header names what was read.
  CommandResult text = run_strata("plan --model " + model + " --cluster nodes=2,gpus=8,gpu=h100-sxm,nics=8x400 "
                                  "--seq 8192 --flash-attention --strategy zero3",
                                  Stderr::Capture);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* part : {"(8.03 B parameters) on '8xh100-sxm', 16 ranks", "SwiGLU MLP 14336 wide, RMSNorm",
                           "from LlamaForCausalLM"})
    EXPECT_NE(text.output.find(part), std::string::npos) << part << "\n" << text.output;
  // --cluster prices as the preset of its shape.
  const nlohmann::json line = parse_json_output(
      run_strata(args + "--cluster gpus=8,gpu=h100-sxm,nvlink=450,nics=8x400 --nodes 2", Stderr::Discard));
  const nlohmann::json preset = parse_json_output(run_strata(args + "--topology dgx-h100 --nodes 2", Stderr::Discard));
  for (const char* s : {"zero3", "hsdp"})
    EXPECT_EQ(line["strategies"][s]["step_time_s"], preset["strategies"][s]["step_time_s"]) << s;
  CommandResult bad = run_strata("plan --model " + model + " --cluster gpus=8,gpu=h100-sxm,nics=8 --nodes 2",
                                 Stderr::Capture);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("nics=8: expected COUNTxGBITS"), std::string::npos) << bad.output;

  // nccl-tests logs into a calibration the plan prices with; a bad log writes nothing.
  strata::test::ScratchDir dir;
  const std::string logs = strata::test::source_path("configs/nccl-tests/dgx-h100-1node-all_gather_perf.log").string() +
                           " " +
                           strata::test::source_path("configs/nccl-tests/dgx-h100-2node-all_gather_perf.log").string();
  const std::string cal = (dir / "cal.toml").string();
  CommandResult made = run_strata("calibrate --from-nccl-tests " + logs + " --out " + cal, Stderr::Capture);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("wrote " + cal), std::string::npos) << made.output;
  const nlohmann::json priced = parse_json_output(run_strata(
      args + "--cluster gpus=8,gpu=h100-sxm,nics=8x400 --nodes 2 --collectives flat-ring --calibration " + cal,
      Stderr::Discard));
  EXPECT_EQ(priced["assumptions"]["calibration"]["tiers"][1]["all_gather"]["priced_at"], 6);
  std::string broken = strata::read_file_text(
      strata::test::source_path("configs/nccl-tests/dgx-h100-2node-all_gather_perf.log"));
  broken.replace(broken.find("    float"), 9, "    fl oat");
  strata::test::write_bytes(dir / "all_gather_perf.log", broken);
  const std::string bad_out = (dir / "bad.toml").string();
  CommandResult refused =
      run_strata("calibrate --from-nccl-tests " + (dir / "all_gather_perf.log").string() + " --out " + bad_out,
                 Stderr::Capture);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("all_gather_perf.log:"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("columns where the table's header has 13"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(bad_out));
}

// calibrate --from-gemm-bench (with the nccl-tests logs, one file): the plan's compute is priced
// at the table's FLOP-weighted rate, and says so.
TEST(PlanCli, AGemmTableSetsThePlansComputeEfficiency) {
  strata::test::ScratchDir dir;
  // Two shapes of equal FLOPs at 600 and 400 TFLOP/s: 480 TFLOP/s FLOP-weighted, of 989 peak.
  strata::test::write_bytes(dir / "gemm.csv", "m,n,k,dtype,tflops\n8192,8192,8192,bf16,600\n16384,8192,4096,bf16,400\n");
  const std::string cluster = " --cluster nodes=2,gpus=8,gpu=h100-sxm,nics=8x400";
  const std::string cal = (dir / "cal.toml").string();
  const std::string log = strata::test::source_path("configs/nccl-tests/dgx-h100-2node-all_gather_perf.log").string();
  CommandResult made = run_strata("calibrate --from-nccl-tests " + log + " --from-gemm-bench " +
                                      (dir / "gemm.csv").string() + cluster + " --out " + cal,
                                  Stderr::Capture);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("compute efficiency 0.4853: the FLOP-weighted 480 TFLOP/s"), std::string::npos)
      << made.output;

  const std::string plan = "plan --model llama2-7b" + cluster + " --strategy zero3 --flash-attention ";
  const nlohmann::json priced = parse_json_output(run_strata(plan + "--json --calibration " + cal, Stderr::Discard));
  const nlohmann::json assumed = parse_json_output(run_strata(plan + "--json", Stderr::Discard));
  EXPECT_NEAR(priced["assumptions"]["device"]["compute_efficiency"].get<double>(), 480.0 / 989, 1e-12);
  EXPECT_EQ(priced["assumptions"]["calibration"]["tiers"][1]["all_gather"]["priced_at"], 6);  // the log's curve too
  // The same model FLOPs at 480 TFLOP/s instead of the assumed half of 989.
  const double assumed_efficiency = assumed["assumptions"]["device"]["compute_efficiency"].get<double>();
  EXPECT_EQ(assumed_efficiency, 0.5);
  EXPECT_NEAR(priced["strategies"]["zero3"]["compute_s"].get<double>() /
                  assumed["strategies"]["zero3"]["compute_s"].get<double>(),
              0.5 * 989 / 480, 1e-9);
  CommandResult text = run_strata(plan + "--calibration " + cal, Stderr::Capture);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("compute: efficiency 0.4853 from the calibration's 2 measured GEMMs (bf16, "
                             "FLOP-weighted 480 TFLOP/s of the NVIDIA H100 SXM5's 989 peak"),
            std::string::npos)
      << text.output;

  // Without a device, or with a bad row: refused, nothing written.
  const std::string bad = (dir / "bad.toml").string();
  CommandResult no_device =
      run_strata("calibrate --from-gemm-bench " + (dir / "gemm.csv").string() + " --out " + bad, Stderr::Capture);
  EXPECT_EQ(no_device.exit_code, 2);
  EXPECT_NE(no_device.output.find("give --cluster"), std::string::npos) << no_device.output;
  strata::test::write_bytes(dir / "gemm.csv", "m,n,k,dtype,tflops\n8192,8192,8192,bf16,600\n4096,4096,4096,tf32,300\n");
  CommandResult bad_row = run_strata(
      "calibrate --from-gemm-bench " + (dir / "gemm.csv").string() + cluster + " --out " + bad, Stderr::Capture);
  EXPECT_EQ(bad_row.exit_code, 2);
  EXPECT_NE(bad_row.output.find("gemm.csv:3: dtype tf32"), std::string::npos) << bad_row.output;
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST(PlanCli, TheDemosSlowLinkMakesZeroppAndTopoCheaperThanZero3InBytesAndTime) {
  // The demo's model (scripts/demo.toml) and the comparison's run (scripts/compare_strategies.sh:
  // 8 ranks, micro-batch 1, 4 micro-batches a step) over its topology, on a device of a CPU
  // core's share: over 100 Mbit/s between the nodes, what zeropp and topo save on the wire is
  // worth more than what they do not, as the comparison's table shows.
  const strata::model::ModelConfig m = strata::train::build_model(
      strata::train::read_config_file(strata::test::source_path("scripts/demo.toml")));
  const std::string args =
      fmt::format("plan --model tiny --shape layers={} --shape hidden={} --shape heads={} --shape learned_positions={} "
                  "--topology {} "
                  "--nodes 2 --strategy zero3,zeropp,topo --micro-batch 1 --seq {} --accum 4 --precision fp32 "
                  "--peak-tflops 0.02 --device-memory-gb 8 --hbm-gbps 10 --json",
                  m.n_layer, m.n_embd, m.n_head, m.seq_len,
                  strata::test::source_path("configs/topology/2node-slow-link.toml").string(), m.seq_len);
  const nlohmann::json doc = parse_json_output(run_strata(args, Stderr::Discard));
  ASSERT_TRUE(doc.contains("strategies")) << doc.dump(1);
  const nlohmann::json& s = doc["strategies"];
  auto cluster_bytes = [&](const char* name) { return s[name]["bytes_per_step"]["cluster"]["bytes_sent"].get<double>(); };
  auto step_s = [&](const char* name) { return s[name]["step_time_s"].get<double>(); };
  for (const char* name : {"zeropp", "topo"}) {
    EXPECT_LT(cluster_bytes(name), cluster_bytes("zero3")) << name;
    EXPECT_LT(step_s(name), step_s("zero3")) << name;
  }
}
