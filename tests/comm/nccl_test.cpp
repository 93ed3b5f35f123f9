// The NCCL backend against the same references as the host collectives. Runs where every
// rank has a GPU of its own; elsewhere (this project's build machine) it is skipped.
#include <gtest/gtest.h>

#include <cstring>

#include <cuda_runtime.h>

#include "comm/nccl/nccl_communicator.hpp"
#include "comm_world.hpp"

namespace strata::comm::testing {
namespace {

// A device copy of a host buffer (data and scales), copied back on demand.
struct DeviceBuf {
  explicit DeviceBuf(const HostBuf& h) : host(h) {
    cudaMalloc(&data, std::max<std::size_t>(h.data.size(), 1));
    cudaMemcpy(data, h.data.data(), h.data.size(), cudaMemcpyHostToDevice);
    if (!h.scales.empty()) {
      cudaMalloc(reinterpret_cast<void**>(&scales), h.scales.size() * sizeof(float));
      cudaMemcpy(scales, h.scales.data(), h.scales.size() * sizeof(float), cudaMemcpyHostToDevice);
    }
  }
  ~DeviceBuf() {
    cudaFree(data);
    cudaFree(scales);
  }
  Buf view() { return Buf(host.dtype, data, host.count, scales, host.block); }
  HostBuf to_host() {
    HostBuf h = host;
    cudaMemcpy(h.data.data(), data, h.data.size(), cudaMemcpyDeviceToHost);
    if (scales) cudaMemcpy(h.scales.data(), scales, h.scales.size() * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
  HostBuf host;
  void* data = nullptr;
  float* scales = nullptr;
};

TEST(Nccl, CollectivesMatchTheReference) {
  int rank = 0, world = 1, devices = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < world)
    GTEST_SKIP() << "needs one GPU per rank (" << world << " ranks, " << devices << " GPUs)";
  cudaSetDevice(rank);
  NcclCommunicator g(MPI_COMM_WORLD, "nccl:world");
  const std::size_t D = std::size_t(world);
  std::uint64_t seed = 9000;
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      for (std::size_t n : {std::size_t(5), std::size_t(1021)}) {
        ++seed;
        std::vector<HostBuf> m;
        for (std::size_t k = 0; k < D; ++k) m.push_back(member_data(t, n, 0, seed, int(k)));
        auto want = [&](std::size_t e) {
          double s = 0;
          for (auto& b : m) s += b.value(e);
          return op == ReduceOp::Avg ? s / double(D) : s;
        };
        const std::size_t c = g.chunk_elements(n, t);
        DeviceBuf in(m[rank]), shard(HostBuf(t, c));
        g.reduce_scatter(in.view(), shard.view(), op);
        HostBuf s = shard.to_host();
        for (std::size_t i = 0; i < c; ++i) {
          std::size_t e = std::size_t(rank) * c + i;
          ASSERT_EQ(s.value(i), e < n ? want(e) : 0.0) << dtype_name(t) << " n=" << n;
        }
        DeviceBuf all(m[rank]);
        Work w = g.all_reduce_async(all.view(), op);
        while (!w.test()) {
        }
        HostBuf a = all.to_host();
        for (std::size_t e = 0; e < n; ++e) ASSERT_EQ(a.value(e), want(e)) << dtype_name(t) << " n=" << n;
      }
  for (DType t : {DType::F32, DType::I8, DType::I4})
    for (std::size_t n : {std::size_t(5), std::size_t(1021)}) {
      ++seed;
      const std::size_t block = is_quantized(t) ? 4 : 0, c = g.chunk_elements(n, t, block);
      std::vector<HostBuf> shards, sends;
      for (std::size_t k = 0; k < D; ++k) {
        shards.push_back(member_data(t, c, block, seed, int(k)));
        sends.push_back(member_data(t, n, block, seed + 1, int(k)));
      }
      DeviceBuf shard(shards[rank]), full(HostBuf(t, n, block));
      g.all_gather(shard.view(), full.view());
      HostBuf f = full.to_host();
      std::vector<std::uint8_t> bytes;
      for (auto& s : shards) bytes.insert(bytes.end(), s.data.begin(), s.data.end());
      bytes.resize(f.data.size());
      ASSERT_EQ(f.data, bytes) << "all_gather " << dtype_name(t);

      DeviceBuf send(sends[rank]), recv(HostBuf(t, D * c, block));
      g.all_to_all(send.view(), recv.view());
      HostBuf r = recv.to_host();
      const std::size_t cb = data_bytes(t, c);
      for (std::size_t j = 0; j < D; ++j) {
        std::vector<std::uint8_t> padded(data_bytes(t, D * c), 0);
        std::memcpy(padded.data(), sends[j].data.data(), sends[j].data.size());
        if (t == DType::I4 && n % 2) padded[n / 2] &= 0x0f;
        ASSERT_EQ(0, std::memcmp(r.data.data() + j * cb, padded.data() + rank * cb, cb)) << "all_to_all " << dtype_name(t);
      }

      DeviceBuf b(rank == 0 ? sends[0] : HostBuf(t, n, block));
      g.broadcast(b.view(), 0);
      HostBuf bh = b.to_host();
      ASSERT_EQ(bh.data, sends[0].data);
      ASSERT_EQ(bh.scales, sends[0].scales);
    }
  g.barrier();
}

}  // namespace
}  // namespace strata::comm::testing
