#include "comm/runtime/pieces.hpp"

#include <atomic>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

namespace {
std::atomic<std::size_t> g_piece_bytes{kDefaultPieceBytes};
}  // namespace

void set_piece_bytes(std::size_t bytes) {
  if (bytes > kMaxPieceBytes)
    throw Error(fmt::format("comm: pieces of {} bytes: at most {} (1 GiB)", bytes, kMaxPieceBytes));
  g_piece_bytes.store(bytes, std::memory_order_relaxed);
}

std::size_t piece_bytes() { return g_piece_bytes.load(std::memory_order_relaxed); }

}  // namespace strata::comm
