#include "comm/api/reduce.hpp"

#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/half.hpp"

namespace strata::comm {

namespace {

struct F32 {
  using T = float;
  static float load(T v) { return v; }
  static T store(float f) { return f; }
};
struct BF16 {
  using T = std::uint16_t;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float f) { return float_to_bf16(f); }
};
struct F16 {
  using T = std::uint16_t;
  static float load(T v) { return fp16_to_float(v); }
  static T store(float f) { return float_to_fp16(f); }
};

// Element by element, each read before its write, so out may alias an input.
template <class E>
void add_impl(const void* a, const void* b, void* out, std::size_t n, float divisor) {
  auto* pa = static_cast<const typename E::T*>(a);
  auto* pb = static_cast<const typename E::T*>(b);
  auto* po = static_cast<typename E::T*>(out);
  if (divisor == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) po[i] = E::store(E::load(pa[i]) + E::load(pb[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) po[i] = E::store((E::load(pa[i]) + E::load(pb[i])) / divisor);
  }
}

template <class E>
void scale_impl(const void* x, void* out, std::size_t n, float divisor) {
  auto* px = static_cast<const typename E::T*>(x);
  auto* po = static_cast<typename E::T*>(out);
  if (divisor == 1.0f) {
    if (px != po) std::memmove(po, px, n * sizeof(typename E::T));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) po[i] = E::store(E::load(px[i]) / divisor);
}

template <class E>
void sum_slots_impl(const void* slots, int k, std::size_t n, void* out, float divisor) {
  auto* ps = static_cast<const typename E::T*>(slots);
  auto* po = static_cast<typename E::T*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    float s = E::load(ps[i]);
    for (int j = 1; j < k; ++j) s += E::load(ps[std::size_t(j) * n + i]);
    po[i] = E::store(divisor == 1.0f ? s : s / divisor);
  }
}

[[noreturn]] void refuse(std::string_view what, DType t) {
  throw Error(fmt::format("{}: cannot reduce {} elements (only fp32, bf16, fp16)", what, dtype_name(t)));
}

}  // namespace

void add_elements(DType t, const void* a, const void* b, void* out, std::size_t n, float divisor) {
  switch (t) {
    case DType::F32: return add_impl<F32>(a, b, out, n, divisor);
    case DType::BF16: return add_impl<BF16>(a, b, out, n, divisor);
    case DType::F16: return add_impl<F16>(a, b, out, n, divisor);
    default: refuse("add_elements", t);
  }
}

void scale_elements(DType t, const void* x, void* out, std::size_t n, float divisor) {
  switch (t) {
    case DType::F32: return scale_impl<F32>(x, out, n, divisor);
    case DType::BF16: return scale_impl<BF16>(x, out, n, divisor);
    case DType::F16: return scale_impl<F16>(x, out, n, divisor);
    default: refuse("scale_elements", t);
  }
}

void sum_slots(DType t, const void* slots, int k, std::size_t n, void* out, float divisor) {
  switch (t) {
    case DType::F32: return sum_slots_impl<F32>(slots, k, n, out, divisor);
    case DType::BF16: return sum_slots_impl<BF16>(slots, k, n, out, divisor);
    case DType::F16: return sum_slots_impl<F16>(slots, k, n, out, divisor);
    default: refuse("sum_slots", t);
  }
}

}  // namespace strata::comm
