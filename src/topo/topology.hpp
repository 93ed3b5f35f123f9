#pragma once
// A cluster as an ordered list of tiers, innermost first. Tier t's `size` is how many
// domains of tier t-1 one tier-t domain holds (for tier 0: how many ranks). The outermost
// tier's size is whatever the world size leaves. Ranks map to domains in rank order:
// contiguous ranks share the innermost domain, as mpirun and srun place them by slot.
//
// Example (2 nodes x 2 GPUs x 2 dies = 8 ranks): tiers gpu(2), node(2), cluster(2).
//   domain_ranks(gpu)=2, domain_ranks(node)=4, domain_ranks(cluster)=8
//   rank 5: gpu domain 2, node domain 1; tier_between(4,5)=gpu, (5,7)=node, (1,5)=cluster.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::topo {

struct Tier {
  std::string name;
  int size = 0;                 // 0 for the outermost tier until resolve()
  double bandwidth_GBps = 0;    // a pair's rate: one rank alone, per direction
  double latency_us = 0;
  double efficiency = 1.0;      // achievable fraction of bandwidth_GBps for large messages
  std::string source;           // where the figures come from (presets cite datasheets)
  // The ports (NICs or links) one domain of the tier inside has onto this tier, and the rate
  // of each, per direction. Every rank of that domain crosses this tier at once (each runs
  // the same op over its own across-group), so they share these ports. 0: not described,
  // bandwidth_GBps alone applies (a rank's own link).
  int ports = 0;
  double port_GBps = 0;
};

// A tier described from datasheets, as the presets and `strata plan --cluster` build them:
// the link's rate a rank (per direction), an estimated latency of one small GPU-to-GPU
// message over it, the efficiency NCCL/RCCL bus bandwidth reaches at large messages (0.8),
// the sources cited; ports (NICs) a domain shares, where given.
struct LinkEstimate {  // the latency strata assumes for a kind of link, and why
  double latency_us;
  std::string_view note;
};
inline constexpr LinkEstimate kDieLink{2, "estimate for an on-package GPU-to-GPU message"};
inline constexpr LinkEstimate kNodeLink{3, "estimate for an NVLink GPU-to-GPU message (~2-3 us)"};
inline constexpr LinkEstimate kNetworkLink{5, "estimate for an inter-node GPU-buffer message over InfiniBand"};
struct TierPorts {  // a tier's ports: how many one inner domain has, the rate of each, the source
  int count = 0;
  double GBps = 0;
  std::string_view source;
};
Tier datasheet_tier(std::string name, int size, double bandwidth_GBps, std::string_view link_source,
                    LinkEstimate latency, TierPorts ports = {});

struct TierOverride {  // --tier NAME.FIELD=VALUE on the command line
  std::string tier, field, value;
};
// Splits "NAME.FIELD=VALUE"; throws Error quoting the spec when it is not of that form.
TierOverride parse_tier_override(std::string_view spec);

class Topology {
 public:
  Topology() = default;
  explicit Topology(std::vector<Tier> tiers, std::string name = "custom");

  // Presets: frontier, dgx-a100, dgx-h100 (outermost tier "cluster"), and "host" (this
  // machine, detected with MPI's shared-memory split and hwloc; needs MPI initialised).
  static Topology preset(std::string_view name);
  static std::vector<std::string> preset_names();
  static Topology from_toml_file(const std::filesystem::path& path);  // errors name file + field
  static Topology from_toml_string(std::string_view text, std::string_view origin = "<string>");
  // NAME of a preset or a path to a TOML file.
  static Topology load(std::string_view name_or_path);

  void apply_override(const TierOverride& o);  // throws Error naming tier and field
  // Fixes the outermost tier's size for a world of `world_size` ranks (or checks it, if it
  // was set). Refuses a world size the inner tiers do not divide, with the arithmetic in
  // the message. May be called again with another world size.
  void resolve(int world_size);
  bool resolved() const { return world_size_ > 0; }
  // A world size that makes `nodes` domains of the second-outermost tier (--nodes N).
  int world_size_for_nodes(int nodes) const;
  // Ranks in one domain of the second-outermost tier ("ranks per node"); 1 for one tier.
  int ranks_per_outer_domain() const;

  const std::string& name() const { return name_; }
  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  const Tier& tier(int t) const { return tiers_.at(t); }
  const std::vector<Tier>& tiers() const { return tiers_; }
  std::vector<std::string> tier_names() const;  // inner first
  int outermost() const { return num_tiers() - 1; }
  int world_size() const { return world_size_; }
  // Index of a tier by name; throws Error listing the tier names when unknown.
  int tier_index(std::string_view name) const;
  std::optional<int> find_tier(std::string_view name) const;

  int domain_ranks(int t) const;  // ranks in one domain of tier t; t = -1: 1
  // What one rank gets across tier t while every rank of its tier t-1 domain crosses it at
  // once: bandwidth_GBps (a pair's rate), capped by the ports' total over those ranks.
  double rank_bandwidth_GBps(int t) const;
  int domain_of(int rank, int t) const { return rank / domain_ranks(t); }
  int num_domains(int t) const { return world_size_ / domain_ranks(t); }
  // The innermost tier whose domain holds both ranks: the outermost link a message crosses
  // (0 for a rank and itself). Throws Error for a rank outside the world.
  int tier_between(int rank_a, int rank_b) const;

  nlohmann::json to_json() const;

 private:
  Topology(std::vector<Tier> tiers, std::string name, std::string origin);
  void validate() const;
  std::string where(int t) const;  // "FILE: tiers[1] ('node')" for error messages

  std::string name_ = "custom";
  std::string origin_ = "topology 'custom'";  // the file or preset, for error messages
  std::vector<Tier> tiers_;
  int outermost_size_given_ = 0;  // the outermost size the file or an override asked for; 0: any
  int world_size_ = 0;
};

}  // namespace strata::topo
