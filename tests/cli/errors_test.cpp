// What a user who mistypes sees: one style ("strata: error: ..."), one status (2), and the
// nearest known name when there is one. Help and the version still print with status 0.
#include <gtest/gtest.h>

#include <string>

#include "device/device.hpp"
#include "support.hpp"

using namespace strata;

namespace {

test::CommandResult strata_run(const std::string& args) {
  return test::run_command(std::string(STRATA_EXE) + " " + args, test::Stderr::Capture);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Exit status 2 and a message that starts "strata: error: " and holds `part`.
void expect_refusal(const std::string& args, const std::string& part) {
  const auto r = strata_run(args);
  EXPECT_EQ(r.exit_code, 2) << "strata " << args << "\n" << r.output;
  EXPECT_TRUE(r.output.starts_with("strata: error: ")) << "strata " << args << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, part)) << "strata " << args << ": '" << part << "' not in\n" << r.output;
  EXPECT_FALSE(contains(r.output, "Usage:")) << "strata " << args << " printed help:\n" << r.output;
}

}  // namespace

TEST(CliErrors, AnUnknownCommandNamesTheNearestOrListsThem) {
  expect_refusal("trian", "strata: error: unknown command 'trian' (did you mean 'train'?)");
  expect_refusal("plna --model tiny", "unknown command 'plna' (did you mean 'plan'?)");
  expect_refusal("deploy", "unknown command 'deploy' (commands: train, compare, doctor, data, export, sample, ckpt, topo, bench, plan, calibrate)");
  expect_refusal("bench stpe", "unknown command 'stpe' of 'strata bench' (did you mean 'step'?)");
  expect_refusal("ckpt inspekt runs/x", "unknown command 'inspekt' of 'strata ckpt' (did you mean 'inspect'?)");
}

TEST(CliErrors, HelpAfterAnUnknownCommandIsAnErrorNotTheTopLevelHelp) {
  expect_refusal("deploy --help", "unknown command 'deploy'");
  expect_refusal("trian -h", "did you mean 'train'?");
}

TEST(CliErrors, AGroupWithoutItsCommandSaysWhichItTakes) {
  expect_refusal("", "'strata' needs a command: train, compare, doctor, data, export, sample, ckpt, topo, bench, plan");
  expect_refusal("ckpt", "'strata ckpt' needs a command: inspect, convert");
  expect_refusal("data --json", "'strata data' needs a command: prepare, inspect");
}

TEST(CliErrors, AnUnknownOptionNamesTheNearestFlagsOfItsCommand) {
  expect_refusal("train --step 10", "strata: error: unknown option --step for 'strata train' (did you mean --steps?)");
  expect_refusal("train --step=10", "unknown option --step for 'strata train' (did you mean --steps?)");
  expect_refusal("plan --model tiny --topology frontier --nodse 4",
                 "unknown option --nodse for 'strata plan' (did you mean --nodes?)");
  expect_refusal("ckpt inspect runs/x --verfy", "unknown option --verfy for 'strata ckpt inspect' (did you mean --verify?)");
  expect_refusal("train --no-such-flag", "unknown option --no-such-flag for 'strata train'\n  see 'strata train --help'");
  expect_refusal("export a --safetensors b c", "unexpected argument 'c' for 'strata export'");
}

TEST(CliErrors, EveryOtherParseErrorHasTheSameStyleAndStatus) {
  expect_refusal("train --steps", "--steps: needs a value (INT)");  // a flag without its value
  expect_refusal("train --lr abc", "--lr: 'abc' is not a number");
  expect_refusal("plan --nodes 9e9", "--nodes: '9000000000' is out of range");
  expect_refusal("export runs/x", "--safetensors is required");    // a required option missing
  expect_refusal("data inspect", "file is required");              // a required argument missing
  expect_refusal("train --steps 1.5e0", "--steps: '1.5e0': not a whole number: a count has no fraction");
  expect_refusal("train --batch lots", "--batch: 'lots': not a whole number (write 1000, 1_000 or 1e3)");
  expect_refusal("plan --nodes 1e30", "--nodes: '1e30': too large");
}

TEST(CliErrors, CountsTakeExponentsAndDigitGroups) {
  // Both counts read, as the check between them shows: 1e3 steps, stop after 2_000.
  expect_refusal("train --train-data x.bin --steps 1e3 --stop-after 2_000",
                 "--stop-after 2000: must lie in [1, train.steps = 1000]");
  expect_refusal("train --train-data x.bin --steps 2.5e3 --batch 0", "train.batch = 0: must be positive");
}

TEST(CliErrors, HelpAndVersionStillPrintWithStatusZero) {
  for (const char* args : {"--help", "train --help", "ckpt --help", "ckpt convert -h", "bench --help"}) {
    const auto r = strata_run(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "Usage:")) << args << "\n" << r.output;
  }
  const auto r = strata_run("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strata " STRATA_VERSION)) << r.output;
}

