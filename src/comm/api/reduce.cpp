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

// Runs `f` with the element type of `t` (an F32, BF16 or F16 above); only those reduce.
template <class F>
void with_elements(DType t, std::string_view what, F&& f) {
  switch (t) {
    case DType::F32: return f(F32{});
    case DType::BF16: return f(BF16{});
    case DType::F16: return f(F16{});
    default: throw Error(fmt::format("{}: cannot reduce {} elements (only fp32, bf16, fp16)", what, dtype_name(t)));
  }
}

}  // namespace

void add_elements(DType t, const void* a, const void* b, void* out, std::size_t n, float divisor) {
  with_elements(t, "add_elements", [&](auto e) { add_impl<decltype(e)>(a, b, out, n, divisor); });
}

void scale_elements(DType t, const void* x, void* out, std::size_t n, float divisor) {
  with_elements(t, "scale_elements", [&](auto e) { scale_impl<decltype(e)>(x, out, n, divisor); });
}

void sum_slots(DType t, const void* slots, int k, std::size_t n, void* out, float divisor) {
  with_elements(t, "sum_slots", [&](auto e) { sum_slots_impl<decltype(e)>(slots, k, n, out, divisor); });
}

}  // namespace strata::comm
