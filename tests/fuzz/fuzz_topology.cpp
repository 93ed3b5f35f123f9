// Topology files and --tier overrides: TOML text -> Topology, overrides applied, then
// resolved for several world sizes and queried.
// Input: the topology file's text, then optionally NUL-separated override specs
// ("NAME.FIELD=VALUE", as given to --tier). A strata::Error is the expected answer to bad
// input; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "topo/topology.hpp"

namespace {

// Everything a resolved topology answers, for a few ranks.
void query(const strata::topo::Topology& topology) {
  const int world = topology.world_size();
  for (int t = 0; t < topology.num_tiers(); ++t) {
    (void)topology.num_domains(t);
    (void)topology.domain_of(world - 1, t);
  }
  for (int rank : {0, world / 2, world - 1}) (void)topology.tier_between(0, rank);
  (void)topology.tier_between(world - 1, world / 3);
  (void)topology.to_json().dump();
}

void resolve_and_query(strata::topo::Topology topology, int world_size) {
  try {
    topology.resolve(world_size);
    query(topology);
  } catch (const strata::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t toml_end = std::min(input.find('\0'), input.size());
  try {
    strata::topo::Topology topology = strata::topo::Topology::from_toml_string(input.substr(0, toml_end), "fuzz.toml");
    (void)topology.to_json().dump();  // unresolved: the outermost size is unknown
    for (std::size_t pos = toml_end; pos < input.size();) {
      const std::size_t end = std::min(input.find('\0', pos + 1), input.size());
      const std::string_view spec = input.substr(pos + 1, end - pos - 1);
      try {
        topology.apply_override(strata::topo::parse_tier_override(spec));
      } catch (const strata::Error&) {
        // A refused override leaves the topology as it was; the next ones still apply.
      }
      pos = end;
    }
    // The world sizes a file is likely to fit, the ones it surely does not, and the largest.
    for (int world : {1, 2, 3, 8, 12, 64, 1 << 30}) resolve_and_query(topology, world);
    for (int nodes : {1, 2, 5}) {
      try {
        resolve_and_query(topology, topology.world_size_for_nodes(nodes));
      } catch (const strata::Error&) {
      }
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
