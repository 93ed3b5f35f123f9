// The work between a chain's levels on a device's memory (shard::DeviceChainWork, the
// executor's chain scratch): through the device's calls only, with the bits of the host's
// (comm::ChainScratch's defaults over the same buffers).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/api/wire.hpp"
#include "shard/executor.hpp"
#include "staged_device.hpp"
#include "support.hpp"

using namespace strata;

namespace {

// Only the element-wise work is under test: no views are asked for.
class OnDevice final : public shard::DeviceChainWork {
 public:
  using DeviceChainWork::DeviceChainWork;
  comm::Buf carried(int, DType, std::size_t, std::size_t) override { throw Error("not under test"); }
  comm::Buf staged(int, DType, std::size_t, std::size_t) override { throw Error("not under test"); }
};
class OnHost final : public comm::ChainScratch {
 public:
  comm::Buf carried(int, DType, std::size_t, std::size_t) override { throw Error("not under test"); }
  comm::Buf staged(int, DType, std::size_t, std::size_t) override { throw Error("not under test"); }
};

std::uint32_t next(std::uint32_t& state) { return state = state * 1664525u + 1013904223u; }

// `count` elements of t (block 8 for int8/int4) in the staged device's memory, filled with
// pseudo-random bytes and scales.
struct DeviceBuf {
  DeviceBuf(test::StagedDevice& device, DType t, std::size_t count, std::uint32_t seed)
      : data(device, data_bytes(t, count)), scales(device, scale_count(t, count, 8)) {
    view = comm::Buf(t, data.data(), count, is_quantized(t) ? scales.data() : nullptr,
                     is_quantized(t) ? 8 : 0);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(next(seed) >> 24);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<float>(next(seed) >> 8) / 65536.0f;
  }
  // A host copy of the same bytes, for the host's functions.
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> out(data.data(), data.data() + data.size());
    out.insert(out.end(), reinterpret_cast<const std::uint8_t*>(scales.data()),
               reinterpret_cast<const std::uint8_t*>(scales.data() + scales.size()));
    return out;
  }
  comm::Buf host_view(std::vector<std::uint8_t>& bytes) const {
    comm::Buf b = view;
    b.data = bytes.data();
    if (b.scales) b.scales = reinterpret_cast<float*>(bytes.data() + data.size());
    return b;
  }

  device::Buffer<std::uint8_t> data;
  device::Buffer<float> scales;
  comm::Buf view;
};

}  // namespace

TEST(DeviceChainWork, SumsSlotsInSlotOrderThroughTheDevicesCopyAndAddsToTheHostsBits) {
  test::StagedDevice device;
  constexpr std::size_t n = 37;
  constexpr int k = 4;
  device::Buffer<float> slots(device, n * k), out(device, n);
  std::uint32_t seed = 7;
  // Magnitudes far apart: another order of the sums rounds otherwise.
  for (std::size_t i = 0; i < slots.size(); ++i)
    slots[i] = static_cast<float>(static_cast<std::int32_t>(next(seed))) * (i % 3 == 0 ? 1e-3f : 1e4f);
  std::vector<float> want(n);
  OnHost().sum_slots(comm::f32(slots.data(), n * k), k, comm::f32(want.data(), n), 1.0f);

  OnDevice work(device);
  work.sum_slots(comm::f32(slots.data(), n * k), k, comm::f32(out.data(), n), 1.0f);
  EXPECT_EQ(std::memcmp(out.data(), want.data(), sizeof(float) * n), 0);
  EXPECT_EQ(device.copies.load(), 1);
  EXPECT_EQ(device.adds.load(), k - 1);

  // In place (the result over slot 0): no copy, the same bits.
  work.sum_slots(comm::f32(slots.data(), n * k), k, comm::f32(slots.data(), n), 1.0f);
  EXPECT_EQ(std::memcmp(slots.data(), want.data(), sizeof(float) * n), 0);
  EXPECT_EQ(device.copies.load(), 1);
  EXPECT_EQ(device.adds.load(), 2 * (k - 1));
}

TEST(DeviceChainWork, RefusesToDivideAndToSumAnythingButFp32) {
  test::StagedDevice device;
  OnDevice work(device);
  device::Buffer<float> slots(device, 8), out(device, 4);
  test::expect_error([&] { work.sum_slots(comm::f32(slots.data(), 8), 2, comm::f32(out.data(), 4), 2.0f); },
                     {"sum_slots divides by 2 between levels", "the executor's chains sum (divisor 1)"});
  test::expect_error([&] { work.scale(comm::f32(out.data(), 4), 4.0f); }, {"scale divides by 4"});
  device::Buffer<std::uint16_t> half(device, 8);
  test::expect_error(
      [&] { work.sum_slots(comm::Buf(DType::BF16, half.data(), 8), 2, comm::Buf(DType::BF16, half.data(), 4), 1.0f); },
      {"sum_slots of bf16 elements: the executor carries fp32"});
  work.scale(comm::f32(out.data(), 4), 1.0f);  // a sum: nothing to do
  EXPECT_EQ(device.scales.load(), 0);
}

// Zeroing and copying ranges of every wire format, the int4 ones starting mid-byte and ending
// on a partial block too: data bytes and the scales of the blocks, as wire.hpp does on the host.
TEST(DeviceChainWork, ZeroesAndCopiesDataAndBlockScalesAsTheHostDoes) {
  struct Range {
    std::size_t first, count;
  };
  for (DType t : {DType::F32, DType::BF16, DType::I8, DType::I4})
    for (Range r : {Range{0, 64}, Range{16, 21}, Range{8, 48}, Range{37, 10}}) {
      if (r.first % 2 == 1 && t != DType::I4) continue;  // mid-byte: int4's case
      SCOPED_TRACE(std::string(dtype_name(t)) + " [" + std::to_string(r.first) + ", +" +
                   std::to_string(r.count) + ")");
      test::StagedDevice device;
      OnDevice work(device);
      DeviceBuf b(device, t, 64, 11);
      std::vector<std::uint8_t> want = b.bytes();
      comm::zero_elements(b.host_view(want), r.first, r.count);
      work.zero(b.view, r.first, r.count);
      EXPECT_EQ(b.bytes(), want) << "zero";
      // Only a range starting mid-byte takes its first byte through the host.
      EXPECT_EQ(device.copies_to_host.load(), r.first % 2);

      if (r.first % 8 != 0) continue;  // copies start on whole granules (blocks)
      DeviceBuf src(device, t, 64, 12), dst(device, t, 64, 13);
      std::vector<std::uint8_t> host_src = src.bytes(), host_dst = dst.bytes();
      comm::copy_elements(src.host_view(host_src), r.first, dst.host_view(host_dst), 0, r.count);
      const int copies = device.copies;
      work.copy(src.view, r.first, dst.view, 0, r.count);
      EXPECT_EQ(dst.bytes(), host_dst) << "copy";
      EXPECT_EQ(device.copies.load(), copies + (is_quantized(t) ? 2 : 1));
    }
}
