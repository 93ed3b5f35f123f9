#include "comm/instrument/traffic.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

namespace {

// `steps` chunks to the right neighbour, as many from the left, interleaved as sent.
void ring(std::vector<Transfer>& out, int d, int m, int steps, std::uint64_t bytes) {
  if (d == 1) return;
  for (int s = 0; s < steps; ++s) {
    out.push_back({(m + 1) % d, true, bytes});
    out.push_back({(m - 1 + d) % d, false, bytes});
  }
}

}  // namespace

std::vector<Transfer> algorithm_transfers(Algorithm algorithm, int size, int index, std::uint64_t message_bytes,
                                          int root) {
  if (size < 1 || index < 0 || index >= size)
    throw Error(fmt::format("comm traffic: member index {} in a group of {}", index, size));
  const int d = size, m = index;
  std::vector<Transfer> out;
  switch (algorithm) {
    case Algorithm::RingAllGather:
    case Algorithm::RingReduceScatter: ring(out, d, m, d - 1, message_bytes); break;
    case Algorithm::RingAllReduce: ring(out, d, m, 2 * (d - 1), message_bytes); break;
    case Algorithm::PairwiseAllToAll:
      for (int s = 1; s < d; ++s) {
        out.push_back({(m + s) % d, true, message_bytes});
        out.push_back({(m - s + d) % d, false, message_bytes});
      }
      break;
    case Algorithm::BinomialBroadcast: {
      if (root < 0 || root >= d) throw Error(fmt::format("comm traffic: broadcast root {} in a group of {}", root, d));
      // Renumbered so the root is 0: v receives from v - 2^k (2^k its lowest set bit), then
      // sends to v + 2^j for each 2^j below that bit.
      const int v = (m - root + d) % d;
      int mask = 1;
      while (mask < d) {
        if (v & mask) {
          out.push_back({(v - mask + root) % d, false, message_bytes});
          break;
        }
        mask <<= 1;
      }
      for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < d) out.push_back({(v + mask + root) % d, true, message_bytes});
      break;
    }
    case Algorithm::DisseminationBarrier:
      for (int k = 1; k < d; k <<= 1) {
        out.push_back({(m + k) % d, true, 0});
        out.push_back({(m - k + d) % d, false, 0});
      }
      break;
  }
  return out;
}

void charge_transfers(Accounting& accounting, std::span<const Transfer> transfers,
                      std::span<const int> tier_of_member) {
  for (const Transfer& t : transfers) {
    const int tier = tier_of_member[std::size_t(t.peer)];
    if (t.sent)
      accounting.record_send(tier, t.bytes);
    else
      accounting.record_receive(tier, t.bytes);
  }
}

}  // namespace strata::comm
