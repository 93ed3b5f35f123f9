#pragma once
// Deterministic training tokens for the sharding runtime's multi-rank tests, the same under
// every strategy and parallel layout: a learnable stream ("next byte = previous + 1") with
// random jumps, one per (step, micro-batch, stream).
#include <cstdint>
#include <vector>

// Appends `batch` sequences of `seq` tokens and their targets for (step, micro, stream).
inline void append_test_batch(int step, int micro, int stream, int batch, int seq, std::vector<std::int32_t>& tok,
                              std::vector<std::int32_t>& tgt) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (1 + step * 1315423911ull + micro * 2654435761ull + stream * 97531ull);
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const int n = batch * seq;
  std::vector<std::int32_t> tokens(n + 1);
  tokens[0] = static_cast<std::int32_t>(next() % 256);
  for (int i = 1; i <= n; ++i)
    tokens[i] = next() % 5 == 0 ? static_cast<std::int32_t>(x % 256) : (tokens[i - 1] + 1) % 256;
  tok.insert(tok.end(), tokens.begin(), tokens.begin() + n);
  tgt.insert(tgt.end(), tokens.begin() + 1, tokens.end());
}
