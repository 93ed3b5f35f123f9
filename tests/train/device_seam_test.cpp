// The compute-device seam (device/device.hpp) driven on the CPU: a device whose memory the
// host may not address in place (as a GPU's), so the engine must go through its copies for
// initialisation, checkpoints and export. The trainer, checkpoints and engine never learn
// which device runs: the same losses come out, bit for bit, and a checkpoint taken through
// the copies resumes to them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "device/device.hpp"
#include "staged_device.hpp"
#include "train/local_engine.hpp"
#include "train/trainer.hpp"
#include "util.hpp"

using namespace strata;
using namespace strata::train;
using strata::test::StagedDevice;
namespace fs = std::filesystem;

namespace {

TrainConfig seam_config(const test::ScratchDir& dir) {
  if (!fs::exists(dir / "train.bin")) test::write_tokens(dir / "train.bin", test::sample_text_tokens(30000, 3));
  TrainConfig c;
  c.batch = 2;
  c.seq = 32;
  c.steps = 8;
  c.lr = 3e-3f;
  c.warmup = 2;
  c.train_data = (dir / "train.bin").string();
  return c;
}

TrainResult run_on(const TrainConfig& c, device::Device& device) {
  LocalEngine engine(c.model, c.batch, c.seq_len(), c.seed, false, device);
  Trainer trainer(c, engine);
  return trainer.run();
}

}  // namespace

TEST(DeviceSeam, ADeviceTheHostCannotAddressTrainsToTheHostsLossesBitForBit) {
  test::ScratchDir dir;
  const TrainConfig c = seam_config(dir);
  StagedDevice staged;
  const TrainResult host = run_on(c, device::host()), other = run_on(c, staged);
  ASSERT_EQ(host.steps.size(), other.steps.size());
  for (std::size_t i = 0; i < host.steps.size(); ++i) {
    EXPECT_EQ(std::memcmp(&host.steps[i].loss, &other.steps[i].loss, sizeof(double)), 0) << "step " << i + 1;
    EXPECT_EQ(std::memcmp(&host.steps[i].grad_norm, &other.steps[i].grad_norm, sizeof(double)), 0) << "step " << i + 1;
  }
  EXPECT_EQ(staged.copies_from_host.load(), 1);  // the initial weights, once
  EXPECT_FALSE(staged.over_reserve) << staged.allocated << " bytes allocated, " << staged.reserved << " reserved";
  EXPECT_EQ(staged.reserved, LocalEngine::device_bytes(c.model, c.batch, c.seq_len(), false, staged,
                                                       Precision::F32));
}

TEST(DeviceSeam, ACheckpointTakenThroughTheDevicesCopiesResumesToTheSameLosses) {
  test::ScratchDir dir;
  TrainConfig whole = seam_config(dir);
  const TrainResult straight = run_on(whole, device::host());

  StagedDevice staged;
  TrainConfig first = whole;
  first.out_dir = (dir / "run").string();
  first.stop_after = 4;
  run_on(first, staged);
  const int copied_out = staged.copies_to_host;
  EXPECT_GE(copied_out, 3);  // master weights and both moments, into the checkpoint
  TrainConfig rest = first;
  rest.stop_after = 0;
  rest.resume = "latest";
  const TrainResult resumed = run_on(rest, staged);
  ASSERT_EQ(resumed.steps.size(), 4u);
  for (std::size_t i = 0; i < resumed.steps.size(); ++i)
    EXPECT_EQ(std::memcmp(&resumed.steps[i].loss, &straight.steps[4 + i].loss, sizeof(double)), 0) << "step " << 5 + i;

  // Exported weights come back through the device's copy too.
  LocalEngine engine(whole.model, 2, 32, 5, false, staged);
  std::vector<float> params(engine.layout().total_floats());
  const int before = staged.copies_to_host;
  engine.gather_params(params.data());
  EXPECT_EQ(staged.copies_to_host.load(), before + 1);
}

TEST(DeviceSeam, TheHostDeviceRefusesBf16NamingThePrecision) {
  const model::ModelConfig config = model::ModelConfig::preset("tiny");
  const std::string what = test::error_of([&] { LocalEngine(config, 2, 32, 1, false, device::host(), Precision::BF16); });
  EXPECT_NE(what.find("train.precision = 'bf16': the cpu device computes in fp32 only"), std::string::npos) << what;
}
