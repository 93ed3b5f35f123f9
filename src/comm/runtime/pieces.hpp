#pragma once
// How much of a message strata's host collectives put on the wire at a time (comm/host: the
// ring pipeline, the pairwise all-to-all, the broadcast relay). Process-wide, like the
// collective timeout: set from the comm.piece_kib setting before the communicators are made,
// each of which takes it when it is made (Communicator::set_piece_bytes changes one).
#include <cstddef>

namespace strata::comm {

// Open MPI's TCP transport sends a message over its 64 KiB eager limit by rendezvous, the
// data following a round trip: pieces of 1 MiB keep that trip and each piece's reduction
// under the transfer of the pieces around it, at any message size.
inline constexpr std::size_t kDefaultPieceBytes = std::size_t(1) << 20;
// MPI counts a message's bytes in an int: no piece can be larger than 1 GiB usefully.
inline constexpr std::size_t kMaxPieceBytes = std::size_t(1) << 30;

// 0: whole messages. Throws Error above kMaxPieceBytes.
void set_piece_bytes(std::size_t bytes);
std::size_t piece_bytes();

}  // namespace strata::comm
