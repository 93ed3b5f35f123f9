#include "plan/cluster.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/fileio.hpp"
#include "base/toml.hpp"

namespace strata::plan {

namespace {

constexpr std::string_view kKeys = "nodes, gpus, gpu, nvlink, nics";

int positive_int(std::string_view key, std::string_view text, std::string_view where) {
  int v = 0;
  if (!parse_whole(text, v) || v <= 0)
    throw Error(fmt::format("{}: {}={}: must be a positive integer", where, key, text));
  return v;
}

double positive_number(std::string_view key, std::string_view text, std::string_view where) {
  double v = 0;
  if (!parse_whole(text, v) || !(v > 0) || !std::isfinite(v))
    throw Error(fmt::format("{}: {}={}: must be a positive number", where, key, text));
  return v;
}

void set_key(ClusterSpec& c, std::string_view key, std::string_view value, std::string_view where) {
  if (key == "nodes") {
    c.nodes = positive_int(key, value, where);
  } else if (key == "gpus") {
    c.gpus = positive_int(key, value, where);
  } else if (key == "gpu") {
    gpu_datasheet(value);  // refuses an unknown GPU here, naming the key
    c.gpu = std::string(value);
  } else if (key == "nvlink") {
    c.link_GBps = positive_number(key, value, where);
  } else if (key == "nics") {
    const std::size_t x = value.find('x');
    if (x == std::string_view::npos)
      throw Error(fmt::format("{}: nics={}: expected COUNTxGBITS, NICs a node and each one's Gb/s, e.g. nics=8x400",
                              where, value));
    c.nics = positive_int("nics (count)", value.substr(0, x), where);
    c.nic_Gbps = positive_number("nics (Gb/s)", value.substr(x + 1), where);
  } else {
    throw Error(fmt::format("{}: unknown key '{}' (keys: {})", where, key, kKeys));
  }
}

void check_complete(const std::set<std::string>& given, std::string_view where) {
  std::vector<std::string_view> missing;
  for (std::string_view key : {"gpus", "gpu", "nics"})
    if (!given.contains(std::string(key))) missing.push_back(key);
  if (!missing.empty())
    throw Error(fmt::format("{}: missing {} (keys: {}; nodes may come from --nodes, nvlink from the GPU's datasheet)",
                            where, fmt::join(missing, ", "), kKeys));
}

ClusterSpec parse_line(std::string_view line) {
  ClusterSpec c;
  c.origin = std::string(line);
  const std::string where = fmt::format("--cluster '{}'", line);
  std::set<std::string> given;
  for (std::string_view item : split_list(line)) {
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      throw Error(fmt::format("{}: '{}': expected KEY=VALUE (keys: {})", where, item, kKeys));
    const std::string key(item.substr(0, eq));
    if (!given.insert(key).second) throw Error(fmt::format("{}: {} given twice", where, key));
    set_key(c, key, item.substr(eq + 1), where);
  }
  check_complete(given, where);
  return c;
}

ClusterSpec parse_file(const std::filesystem::path& path) {
  const toml::table doc = parse_toml(read_file_text(path), path.string());
  for (auto&& [key, node] : doc)
    if (key.str() != "cluster")
      throw Error(fmt::format("{}: unknown top-level key '{}' (a cluster file holds one [cluster] table)",
                              path.string(), key.str()));
  const toml::table* table = doc["cluster"].as_table();
  if (!table) throw Error(fmt::format("{}: no [cluster] table (keys: {})", path.string(), kKeys));
  ClusterSpec c;
  c.origin = path.string();
  std::set<std::string> given;
  for (auto&& [key, node] : *table) {
    const std::string where = fmt::format("{}: cluster.{}", path.string(), key.str());
    std::string text;
    if (const auto* i = node.as_integer()) text = std::to_string(i->get());
    else if (const auto* f = node.as_floating_point()) text = fmt::format("{}", f->get());
    else if (const auto* s = node.as_string()) text = s->get();
    else throw Error(fmt::format("{}: must be a number or a string", where));
    given.insert(std::string(key.str()));
    set_key(c, key.str(), text, where);
  }
  check_complete(given, path.string());
  return c;
}

}  // namespace

ClusterSpec ClusterSpec::parse(std::string_view line_or_file) {
  if (line_or_file.find('=') == std::string_view::npos) {
    if (!std::filesystem::exists(std::filesystem::path(line_or_file)))
      throw Error(fmt::format("--cluster '{}': neither KEY=VALUE,... (keys: {}) nor an existing TOML file",
                              line_or_file, kKeys));
    return parse_file(std::filesystem::path(line_or_file));
  }
  return parse_line(line_or_file);
}

topo::Topology ClusterSpec::topology() const {
  const GpuDatasheet& d = gpu_datasheet(gpu);
  const std::string given = fmt::format("--cluster {}", origin);
  std::vector<topo::Tier> tiers;
  if (d.dies > 1) tiers.push_back(topo::datasheet_tier("gpu", d.dies, d.die_link_GBps, d.die_link_source, topo::kDieLink));
  const std::string link_source =
      link_GBps > 0 ? fmt::format("{}: nvlink={:g} GB/s per direction a GPU", given, link_GBps) : std::string(d.link_source);
  tiers.push_back(topo::datasheet_tier("node", gpus, link_GBps > 0 ? link_GBps : d.link_GBps, link_source,
                                       topo::kNodeLink));
  // A rank alone crosses on one NIC; every rank of a node crossing at once shares the node's NICs.
  const double nic_GBps = nic_Gbps / 8;
  const std::string nic_source =
      fmt::format("{}: {} NICs of {:g} Gb/s a node = {:g} GB/s each", given, nics, nic_Gbps, nic_GBps);
  tiers.push_back(
      topo::datasheet_tier("cluster", 0, nic_GBps, nic_source, topo::kNetworkLink, {nics, nic_GBps, nic_source}));
  return topo::Topology(std::move(tiers), fmt::format("{}x{}", gpus, gpu));
}

DeviceFacts ClusterSpec::device() const { return gpu_datasheet(gpu).device; }

}  // namespace strata::plan
