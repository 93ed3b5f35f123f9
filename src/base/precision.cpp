#include "base/precision.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata {

std::string_view precision_name(Precision precision) { return precision == Precision::BF16 ? "bf16" : "fp32"; }

Precision precision_named(std::string_view name, std::string_view field) {
  if (name == "fp32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  throw Error(fmt::format("{} = '{}': must be fp32 or bf16", field, name));
}

}  // namespace strata
