#include "base/collective.hpp"

namespace strata {

std::string_view collective_key(Collective c) {
  switch (c) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllToAll: return "all_to_all";
  }
  return "?";
}

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::AllGather: return "all-gather";
    case Collective::ReduceScatter: return "reduce-scatter";
    case Collective::AllReduce: return "all-reduce";
    case Collective::AllToAll: return "all-to-all";
  }
  return "?";
}

}  // namespace strata
