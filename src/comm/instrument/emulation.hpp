#pragma once
// Link emulation (off by default): on a single host every message is really a memcpy, so a
// slow inter-node tier would be invisible. With emulation on, the sender holds each message
// back until
//     t_send_start + scale * (latency_us * 1e-6 + bytes / (bandwidth_GBps * 1e9 * efficiency))
// of the tier the message crosses (GB = 1e9 bytes), then hands it to MPI. A rank's
// messages leave one after another (one communication thread), so each rank's outgoing
// link is a serial resource and a collective's time on a rank is at least the sum of the
// link times of the messages it sends; the real copy comes on top. `scale` multiplies every
// emulated time (0.1 = links ten times faster than described, to shorten demos).
// Holding back sleeps for the bulk of the wait and yields the core for the last stretch,
// and never releases a message before its due time.
#include <chrono>
#include <cstddef>

#include "topo/topology.hpp"

namespace strata::comm {

struct EmulationOptions {
  bool enabled = false;
  double scale = 1.0;  // multiplies every emulated link time
};

// The alpha-beta time of one message of `bytes` over `tier`, in seconds (scale applied).
double link_seconds(const topo::Tier& tier, std::size_t bytes, double scale = 1.0);

// Blocks until `due` (never returns earlier).
void hold_until(std::chrono::steady_clock::time_point due);

}  // namespace strata::comm
