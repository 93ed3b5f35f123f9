// Scalar build of the kernels: the path for x86-64 CPUs without AVX2 (and the reference the
// vector paths are compared with in tests).
#include <cblas.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/kernels.hpp"

namespace strata::model::isa_scalar {
namespace {

struct V {
  float v;
};
constexpr int kW = 1;

inline V vzero() { return {0.f}; }
inline V vset(float x) { return {x}; }
inline V vload_n(const float* p, int, float = 0.f) { return {*p}; }  // n is always kW here
inline void vstore_n(float* p, V a, int) { *p = a.v; }
inline V vkeep_n(V a, int) { return a; }
inline V operator+(V a, V b) { return {a.v + b.v}; }
inline V operator-(V a, V b) { return {a.v - b.v}; }
inline V operator*(V a, V b) { return {a.v * b.v}; }
inline V vdiv(V a, V b) { return {a.v / b.v}; }
inline V vfma(V a, V b, V c) { return {a.v * b.v + c.v}; }
inline V vmax(V a, V b) { return {a.v > b.v ? a.v : b.v}; }
inline V vmin(V a, V b) { return {a.v < b.v ? a.v : b.v}; }
inline V vround(V a) { return {std::nearbyint(a.v)}; }
inline V vpow2i(V n) {
  return {std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<int>(n.v) + 127) << 23)};
}
inline float vhsum(V a) { return a.v; }
inline float vhmax(V a) { return a.v; }

#include "model/kernels_impl.inc"

}  // namespace

const Kernels& table() {
  static const Kernels k = make_table(Isa::Scalar);
  return k;
}

}  // namespace strata::model::isa_scalar
