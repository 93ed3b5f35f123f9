// `strata plan --emit`: each framework's file parsed back (JSON, TOML; the Python and the
// Megatron arguments by their lines) and its knobs equal to the plan's; the frameworks' names
// as strategies; --search's recommendation and its refusal when nothing fits.
#include <algorithm>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "base/fileio.hpp"
#include "plan/model_shapes.hpp"
#include "shard/schedule.hpp"
#include "cli_support.hpp"
#include "support.hpp"

namespace {

using strata::test::CommandResult;
using strata::test::parse_json_output;
using strata::test::run_strata;
using strata::test::Stderr;

const std::string kLlama = "plan --model llama2-7b --topology dgx-h100 --nodes 2 --flash-attention ";

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

// Elements of the largest unit of llama2-7b split over `tp` (a block).
std::size_t largest_unit(int tp) {
  const auto units = strata::plan::ModelShape::preset("llama2-7b").slice(tp, 0, 1).unit_plan();
  return *std::max_element(units.numel.begin(), units.numel.end());
}

}  // namespace

TEST(PlanEmit, DeepSpeedConfigCarriesZeroPlusPlusAsPlanned) {
  strata::test::ScratchDir dir;
  const auto file = dir / "ds.json";
  CommandResult r = run_strata(kLlama + "--strategy zero++ --micro-batch 2 --accum 4 --emit deepspeed " + file.string(),
                               Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DeepSpeed config of zeropp, run as priced"), std::string::npos) << r.output;
  const nlohmann::json ds = nlohmann::json::parse(strata::read_file_text(file));
  const nlohmann::json& zero = ds["zero_optimization"];
  EXPECT_EQ(zero["stage"], 3);
  EXPECT_EQ(zero["zero_hpz_partition_size"], 8);  // the secondary copy over a node
  EXPECT_EQ(zero["zero_quantized_weights"], true);
  EXPECT_EQ(zero["zero_quantized_gradients"], true);
  EXPECT_EQ(zero["overlap_comm"], true);
  EXPECT_FALSE(zero.contains("mics_shard_size"));
  EXPECT_EQ(zero["reduce_bucket_size"].get<std::size_t>(), largest_unit(1));  // one reduction a unit
  EXPECT_EQ(zero["stage3_prefetch_bucket_size"].get<std::size_t>(), largest_unit(1));  // prefetch 1 unit
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(ds["gradient_accumulation_steps"], 4);
  EXPECT_EQ(ds["train_batch_size"], 2 * 4 * 16);
  EXPECT_EQ(ds["bf16"]["enabled"], true);
  EXPECT_FALSE(ds.contains("communication_data_type"));  // quantized gradients carry their own format
  const std::string comment = ds["_strata"].dump();
  EXPECT_NE(comment.find("runs this plan as priced"), std::string::npos) << comment;
  EXPECT_NE(comment.find("zero_hpz_partition_size 8"), std::string::npos) << comment;  // the spec in words
}

TEST(PlanEmit, TorchtitanTomlHasTheSplitAndSaysWhatItCannotRun) {
  strata::test::ScratchDir dir;
  const auto file = dir / "job.toml";
  CommandResult r = run_strata(kLlama + "--strategy hybrid_shard+tp2 --recompute selective-op --accum 2 --emit torchtitan " +
                                   file.string(),
                               Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // strata's hsdp reduces in bf16; torchtitan in float32 only: the nearest, priced.
  EXPECT_NE(r.output.find("the file holds the nearest it runs"), std::string::npos) << r.output;
  const toml::table t = toml::parse_file(file.string());
  EXPECT_EQ(t["parallelism"]["data_parallel_shard_degree"].value<int>(), 4);  // a node of 8 over TP 2
  EXPECT_EQ(t["parallelism"]["data_parallel_replicate_degree"].value<int>(), 2);
  EXPECT_EQ(t["parallelism"]["tensor_parallel_degree"].value<int>(), 2);
  EXPECT_EQ(t["parallelism"]["pipeline_parallel_degree"].value<int>(), 1);
  EXPECT_EQ(t["parallelism"]["fsdp_reshard_after_forward"].value<std::string>(), "always");
  EXPECT_EQ(t["activation_checkpoint"]["mode"].value<std::string>(), "selective");
  EXPECT_EQ(t["activation_checkpoint"]["selective_ac_option"].value<std::string>(), "op");
  EXPECT_EQ(t["training"]["mixed_precision_param"].value<std::string>(), "bfloat16");
  EXPECT_EQ(t["training"]["mixed_precision_reduce"].value<std::string>(), "float32");
  EXPECT_EQ(t["training"]["local_batch_size"].value<int>(), 1);
  EXPECT_EQ(t["training"]["global_batch_size"].value<int>(), 1 * 2 * 8);  // 8 data-parallel ranks
  EXPECT_EQ(t["training"]["seq_len"].value<int>(), 4096);
  const std::string text = strata::read_file_text(file);
  EXPECT_NE(text.find("# torchtitan cannot run strata's plan as priced:"), std::string::npos) << text;
  EXPECT_NE(text.find("mixed_precision_reduce accepts float32 only"), std::string::npos) << text;
  EXPECT_NE(text.find("this file configures the nearest it runs, priced: nearest+tp2"), std::string::npos) << text;
}

TEST(PlanEmit, Fsdp2SnippetReshardsToTheSecondaryGroupAndMegatronArgsCarryTheSplit) {
  strata::test::ScratchDir dir;
  const auto py = dir / "fsdp2.py";
  ASSERT_EQ(run_strata(kLlama + "--strategy zeropp --emit fsdp2 " + py.string(), Stderr::Capture).exit_code, 0);
  const std::string snippet = strata::read_file_text(py);
  EXPECT_TRUE(has_line(snippet, "mesh = init_device_mesh(\"cuda\", (1, 16), mesh_dim_names=(\"dp_replicate\", "
                                "\"dp_shard\"))"))
      << snippet;
  EXPECT_NE(snippet.find("fully_shard(block, mesh=dp_mesh, reshard_after_forward=8, mp_policy=mp_policy)"),
            std::string::npos)
      << snippet;
  EXPECT_TRUE(has_line(snippet, "mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
                                "reduce_dtype=torch.bfloat16)"))
      << snippet;
  EXPECT_NE(snippet.find("no quantized gathers or reductions"), std::string::npos) << snippet;
  // Replicated weights: DDP over a 1-D mesh (a tuple of one), its bucket the plan's.
  ASSERT_EQ(run_strata(kLlama + "--strategy no_shard --device-memory-gb 200 --emit fsdp2 " + py.string(), Stderr::Capture)
                .exit_code,
            0);
  const std::string ddp = strata::read_file_text(py);
  EXPECT_TRUE(has_line(ddp, "mesh = init_device_mesh(\"cuda\", (16,), mesh_dim_names=(\"dp\",))")) << ddp;
  EXPECT_NE(ddp.find("bucket_cap_mb=25)"), std::string::npos) << ddp;

  const auto args = dir / "megatron.args";
  CommandResult r = run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 4 --flash-attention --accum 4 "
                               "--strategy zero-1+tp2+pp2 --recompute full --emit megatron " + args.string(),
                               Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = strata::read_file_text(args);
  for (const char* line : {"--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2", "--micro-batch-size 1",
                           "--global-batch-size 32", "--bf16", "--grad-reduce-in-bf16", "--use-distributed-optimizer",
                           "--num-distributed-optimizer-instances 1", "--recompute-granularity full",
                           "--use-flash-attn", "--num-layers 32", "--swiglu", "--untie-embeddings-and-output-weights"})
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  EXPECT_NE(text.find("Megatron-LM runs this plan as priced."), std::string::npos) << text;
}

TEST(PlanEmit, RefusalsWriteNothing) {
  strata::test::ScratchDir dir;
  const auto file = dir / "x.json";
  CommandResult r = run_strata(kLlama + "--strategy zero3 --emit colossalai " + file.string(), Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--emit 'colossalai': unknown framework (known: deepspeed, fsdp2, torchtitan, megatron)"),
            std::string::npos)
      << r.output;
  r = run_strata(kLlama + "--strategy zero3,hsdp --emit deepspeed " + file.string(), Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--emit: writes one plan"), std::string::npos) << r.output;
  r = run_strata(kLlama + "--strategy fdsp --emit deepspeed " + file.string(), Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("hybrid_shard = hsdp"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(PlanSearch, EndsWithARecommendationAndEmitsTheBest) {
  strata::test::ScratchDir dir;
  const auto file = dir / "best.json";
  const std::string args = kLlama + "--accum 2 --search --top 3";
  CommandResult r = run_strata(args + " --emit deepspeed " + file.string(), Stderr::Capture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"tok/s/dev", "ranked by time a token, every split at the same global batch",
                           "recommendation (ranked by time a token; every split trains the same global batch: 32 "
                           "sequences",
                           "  best: ", "    that is: W=", "    bound by compute", "runner-up #2: ", "runner-up #3: ",
                           "memory a device: 80.0 GB - ", "CUDA context", "pytorch/pytorch#34323",
                           "spec: W, G, OS = the tier"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  const nlohmann::json doc = parse_json_output(run_strata(args + " --json", Stderr::Discard));
  const nlohmann::json& rec = doc["recommendation"];
  EXPECT_EQ(rec["fits"], true);
  EXPECT_EQ(rec["best"]["strategy"], doc["search"]["best"][0]["strategy"]);
  EXPECT_EQ(rec["runners_up"].size(), 2u);
  EXPECT_LT(rec["memory"]["headroom_bytes"].get<double>(),
            80e9 - doc["search"]["best"][0]["memory_bytes"]["total"].get<double>());
  const std::string written = nlohmann::json::parse(strata::read_file_text(file))["_strata"].dump();
  EXPECT_NE(written.find(rec["best"]["label"].get<std::string>()), std::string::npos) << written;
}

TEST(PlanSearch, NothingFitsNamesTheSmallestChangeAndExitsNonZero) {
  // Dense attention at 4096 tokens: the probabilities alone outgrow 80 GB.
  CommandResult r =
      run_strata("plan --model llama2-7b --topology dgx-h100 --nodes 1 --micro-batch 4 --search", Stderr::Capture);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const char* want : {"nothing fits in 80 GB a device. The least memory needed:", "add --flash-attention",
                           "the smallest change that fits: --flash-attention",
                           "strata: error: --search: no plan fits in 80 GB a device; the smallest change that fits: "
                           "--flash-attention"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}
