#pragma once
// Which vector instruction set the kernels use, chosen once at run time.
// STRATA_ISA=scalar|avx2|avx512 forces a path (tests use it to check each one).
//
// Every kernel family (model, quant, optim) follows one pattern: its kernels are written once
// in a single-source `*_impl.inc` and compiled three times, by a per-ISA .cpp that opens the
// ISA's target pragmas, includes its vector type V (base/simd_<isa>.inc) where the .inc is
// written over it, supplies the per-ISA primitives the .inc asks for (hot loops that portable
// V code runs slower), and includes the .inc. Each family's table is picked
// with pick_for_isa().
#include <string_view>

namespace strata {

enum class Isa { Scalar, Avx2, Avx512 };

Isa detected_isa();            // best the CPU supports, capped by STRATA_ISA if set
std::string_view isa_name(Isa isa);
Isa parse_isa(std::string_view name);  // throws Error on an unknown name

// Whether kernels for `isa` may run here: the CPU has it and STRATA_ISA does not cap it.
bool isa_available(Isa isa);

// Throws Error naming `family` ("model", "quant", "optim") if `isa` is not available.
void require_isa(std::string_view family, Isa isa);

// The table of a family that `isa` selects, after require_isa(). Takes the three tables'
// getters, not the tables: only the chosen one may run, as the others' code may use
// instructions this CPU lacks.
// Declares `const Table& table();` in the namespaces isa_scalar, isa_avx2 and isa_avx512 of
// the namespace it stands in: the getters pick_for_isa() takes, each family's
// kernels_<isa>.cpp defining its own.
#define STRATA_ISA_TABLES(Table)                 \
  namespace isa_scalar { const Table& table(); } \
  namespace isa_avx2 { const Table& table(); }   \
  namespace isa_avx512 { const Table& table(); }

template <class Table>
const Table& pick_for_isa(std::string_view family, Isa isa, const Table& (*scalar)(), const Table& (*avx2)(),
                          const Table& (*avx512)()) {
  require_isa(family, isa);
  switch (isa) {
    case Isa::Avx512: return avx512();
    case Isa::Avx2: return avx2();
    case Isa::Scalar: break;
  }
  return scalar();
}

}  // namespace strata
