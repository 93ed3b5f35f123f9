#include "topo/topology.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/toml.hpp"
#include "base/fileio.hpp"
#include "topo/host.hpp"

namespace strata::topo {

namespace {

constexpr std::string_view kTierFields[] = {"name",       "size",  "bandwidth_GBps", "latency_us",
                                            "efficiency", "ports", "port_GBps",      "source"};
// Larger worlds than this are surely a typo, and keep every rank product inside an int.
constexpr std::int64_t kMaxRanks = std::int64_t{1} << 30;

bool valid_tier_name(std::string_view name) {
  if (name.empty() || name == "none") return false;  // "none" means "replicated" to the sharding layer
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// "gpu 2 x node 4": the sizes of tiers [0, end).
std::string size_breakdown(const std::vector<Tier>& tiers, int end) {
  std::vector<std::string> parts;
  for (int t = 0; t < end; ++t) parts.push_back(fmt::format("{} {}", tiers[t].name, tiers[t].size));
  return fmt::format("{}", fmt::join(parts, " x "));
}

// Figures from vendor datasheets and system guides (shared/reference/hardware.md). The
// efficiency 0.8 is the middle of the 70-90% of link rate that NCCL/RCCL all-gather bus
// bandwidth reaches at large messages. Latencies are estimates of one small GPU-to-GPU
// message on that link (a few µs), not datasheet figures.
constexpr double kPresetEfficiency = 0.8;
constexpr std::string_view kEfficiencyNote =
    "efficiency 0.8: NCCL/RCCL bus bandwidth reaches ~70-90% of link rate at large messages";

std::vector<Tier> frontier_tiers() {
  return {
      datasheet_tier("gpu", 2, 200,
                     "OLCF Frontier User Guide / AMD MI250X datasheet: the 2 GCDs of one MI250X are joined "
                     "by 4 Infinity Fabric links of 50 GB/s, ~200 GB/s per direction",
                     kDieLink),
      // Between packages each GCD has its own 1-2 links: no port is shared, the pair rate stands.
      datasheet_tier("node", 4, 50,
                     "OLCF Frontier User Guide: 1-2 Infinity Fabric links of 50 GB/s between MI250X packages "
                     "(50-100 GB/s); the low end, ~50 GB/s, is taken",
                     {3, "estimate for an intra-node GPU-to-GPU message"}),
      datasheet_tier("cluster", 0, 25,
                     "OLCF Frontier User Guide: Slingshot-11, 4 NICs of 200 Gb/s a node, one per MI250X: "
                     "~25 GB/s a NIC (its 2 GCDs share it when both send at once)",
                     {5, "estimate for an inter-node GPU-buffer message over Slingshot"},
                     {4, 25, "OLCF Frontier User Guide: 4 Slingshot-11 NICs of 200 Gb/s = 25 GB/s a node, "
                             "shared by its 8 GCDs: 12.5 GB/s a GCD when all cross at once"}),
  };
}

std::vector<Tier> dgx_tiers(std::string_view gen) {
  if (gen == "a100")
    return {
        datasheet_tier("node", 8, 300,
                       "NVIDIA DGX A100 / A100 datasheets: NVLink3 through NVSwitch, 12 links a GPU, "
                       "600 GB/s bidirectional = ~300 GB/s per direction",
                       kNodeLink),
        datasheet_tier("cluster", 0, 25,
                       "NVIDIA DGX A100 datasheet: 8 HDR InfiniBand NICs of 200 Gb/s a node, one per GPU: "
                       "~25 GB/s a GPU",
                       kNetworkLink,
                       {8, 25, "NVIDIA DGX A100 datasheet: 8 single-port HDR 200 Gb/s NICs for the compute "
                               "fabric, one a GPU"}),
    };
  return {
      datasheet_tier("node", 8, 450,
                     "NVIDIA DGX H100 / H100 datasheets: NVLink4 through NVSwitch, 18 links a GPU, "
                     "900 GB/s bidirectional = ~450 GB/s per direction",
                     kNodeLink),
      datasheet_tier("cluster", 0, 50,
                     "NVIDIA DGX H100 datasheet: 8 NDR InfiniBand NICs of 400 Gb/s a node, one per GPU: "
                     "~50 GB/s a GPU",
                     kNetworkLink,
                     {8, 50, "NVIDIA DGX H100 datasheet: 8 ConnectX-7 NDR 400 Gb/s ports for the compute "
                             "fabric, one a GPU"}),
  };
}

}  // namespace

Tier datasheet_tier(std::string name, int size, double bandwidth, std::string_view link, LinkEstimate latency,
                    TierPorts ports) {
  std::string source = fmt::format("{}; latency {} us: {}; {}", link, latency.latency_us, latency.note, kEfficiencyNote);
  if (ports.count > 0) source += fmt::format("; ports: {} x {} GB/s ({})", ports.count, ports.GBps, ports.source);
  return Tier{std::move(name), size,        bandwidth,  latency.latency_us, kPresetEfficiency,
              std::move(source), ports.count, ports.GBps};
}

TierOverride parse_tier_override(std::string_view spec) {
  auto dot = spec.find('.');
  auto eq = spec.find('=');
  if (dot == std::string_view::npos || eq == std::string_view::npos || dot == 0 || eq < dot + 2)
    throw Error(fmt::format("--tier '{}': expected NAME.FIELD=VALUE, e.g. node.bandwidth_GBps=100", spec));
  return {std::string(spec.substr(0, dot)), std::string(spec.substr(dot + 1, eq - dot - 1)),
          std::string(spec.substr(eq + 1))};
}

Topology::Topology(std::vector<Tier> tiers, std::string name)
    : Topology(std::move(tiers), name, fmt::format("topology '{}'", name)) {}

Topology::Topology(std::vector<Tier> tiers, std::string name, std::string origin)
    : name_(std::move(name)), origin_(std::move(origin)), tiers_(std::move(tiers)) {
  validate();
  outermost_size_given_ = tiers_.back().size;
}

std::string Topology::where(int t) const {
  return fmt::format("{}: tiers[{}] ('{}')", origin_, t, tiers_[t].name);
}

void Topology::validate() const {
  if (tiers_.empty()) throw Error(fmt::format("{}: no tiers (add at least one [[tiers]] table)", origin_));
  std::set<std::string_view> seen;
  std::int64_t inner_ranks = 1;
  for (int t = 0; t < num_tiers(); ++t) {
    const Tier& tier = tiers_[t];
    if (!valid_tier_name(tier.name))
      throw Error(
          fmt::format("{}: tiers[{}]: name '{}' must be non-empty letters, digits, '_' or '-' "
                      "(and not 'none', which means replicated)",
                      origin_, t, tier.name));
    if (!seen.insert(tier.name).second)
      throw Error(fmt::format("{}: duplicate tier name (tiers: {})", where(t), fmt::join(tier_names(), ", ")));
    bool outer = t == outermost();
    if (tier.size < 0 || (tier.size == 0 && !outer))
      throw Error(fmt::format("{}: size = {} must be positive", where(t), tier.size));
    if (!outer) {
      inner_ranks *= tier.size;
      if (inner_ranks > kMaxRanks)
        throw Error(
            fmt::format("{}: size = {}: the tiers up to here hold over 2^30 ranks", where(t), tier.size));
    }
    if (!(tier.bandwidth_GBps > 0) || !std::isfinite(tier.bandwidth_GBps))
      throw Error(fmt::format("{}: bandwidth_GBps = {} must be positive", where(t), tier.bandwidth_GBps));
    if (!(tier.latency_us >= 0) || !std::isfinite(tier.latency_us))
      throw Error(fmt::format("{}: latency_us = {} must be zero or positive", where(t), tier.latency_us));
    if (!(tier.efficiency > 0 && tier.efficiency <= 1))
      throw Error(fmt::format("{}: efficiency = {} must be in (0, 1]", where(t), tier.efficiency));
    if (tier.ports < 0) throw Error(fmt::format("{}: ports = {} must be positive", where(t), tier.ports));
    if (tier.ports > 0 && (!(tier.port_GBps > 0) || !std::isfinite(tier.port_GBps)))
      throw Error(fmt::format("{}: port_GBps = {} must be positive (the rate of each of its {} ports)", where(t),
                              tier.port_GBps, tier.ports));
    if (!(tier.port_GBps >= 0) || !std::isfinite(tier.port_GBps))
      throw Error(fmt::format("{}: port_GBps = {} must be positive", where(t), tier.port_GBps));
  }
}

std::vector<std::string> Topology::preset_names() { return {"frontier", "dgx-a100", "dgx-h100", "host"}; }

Topology Topology::preset(std::string_view name) {
  std::string origin = fmt::format("preset '{}'", name);
  if (name == "frontier") return Topology(frontier_tiers(), std::string(name), origin);
  if (name == "dgx-a100") return Topology(dgx_tiers("a100"), std::string(name), origin);
  if (name == "dgx-h100") return Topology(dgx_tiers("h100"), std::string(name), origin);
  if (name == "host") return Topology(host_tiers(detect_host()), std::string(name), origin);
  throw Error(fmt::format("topology: unknown preset '{}' (presets: {}; or give a .toml file)", name,
                          fmt::join(preset_names(), ", ")));
}

Topology Topology::from_toml_file(const std::filesystem::path& path) {
  return from_toml_string(read_file_text(path), path.string());
}

Topology Topology::from_toml_string(std::string_view text, std::string_view origin) {
  const toml::table doc = parse_toml(text, origin);
  for (auto&& [key, node] : doc) {
    if (key.str() != "tiers")
      throw Error(fmt::format("{}: unknown top-level key '{}' (a topology file holds only [[tiers]])", origin,
                              key.str()));
  }
  const toml::array* array = doc["tiers"].as_array();
  if (!array || array->empty())
    throw Error(fmt::format("{}: no tiers (add at least one [[tiers]] table)", origin));

  std::vector<Tier> tiers;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::table* table = (*array)[i].as_table();
    if (!table) throw Error(fmt::format("{}: tiers[{}] must be a table ([[tiers]])", origin, i));
    const bool outer = i + 1 == array->size();
    Tier tier;
    if (auto name = (*table)["name"].value<std::string>()) {
      tier.name = *name;
    } else {
      throw Error(fmt::format("{}: tiers[{}]: missing name (a string)", origin, i));
    }
    const std::string where = fmt::format("{}: tiers[{}] ('{}')", origin, i, tier.name);
    for (auto&& [key, node] : *table) {
      if (std::find(std::begin(kTierFields), std::end(kTierFields), key.str()) == std::end(kTierFields))
        throw Error(fmt::format("{}: unknown field '{}' (fields: {})", where, key.str(),
                                fmt::join(kTierFields, ", ")));
    }
    auto number = [&](std::string_view field, bool required) -> std::optional<double> {
      const toml::node_view<const toml::node> node = (*table)[field];
      if (!node) {
        if (required) throw Error(fmt::format("{}: missing {}", where, field));
        return std::nullopt;
      }
      if (!node.is_number()) throw Error(fmt::format("{}: {} must be a number", where, field));
      // Not node.value<double>(): it is empty for an integer that a double cannot hold exactly.
      if (const auto* integer = node.as_integer()) return static_cast<double>(integer->get());
      return node.as_floating_point()->get();
    };
    if (const auto size = (*table)["size"]; size) {
      if (!size.is_integer()) throw Error(fmt::format("{}: size must be an integer", where));
      std::int64_t v = *size.value<std::int64_t>();
      if (v <= 0) throw Error(fmt::format("{}: size = {} must be positive", where, v));
      if (v > kMaxRanks) throw Error(fmt::format("{}: size = {} is too large", where, v));
      tier.size = static_cast<int>(v);
    } else if (!outer) {
      throw Error(
          fmt::format("{}: missing size (only the outermost tier may leave it to the world size)", where));
    }
    tier.bandwidth_GBps = *number("bandwidth_GBps", true);
    tier.latency_us = *number("latency_us", true);
    tier.efficiency = number("efficiency", false).value_or(1.0);
    if (const auto ports = (*table)["ports"]; ports) {
      if (!ports.is_integer()) throw Error(fmt::format("{}: ports must be an integer", where));
      const std::int64_t v = *ports.value<std::int64_t>();
      if (v <= 0 || v > kMaxRanks) throw Error(fmt::format("{}: ports = {} must be positive", where, v));
      tier.ports = static_cast<int>(v);
      if (!(*table)["port_GBps"]) throw Error(fmt::format("{}: missing port_GBps (the rate of each port)", where));
    }
    tier.port_GBps = number("port_GBps", false).value_or(0.0);
    if (tier.ports == 0 && (*table)["port_GBps"])
      throw Error(fmt::format("{}: port_GBps without ports (how many ports share the tier)", where));
    if (const auto source = (*table)["source"]; source) {
      if (!source.is_string()) throw Error(fmt::format("{}: source must be a string", where));
      tier.source = *source.value<std::string>();
    }
    tiers.push_back(std::move(tier));
  }
  std::string name = std::filesystem::path(origin).stem().string();
  return Topology(std::move(tiers), name.empty() ? std::string("custom") : name, std::string(origin));
}

Topology Topology::load(std::string_view name_or_path) {
  auto presets = preset_names();
  if (std::find(presets.begin(), presets.end(), name_or_path) != presets.end()) return preset(name_or_path);
  std::filesystem::path path(name_or_path);
  std::error_code ec;  // a name the OS refuses (too long) is a missing file, not an exception
  if (!std::filesystem::exists(path, ec))
    throw Error(fmt::format("topology: '{}' is neither a preset ({}) nor an existing file", name_or_path,
                            fmt::join(presets, ", ")));
  return from_toml_file(path);
}

void Topology::apply_override(const TierOverride& o) {
  const std::string spec = fmt::format("--tier {}.{}={}", o.tier, o.field, o.value);
  auto t = find_tier(o.tier);
  if (!t)
    throw Error(
        fmt::format("{}: {}: unknown tier '{}' (tiers: {})", origin_, spec, o.tier, fmt::join(tier_names(), ", ")));
  Topology changed = *this;
  Tier& tier = changed.tiers_[*t];
  auto number = [&](double& field) {
    if (!parse_whole(o.value, field))
      throw Error(fmt::format("{}: {}: {} must be a number, not '{}'", origin_, spec, o.field, o.value));
  };
  if (o.field == "size") {
    int size = 0;
    if (!parse_whole(o.value, size) || size <= 0)
      throw Error(fmt::format("{}: {}: size must be a positive integer, not '{}'", origin_, spec, o.value));
    tier.size = size;
    if (*t == outermost()) changed.outermost_size_given_ = size;
    // A new size invalidates the rank arithmetic: the caller resolves again.
    changed.world_size_ = 0;
    changed.tiers_.back().size = changed.outermost_size_given_;
  } else if (o.field == "bandwidth_GBps") {
    number(tier.bandwidth_GBps);
  } else if (o.field == "latency_us") {
    number(tier.latency_us);
  } else if (o.field == "efficiency") {
    number(tier.efficiency);
  } else if (o.field == "ports") {
    if (!parse_whole(o.value, tier.ports) || tier.ports < 0)
      throw Error(fmt::format("{}: {}: ports must be a whole number, not '{}'", origin_, spec, o.value));
  } else if (o.field == "port_GBps") {
    number(tier.port_GBps);
  } else if (o.field == "source") {
    // The source goes into JSON (`strata topo --json`, run summaries), which holds only UTF-8.
    try {
      (void)nlohmann::json(o.value).dump();
    } catch (const nlohmann::json::type_error&) {
      throw Error(fmt::format("{}: --tier {}.source: not UTF-8 text", origin_, o.tier));
    }
    tier.source = o.value;
  } else {
    throw Error(
        fmt::format("{}: {}: unknown field '{}' (fields: size, bandwidth_GBps, latency_us, efficiency, "
                    "ports, port_GBps, source)",
                    origin_, spec, o.field));
  }
  changed.origin_ = fmt::format("{} with {}", origin_, spec);
  changed.validate();
  changed.origin_ = origin_;
  *this = std::move(changed);
}

int Topology::ranks_per_outer_domain() const { return domain_ranks(outermost() - 1); }

void Topology::resolve(int world_size) {
  if (world_size <= 0) throw Error(fmt::format("{}: world size {} must be positive", origin_, world_size));
  const int inner = ranks_per_outer_domain();
  const Tier& outer = tiers_.back();
  const std::string per = num_tiers() > 1 ? tiers_[outermost() - 1].name : "rank";
  if (world_size % inner != 0)
    throw Error(fmt::format("{}: world size {} is not a multiple of {} ranks per {} ({})", origin_,
                            world_size, inner, per, size_breakdown(tiers_, outermost())));
  if (outermost_size_given_ > 0 && outermost_size_given_ != world_size / inner)
    throw Error(fmt::format("{}: tier '{}' size = {} needs world size {} ({} ranks per {} x {}), not {}",
                            origin_, outer.name, outermost_size_given_,
                            static_cast<std::int64_t>(inner) * outermost_size_given_, inner, per,
                            outermost_size_given_, world_size));
  tiers_.back().size = world_size / inner;
  world_size_ = world_size;
}

int Topology::world_size_for_nodes(int nodes) const {
  if (num_tiers() < 2)
    throw Error(
        fmt::format("{}: --nodes needs at least two tiers (nodes are domains of the tier inside '{}')",
                    origin_, tiers_.back().name));
  if (nodes <= 0) throw Error(fmt::format("{}: --nodes {} must be positive", origin_, nodes));
  const std::int64_t world = static_cast<std::int64_t>(nodes) * ranks_per_outer_domain();
  if (world > kMaxRanks)
    throw Error(fmt::format("{}: --nodes {} makes {} ranks, more than 2^30", origin_, nodes, world));
  return static_cast<int>(world);
}

int Topology::tier_index(std::string_view name) const {
  if (auto t = find_tier(name)) return *t;
  throw Error(fmt::format("{}: unknown tier '{}' (tiers: {})", origin_, name, fmt::join(tier_names(), ", ")));
}

std::vector<std::string> Topology::tier_names() const {
  std::vector<std::string> names;
  for (const Tier& t : tiers_) names.push_back(t.name);
  return names;
}

std::optional<int> Topology::find_tier(std::string_view name) const {
  for (int t = 0; t < num_tiers(); ++t)
    if (tiers_[t].name == name) return t;
  return std::nullopt;
}

int Topology::domain_ranks(int t) const {
  if (t < -1 || t >= num_tiers())
    throw Error(fmt::format("{}: tier index {} out of range [-1, {})", origin_, t, num_tiers()));
  if (t == outermost() && !resolved())
    throw Error(
        fmt::format("{}: the outermost tier's size is not known before resolve(world size)", origin_));
  int ranks = 1;
  for (int i = 0; i <= t; ++i) ranks *= tiers_[i].size;
  return ranks;
}

double Topology::rank_bandwidth_GBps(int t) const {
  const Tier& tier = tiers_.at(t);
  if (tier.ports == 0) return tier.bandwidth_GBps;
  return std::min(tier.bandwidth_GBps, tier.ports * tier.port_GBps / domain_ranks(t - 1));
}

int Topology::tier_between(int rank_a, int rank_b) const {
  if (!resolved()) throw Error(fmt::format("{}: tier_between needs a resolved world size", origin_));
  for (int r : {rank_a, rank_b})
    if (r < 0 || r >= world_size_)
      throw Error(fmt::format("{}: rank {} out of range [0, {})", origin_, r, world_size_));
  for (int t = 0; t < outermost(); ++t)
    if (domain_of(rank_a, t) == domain_of(rank_b, t)) return t;
  return outermost();
}

nlohmann::json Topology::to_json() const {
  nlohmann::json tiers = nlohmann::json::array();
  for (int t = 0; t < num_tiers(); ++t) {
    const Tier& tier = tiers_[t];
    bool known = t < outermost() || resolved();
    nlohmann::json j = {
        {"name", tier.name},
        {"size", known ? nlohmann::json(tier.size) : nlohmann::json(nullptr)},
        {"bandwidth_GBps", tier.bandwidth_GBps},
        {"latency_us", tier.latency_us},
        {"efficiency", tier.efficiency},
        {"ports", tier.ports},
        {"port_GBps", tier.port_GBps},
        {"rank_bandwidth_GBps", rank_bandwidth_GBps(t)},
        {"source", tier.source},
        {"domain_ranks", known ? nlohmann::json(domain_ranks(t)) : nlohmann::json(nullptr)},
        {"num_domains", resolved() ? nlohmann::json(num_domains(t)) : nlohmann::json(nullptr)}};
    tiers.push_back(std::move(j));
  }
  return {{"name", name_},
          {"world_size", resolved() ? nlohmann::json(world_size_) : nlohmann::json(nullptr)},
          {"tiers", std::move(tiers)}};
}

}  // namespace strata::topo
