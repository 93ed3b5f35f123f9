#pragma once
// A small, self-contained random number generator: xoshiro256** seeded through splitmix64.
// Its whole state is four uint64s, so checkpoints can save and restore it exactly, and its
// output depends on nothing but the seed (no std:: distributions, whose results differ
// between standard libraries).
#include <array>
#include <cmath>
#include <cstdint>

#include "base/error.hpp"

namespace strata {

// One step of splitmix64: a strong 64-bit mixer, also handy for deriving stream seeds.
inline std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  // `stream` selects an independent sequence for the same seed (e.g. one per tensor).
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0) {
    std::uint64_t x = seed;
    std::uint64_t mixed = splitmix64(x) ^ (stream * 0xd1342543de82ef95ULL);
    for (auto& s : state_) s = splitmix64(mixed);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), unbiased (rejection on the low end), n > 0.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      std::uint64_t r = next_u64();
      if (r >= threshold) return r % n;
    }
  }

  // Two independent standard normal samples (Box-Muller).
  std::array<double, 2> normal_pair() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586476925 * u2;
    return {radius * std::cos(angle), radius * std::sin(angle)};
  }
  double normal() { return normal_pair()[0]; }
  // Moves past n normal_pair() calls without computing them: each takes two draws.
  void skip_normal_pairs(std::uint64_t n) {
    for (std::uint64_t i = 0; i < 2 * n; ++i) next_u64();
  }

  const State& state() const { return state_; }
  // Restores a state from state(); the all-zero state would emit zeros forever.
  void set_state(const State& s) {
    if (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0)
      throw Error("rng: the all-zero state is not a valid xoshiro256** state");
    state_ = s;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  State state_{};
};

}  // namespace strata
