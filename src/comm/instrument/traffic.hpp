#pragma once
// The one count of a flat collective's traffic: the messages one member sends and receives
// in each of strata's host algorithms (communicator.hpp), by peer. The host Communicator
// accounts each message as it goes (measured); backends whose messages strata does not see
// (NCCL) charge these instead, so that both count a collective of the same size alike.
// tests/comm/accounting_mpi_test.cpp checks that they equal the host's measured figures for
// every algorithm, group and size.
#include <cstdint>
#include <span>
#include <vector>

#include "comm/instrument/accounting.hpp"

namespace strata::comm {

enum class Algorithm {
  RingAllGather,         // d-1 messages of one chunk to the right neighbour, d-1 from the left
  RingReduceScatter,     // the same
  RingAllReduce,         // twice that
  PairwiseAllToAll,      // one chunk to, and one from, every other member
  BinomialBroadcast,     // the whole buffer: once in (but at the root), then to each child
  DisseminationBarrier,  // ceil(log2 d) empty messages, round k to index + 2^k, from index - 2^k
};

struct Transfer {
  int peer = 0;             // member index
  bool sent = false;        // else received
  std::uint64_t bytes = 0;  // data and scales
  bool operator==(const Transfer&) const = default;
};

// What member `index` of a group of `size` sends and receives, in the algorithm's order.
// `message_bytes`: one chunk on the wire (data + scales, padding included) for the ring and
// pairwise algorithms, the whole buffer for the broadcast; the barrier's messages are empty.
// `root`: the broadcast's root (an index).
std::vector<Transfer> algorithm_transfers(Algorithm algorithm, int size, int index, std::uint64_t message_bytes,
                                          int root = 0);

// Charges `transfers` to `accounting`: each to the tier a message to or from that peer
// crosses (`tier_of_member[peer]`), one message per transfer sent.
void charge_transfers(Accounting& accounting, std::span<const Transfer> transfers,
                      std::span<const int> tier_of_member);

}  // namespace strata::comm
