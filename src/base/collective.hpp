#pragma once
// The one vocabulary of collective kinds, from the model's tensor-parallel calls through the
// schedule's ops and comm's chain steps to the planner's prices and the calibration files'
// keys. In a chain of per-level steps (comm/compose.hpp) an all-to-all is a reduction: each
// member receives its chunk of every member's buffer and sums them in fp32 in member order
// (ZeRO++ qgZ's, which quantized wires use since int8/int4 cannot be summed on the wire).
#include <array>
#include <string_view>

namespace strata {

enum class Collective { AllGather, ReduceScatter, AllReduce, AllToAll };
inline constexpr std::array<Collective, 4> kCollectives = {Collective::AllGather, Collective::ReduceScatter,
                                                           Collective::AllReduce, Collective::AllToAll};

std::string_view collective_key(Collective c);   // "all_gather", ...: calibration files' keys, benchmark names
std::string_view collective_name(Collective c);  // "all-gather", ...: the schedule's names

}  // namespace strata
