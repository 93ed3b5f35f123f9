#include "base/cpu.hpp"

#include <cstdlib>
#include <string>

#include "base/error.hpp"

namespace strata {

static Isa probe() {
  __builtin_cpu_init();
  // Everything the per-ISA target pragmas of any kernel family enable (base/simd_*.inc).
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  if (avx2) return Isa::Avx2;
  return Isa::Scalar;
}

Isa detected_isa() {
  static const Isa isa = [] {
    Isa best = probe();
    if (const char* forced = std::getenv("STRATA_ISA")) {
      Isa want = parse_isa(forced);
      if (static_cast<int>(want) > static_cast<int>(best))
        throw Error("STRATA_ISA=" + std::string(forced) + ": this CPU supports at most " +
                    std::string(isa_name(best)));
      return want;
    }
    return best;
  }();
  return isa;
}

bool isa_available(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detected_isa()); }

void require_isa(std::string_view family, Isa isa) {
  if (!isa_available(isa))
    throw Error(std::string(family) + ": kernels for " + std::string(isa_name(isa)) + " requested, but only " +
                std::string(isa_name(detected_isa())) + " is available");
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_name(isa) == name) return isa;
  throw Error("STRATA_ISA: unknown instruction set '" + std::string(name) +
              "' (expected scalar, avx2 or avx512)");
}

}  // namespace strata
