// `strata plan --peer`: each peer's collective calls for a model small enough to count by hand,
// what its overlap and copies move, and the refusal of a peer strata does not know.
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace {

using strata::test::parse_json_output;
using strata::test::run_command;
using strata::test::Stderr;

// Two GPT blocks of hidden 64 and MLP 100,000 (LayerNorm, GELU, biases, untied head, vocabulary
// 2,000) over 16 A100s, one NCCL call an op. Per unit, DeepSpeed's tensors of at least 1e5
// elements: embeddings 2,000 x 64 = 128,000 (1); a block's qkv 64 x 192 and proj 64 x 64 and all
// norms and biases under 1e5, fc weight 6,400,000 and bias 100,000 (one module, two tensors),
// mlp_proj weight 6,400,000 (1): 3 tensors in 2 modules; ln_f none (priced as one call, its bytes
// still move); head 128,000 (1). Elements in all: 26,090,048.
const std::string kTiny =
    "plan --model custom --shape layers=2 --shape hidden=64 --shape heads=4 --shape ffn=100000 --shape vocab=2000 "
    "--shape seq=128 --topology dgx-a100 --nodes 2 --collectives nccl --json";

nlohmann::json estimate(const std::string& peer, const std::string& strategy) {
  const nlohmann::json doc = parse_json_output(
      run_command(std::string(STRATA_EXE) + " " + kTiny + " --strategy " + strategy + " --peer " + peer, Stderr::Capture));
  return doc["strategies"][strategy];
}

double calls(const nlohmann::json& e, const char* purpose) { return e["peer"]["calls_a_step"][purpose].get<double>(); }

}  // namespace

TEST(PlanPeer, EachPeerCallsTheGathersOfAHandCountedModelAsItsCodeDoes) {
  // v0.5: one all-gather a gathered tensor: 1 + 3 + 3 + 1 (ln_f) + 1; backward re-gathers all but the head.
  const nlohmann::json v05 = estimate("deepspeed-0.5", "zero3");
  EXPECT_EQ(calls(v05, "weight-gather-forward"), 9);
  EXPECT_EQ(calls(v05, "weight-gather-backward"), 8);
  // v0.14: one coalesced call a module: 1 + 2 + 2 + 1 + 1.
  const nlohmann::json v014 = estimate("deepspeed-0.14", "zero3");
  EXPECT_EQ(calls(v014, "weight-gather-forward"), 7);
  EXPECT_EQ(calls(v014, "weight-gather-backward"), 6);
  // Both reduce in 5e8-element buckets: 26,090,048 / 5e8 calls a step.
  EXPECT_NEAR(calls(v014, "grad-reduce"), 26090048 / 5e8, 1e-9);
  // FSDP1 and FSDP2: one all-gather and one reduce-scatter a wrapped unit (five units).
  for (const char* peer : {"fsdp1", "fsdp2"}) {
    const nlohmann::json e = estimate(peer, "zero3");
    EXPECT_EQ(calls(e, "weight-gather-forward"), 5) << peer;
    EXPECT_EQ(calls(e, "grad-reduce"), 5) << peer;
  }
}

TEST(PlanPeer, BucketsOverlapAndCopiesAreThePeersOwn) {
  // Megatron's distributed optimizer: one bucket of max(4e7, 1e6 x 16) elements holds the whole
  // gradient (one reduce-scatter); its post-step gathers are hidden behind the next forward.
  const nlohmann::json megatron = estimate("megatron", "zero1");
  EXPECT_EQ(megatron["spec"]["bucket_bytes"], 160000000);
  EXPECT_EQ(calls(megatron, "step-grad-reduce"), 1);
  EXPECT_NEAR(calls(megatron, "weight-gather-step"), 26090048 / 4e7, 1e-9);
  EXPECT_GT(megatron["peer"]["hidden_param_gather_s"].get<double>(), 0);
  const nlohmann::json strata = parse_json_output(
      run_command(std::string(STRATA_EXE) + " " + kTiny + " --strategy zero1", Stderr::Capture))["strategies"]["zero1"];
  EXPECT_FALSE(strata.contains("peer"));
  EXPECT_LT(megatron["step_phase_comm_s"].get<double>(), strata["step_phase_comm_s"].get<double>());
  // DeepSpeed stage 1 with overlap_comm at its default (off): the reduction runs in line with
  // compute; stage 3 (on) overlaps it.
  EXPECT_GT(estimate("deepspeed-0.14", "zero1")["peer"]["serial_reduction_s"].get<double>(), 0);
  EXPECT_EQ(estimate("deepspeed-0.14", "zero3")["peer"]["serial_reduction_s"].get<double>(), 0);
  // FSDP2's copy-out and copy-in on the compute stream: only where weights are gathered.
  const nlohmann::json fsdp2 = estimate("fsdp2", "zero3"), fsdp1 = estimate("fsdp1", "zero3");
  EXPECT_GT(fsdp2["peer"]["copy_s"].get<double>(), 0);
  EXPECT_GT(fsdp2["compute_s"].get<double>(), fsdp1["compute_s"].get<double>());
  // Gradients reduce-scattered but weights replicated (zero2): the copy-in alone.
  const double zero2 = estimate("fsdp2", "zero2")["peer"]["copy_s"].get<double>();
  EXPECT_GT(zero2, 0);
  EXPECT_LT(zero2, fsdp2["peer"]["copy_s"].get<double>());
  EXPECT_EQ(estimate("fsdp2", "ddp")["peer"]["copy_s"].get<double>(), 0);
}

