// AVX2 + FMA build of the kernels (8 floats a vector).
#include <cblas.h>
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/kernels.hpp"

// Everything below, and only it, may use AVX2 and FMA; kernels_for() calls it only on CPUs
// that have them. Standard headers stay above, compiled for the baseline.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace strata::model::isa_avx2 {
namespace {

struct V {
  __m256 v;
};
constexpr int kW = 8;

inline __m256i lanes_below(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline V vzero() { return {_mm256_setzero_ps()}; }
inline V vset(float x) { return {_mm256_set1_ps(x)}; }
inline V vload(const float* p) { return {_mm256_loadu_ps(p)}; }
// Loads n < kW floats without touching memory past them; the other lanes get `fill`.
inline V vload_n(const float* p, int n, float fill = 0.f) {
  if (n == kW) return vload(p);
  const __m256i m = lanes_below(n);
  return {_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m))};
}
inline void vstore(float* p, V a) { _mm256_storeu_ps(p, a.v); }
inline void vstore_n(float* p, V a, int n) {
  if (n == kW)
    vstore(p, a);
  else
    _mm256_maskstore_ps(p, lanes_below(n), a.v);
}
inline V vkeep_n(V a, int n) {
  if (n == kW) return a;
  return {_mm256_and_ps(a.v, _mm256_castsi256_ps(lanes_below(n)))};
}
inline V operator+(V a, V b) { return {_mm256_add_ps(a.v, b.v)}; }
inline V operator-(V a, V b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline V operator*(V a, V b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline V vdiv(V a, V b) { return {_mm256_div_ps(a.v, b.v)}; }
inline V vfma(V a, V b, V c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline V vmax(V a, V b) { return {_mm256_max_ps(a.v, b.v)}; }
inline V vmin(V a, V b) { return {_mm256_min_ps(a.v, b.v)}; }
inline V vround(V a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
inline V vpow2i(V n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
inline float vhsum(V a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float vhmax(V a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#include "model/kernels_impl.inc"

}  // namespace

#pragma GCC pop_options

const Kernels& table() {
  static const Kernels k = make_table(Isa::Avx2);
  return k;
}

}  // namespace strata::model::isa_avx2