TEST(CliErrors, AComputeDeviceWithoutABackendIsRefusedNamingTheField) {
  expect_refusal("train --train-data x.bin --device gpu",
                 "train.device = 'gpu': no backend for that device (known: cpu, cuda)");
  expect_refusal("train --train-data x.bin --strategy zero3 --print-schedule --world-size 8 --device gpu",
                 "train.device = 'gpu'");
}

// Where strata was built without CUDA or no GPU answers, --device cuda is refused before
// anything runs, naming the flag and saying which of the two it is.
TEST(CliErrors, DeviceCudaWithoutAUsableGpuIsRefusedNamingTheFlagAndWhy) {
  std::string why;
  if (device::cuda_available(&why)) GTEST_SKIP() << "a GPU answers here: --device cuda runs (tests/device)";
  expect_refusal("train --train-data x.bin --device cuda", "train.device = 'cuda' (--device cuda): " + why);
  EXPECT_TRUE(contains(why, "built without CUDA") || contains(why, "GPU")) << why;
}

// The GPU has no fp16 wire codec: such a wire is refused while the options are checked, before
// any device or NCCL communicator starts, so here too (without it the refusal would be the
// missing GPU's), from a flag or from a config file's [shard].
TEST(CliErrors, AnFp16WireOnTheGpuIsRefusedBeforeTheDeviceStartsNamingTheField) {
  expect_refusal("train --train-data x.bin --device cuda --strategy zero3 --grad-wire fp16",
                 "shard.grad_wire = 'fp16' (--grad-wire): the cuda device has no codec for this wire");
  expect_refusal("train --train-data x.bin --device cuda --strategy zero3 --weight-wire F16 --print-schedule "
                 "--world-size 16 --topology dgx-h100",
                 "shard.weight_wire = 'F16' (--weight-wire): the cuda device has no codec");
  test::ScratchDir dir;
  test::write_bytes(dir / "run.toml", "[train]\ndevice = \"cuda\"\n[shard]\nstrategy = \"zero3\"\n"
                                      "step_grad_wire = \"fp16\"\n");
  expect_refusal("train --train-data x.bin --config " + (dir / "run.toml").string(),
                 "shard.step_grad_wire = 'fp16' (--step-grad-wire): the cuda device has no codec");
  // A bf16 wire passes to the device's own check; the cpu encodes fp16.
  std::string why;
  if (!device::cuda_available(&why))
    expect_refusal("train --train-data x.bin --device cuda --strategy zero3 --grad-wire bf16",
                   "train.device = 'cuda' (--device cuda): " + why);
  const auto cpu = strata_run("train --train-data x.bin --strategy zero3 --grad-wire fp16 --print-schedule "
                              "--world-size 16 --topology dgx-h100");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
}

TEST(CliErrors, APrecisionTheDeviceDoesNotComputeInIsRefusedNamingTheFlag) {
  expect_refusal("train --train-data x.bin --precision fp16", "train.precision = 'fp16': must be fp32 or bf16");
  expect_refusal("train --train-data x.bin --precision bf16",
                 "train.precision = 'bf16' (--precision): the cpu device computes in fp32; bf16 needs --device cuda");
}

TEST(CliErrors, ANegativeBucketSizeIsRefusedNamingTheField) {
  expect_refusal("train --train-data x.bin --bucket-bytes=-1", "shard.bucket_bytes = -1: must not be negative");
  expect_refusal("plan --model tiny --topology frontier --nodes 1 --bucket-bytes=-5",
                 "--bucket-bytes = -5: must not be negative");
}

TEST(CliErrors, TensorParallelismIsRefusedWhereItCannotRunNamingTheFlag) {
  expect_refusal("train --train-data t.bin --tp 2", "--tp 2: tensor parallelism needs ranks under mpirun");
  expect_refusal("train --train-data t.bin --tp 3 --strategy zero3 --topology dgx-h100 --print-schedule --world-size 16",
                 "--tp 3: does not divide what tier 'node' has left (8)");
  expect_refusal("train --train-data t.bin --tp 2 --tp-tier rack --strategy zero3 --topology dgx-h100 "
                 "--print-schedule --world-size 16",
                 "--tp-tier 'rack': unknown tier");
  expect_refusal("train --train-data t.bin --model llama-tiny --tp 4 --strategy zero3 --topology dgx-h100 "
                 "--print-schedule --world-size 16",
                 "--tp 4: does not divide model.n_kv_head = 2");
  expect_refusal("train --train-data t.bin --sequence-parallel --strategy zero3 --topology dgx-h100 "
                 "--print-schedule --world-size 16",
                 "--sequence-parallel: needs tensor parallelism (--tp 2 or more)");
}
