// AVX-512 build of the kernels (16 floats a vector; masked loads and stores for tails).

// GCC 12's own AVX-512 headers build "undefined" vectors by self-initialisation, which its
// uninitialised-value warnings then flag at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cblas.h>
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/kernels.hpp"

// Everything below, and only it, may use AVX-512; kernels_for() calls it only on CPUs that
// have it. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

namespace strata::model::isa_avx512 {
namespace {

struct V {
  __m512 v;
};
constexpr int kW = 16;

inline __mmask16 lanes_below(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline V vzero() { return {_mm512_setzero_ps()}; }
inline V vset(float x) { return {_mm512_set1_ps(x)}; }
inline V vload(const float* p) { return {_mm512_loadu_ps(p)}; }
// Loads n < kW floats without touching memory past them; the other lanes get `fill`.
inline V vload_n(const float* p, int n, float fill = 0.f) {
  if (n == kW) return vload(p);
  return {_mm512_mask_loadu_ps(_mm512_set1_ps(fill), lanes_below(n), p)};
}
inline void vstore(float* p, V a) { _mm512_storeu_ps(p, a.v); }
inline void vstore_n(float* p, V a, int n) {
  if (n == kW)
    vstore(p, a);
  else
    _mm512_mask_storeu_ps(p, lanes_below(n), a.v);
}
inline V vkeep_n(V a, int n) { return n == kW ? a : V{_mm512_maskz_mov_ps(lanes_below(n), a.v)}; }
inline V operator+(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V operator-(V a, V b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V operator*(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V vdiv(V a, V b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V vfma(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline V vmax(V a, V b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V vmin(V a, V b) { return {_mm512_min_ps(a.v, b.v)}; }
inline V vround(V a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
inline V vpow2i(V n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}
inline float vhsum(V a) { return _mm512_reduce_add_ps(a.v); }
inline float vhmax(V a) { return _mm512_reduce_max_ps(a.v); }

#include "model/kernels_impl.inc"

}  // namespace

#pragma GCC pop_options

const Kernels& table() {
  static const Kernels k = make_table(Isa::Avx512);
  return k;
}

}  // namespace strata::model::isa_avx512
