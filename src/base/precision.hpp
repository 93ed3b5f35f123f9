#pragma once
// The one precision of compute, for the runtime (`strata train --precision`) and the planner
// (`strata plan --precision`) alike: fp32 throughout, or bf16 weights and activations in the
// matrix products with fp32 accumulation, master weights and optimizer state (mixed precision
// as FSDP and DeepSpeed run it).
#include <string_view>

#include "base/dtype.hpp"

namespace strata {

enum class Precision { F32, BF16 };
inline DType compute_dtype(Precision p) { return p == Precision::BF16 ? DType::BF16 : DType::F32; }  // in compute

std::string_view precision_name(Precision precision);  // "fp32" or "bf16"
// "fp32" or "bf16"; throws Error naming `field` for anything else.
Precision precision_named(std::string_view name, std::string_view field);

}  // namespace strata
