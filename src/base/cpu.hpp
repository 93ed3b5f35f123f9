#pragma once
// Which vector instruction set the kernels use, chosen once at run time.
// STRATA_ISA=scalar|avx2|avx512 forces a path (tests use it to check each one).
#include <string_view>

namespace strata {

enum class Isa { Scalar, Avx2, Avx512 };

Isa detected_isa();            // best the CPU supports, capped by STRATA_ISA if set
std::string_view isa_name(Isa isa);
Isa parse_isa(std::string_view name);  // throws Error on an unknown name

}  // namespace strata