TEST(PlanPeer, AnUnknownPeerOrOneBesideGranularityIsRefusedByName) {
  const std::string base = std::string(STRATA_EXE) + " " + kTiny + " --strategy zero3";
  const strata::test::CommandResult unknown = run_command(base + " --peer deepspeed-0.3", Stderr::Capture);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("--peer 'deepspeed-0.3': unknown (known: strata, deepspeed-0.5, deepspeed-0.14, "
                                "fsdp1, fsdp2, megatron)"),
            std::string::npos)
      << unknown.output;
  const strata::test::CommandResult both = run_command(base + " --peer fsdp1 --granularity deepspeed", Stderr::Capture);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("--granularity deepspeed: --peer fsdp1 sets the granularity"), std::string::npos)
      << both.output;
}

namespace {

// MosaicML's MPT-7B at the anchors' shape (micro-batch 6 of 2048) on one DGX.
const std::string kMpt7b =
    std::string(STRATA_EXE) +
    " plan --model custom --shape layers=32 --shape hidden=4096 --shape heads=32 --shape ffn=16384 --shape vocab=50368 "
    "--shape seq=2048 --shape norm=layernorm --shape biases=false --shape tied_head=true "
    "--nodes 1 --strategy zero3 --flash-attention --collectives nccl --micro-batch 6 --json";

nlohmann::json assumptions(const std::string& flags, const std::string& gpu = "a100") {
  return parse_json_output(run_command(kMpt7b + " --topology dgx-" + gpu + " --compute-anchor " + gpu + " " + flags,
                                       Stderr::Discard))["assumptions"];
}

}  // namespace

TEST(PlanComputeShape, ThePeersKernelsPriceTheShapeAndTheJsonShowsWhy) {
  // FSDP1's 2021 kernels at the anchor's own shape: exactly the anchor's efficiency.
  const nlohmann::json fsdp1 = assumptions("--peer fsdp1");
  EXPECT_DOUBLE_EQ(fsdp1["compute_shape"]["efficiency"].get<double>(), 0.6423);
  EXPECT_DOUBLE_EQ(fsdp1["device"]["compute_efficiency"].get<double>(), 0.6423);
  EXPECT_EQ(fsdp1["compute_shape"]["kernels"], "2021");
  EXPECT_EQ(fsdp1["compute_shape"]["tile"], "256x128");
  // The fused qkv: 12288 x 12288 outputs in 256x128 tiles = 48 x 96 = 4608 tiles, 43 waves of 108.
  EXPECT_EQ(fsdp1["compute_shape"]["gemms"][0]["tiles"], 4608);
  EXPECT_EQ(fsdp1["compute_shape"]["gemms"][0]["waves"], 43);
  // On H100, FSDP2's 2024 kernels run FlashAttention-3, faster than the anchor run's FlashAttention-2
  // (head dim 128, seq 2048: 3 / (1/625 + 2.5/501) / 989 = 0.4603 of peak against 3 / (1/362 + 2.5/291) / 989 =
  // 0.2672): a higher efficiency than the anchor's.
  const nlohmann::json fsdp2 = assumptions("--peer fsdp2", "h100");
  EXPECT_EQ(fsdp2["compute_shape"]["kernels"], "2024");
  EXPECT_NEAR(fsdp2["compute_shape"]["attention_efficiency"].get<double>(), 0.46030, 1e-5);
  EXPECT_NEAR(fsdp2["compute_shape"]["attention_efficiency_at_anchor"].get<double>(), 0.26717, 1e-5);
  EXPECT_GT(fsdp2["compute_shape"]["efficiency"].get<double>(), 0.4644);
  // --kernels wins over the peer's; --compute-efficiency over everything.
  EXPECT_DOUBLE_EQ(assumptions("--peer fsdp2 --kernels 2021", "h100")["compute_shape"]["efficiency"].get<double>(),
                   0.4644);
  const nlohmann::json flat = assumptions("--peer fsdp1 --compute-efficiency 0.5");
  EXPECT_TRUE(flat["compute_shape"].is_null());
  EXPECT_DOUBLE_EQ(flat["device"]["compute_efficiency"].get<double>(), 0.5);
}

TEST(PlanComputeShape, AnUnknownGenerationIsRefusedNamingTheFlag) {
  const strata::test::CommandResult r =
      run_command(kMpt7b + " --topology dgx-a100 --compute-anchor a100 --kernels 2022", Stderr::Capture);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--kernels = '2022': unknown kernel generation (known: 2021, 2024)"), std::string::npos)
      << r.output;
}

TEST(PlanComputeShape, UnderTensorParallelismEachStrategyPricesItsOwnSlice) {
  // LUMI's anchor: Llama 2 7B, TP 2, micro-batch 2 of 4096, 2024 kernels (no peer): its TP 2
  // slice gets exactly 0.4752; the whole model's data-parallel context (the assumptions) has
  // wider GEMMs and another figure.
  const nlohmann::json doc = parse_json_output(
      run_command(std::string(STRATA_EXE) +
                      " plan --model llama2-7b --shape seq=4096 --topology frontier --compute-anchor mi250x --nodes 2 "
                      "--strategy zero1+tp2 --flash-attention --micro-batch 2 --json",
                  Stderr::Discard));
  EXPECT_DOUBLE_EQ(doc["strategies"]["zero1+tp2"]["compute_shape"]["efficiency"].get<double>(), 0.4752);
  EXPECT_NE(doc["assumptions"]["compute_shape"]["efficiency"].get<double>(), 0.4752);
}
