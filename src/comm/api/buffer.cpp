#include "comm/api/buffer.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

std::size_t granule(DType t, std::size_t block) { return is_quantized(t) ? block : 1; }

std::size_t chunk_count(std::size_t n, int d, std::size_t granule) {
  if (d <= 0) throw Error(fmt::format("chunk_count: group size {} must be positive", d));
  if (granule == 0) throw Error("chunk_count: granule must be positive");
  std::size_t per_rank = (n + std::size_t(d) - 1) / std::size_t(d);
  return (per_rank + granule - 1) / granule * granule;
}

std::size_t chunk_valid(std::size_t n, std::size_t c, int k) {
  std::size_t begin = std::size_t(k) * c;
  if (begin >= n) return 0;
  return std::min(c, n - begin);
}

}  // namespace strata::comm
