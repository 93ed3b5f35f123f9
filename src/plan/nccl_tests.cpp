#include "plan/nccl_tests.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/fileio.hpp"

namespace strata::plan {

namespace {

struct Test {
  std::string_view name;
  std::optional<Collective> collective;  // none: a test strata has no curve for
};
// nccl-tests' binaries; the longer names first, so alltoallv_perf is not taken for alltoall_perf.
constexpr Test kTests[] = {{"all_gather_perf", Collective::AllGather},
                           {"reduce_scatter_perf", Collective::ReduceScatter},
                           {"all_reduce_perf", Collective::AllReduce},
                           {"alltoallv_perf", std::nullopt},
                           {"alltoall_perf", Collective::AllToAll},
                           {"broadcast_perf", std::nullopt},
                           {"reduce_perf", std::nullopt},
                           {"sendrecv_perf", std::nullopt},
                           {"gather_perf", std::nullopt},
                           {"scatter_perf", std::nullopt},
                           {"hypercube_perf", std::nullopt}};
constexpr std::string_view kPriced = "all_gather_perf, reduce_scatter_perf, all_reduce_perf, alltoall_perf";

std::vector<std::string> words(std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The test a log ran: its "# Collective test starting: NAME" line (nccl-tests 2.14 and later),
// else the file's name (all_gather_perf.log).
Collective test_of(const std::string& path, const std::string& named) {
  std::string_view source = named;
  std::string file = std::filesystem::path(path).filename().string();
  if (source.empty()) source = file;
  for (const Test& t : kTests) {
    if (source.find(t.name) == std::string_view::npos &&
        source.find(t.name.substr(0, t.name.size() - 5)) == std::string_view::npos)
      continue;
    if (!t.collective)
      throw Error(fmt::format("{}: a log of {}: strata's curves are all-gather, reduce-scatter, all-reduce and "
                              "all-to-all ({})",
                              path, t.name, kPriced));
    return *t.collective;
  }
  if (!named.empty())
    throw Error(fmt::format("{}: a log of '{}': strata reads {}", path, named, kPriced));
  throw Error(fmt::format("{}: which collective? no '# Collective test starting:' line (nccl-tests before 2.14) and the "
                          "file's name names none of {}; name the file after its test, e.g. all_gather_perf.log",
                          path, kPriced));
}

// Column positions in the table, from its header line "# size count type redop root time algbw busbw #wrong ...".
struct Columns {
  std::size_t count = 0;
  std::size_t size = 0;
  std::vector<std::size_t> time, busbw, wrong;  // out-of-place, then in-place
};

std::optional<Columns> columns_of(const std::vector<std::string>& header) {
  if (header.size() < 2 || header[0] != "#" || header[1] != "size") return std::nullopt;
  Columns c;
  c.count = header.size() - 1;
  for (std::size_t i = 1; i < header.size(); ++i) {
    const std::string& h = header[i];
    if (h == "time" || h == "cputime") c.time.push_back(i - 1);
    if (h == "busbw") c.busbw.push_back(i - 1);
    if (h == "#wrong" || h == "error") c.wrong.push_back(i - 1);
  }
  if (c.time.empty() || c.time.size() != c.busbw.size()) return std::nullopt;
  return c;
}

// One row of the table: its size, its times and bus bandwidths averaged over the two placements.
NcclTestsRow read_row(const std::string& where, const std::vector<std::string>& w, const Columns& c) {
  if (w.size() != c.count)
    throw Error(fmt::format("{}: {} columns where the table's header has {} (size count type redop root, then time "
                            "algbw busbw #wrong out of place and in place)",
                            where, w.size(), c.count));
  auto value = [&](std::size_t i, std::string_view name) {
    double v = 0;
    if (!parse_whole(w[i], v) || !std::isfinite(v) || v < 0)
      throw Error(fmt::format("{}: {} '{}' is not a number", where, name, w[i]));
    return v;
  };
  NcclTestsRow r;
  r.size_bytes = value(c.size, "size");
  for (std::size_t i : c.wrong)
    if (w[i] != "N/A" && value(i, "#wrong") != 0)
      throw Error(fmt::format("{}: nccl-tests counted {} wrong elements: the run is broken, its times no measure",
                              where, w[i]));
  for (std::size_t k = 0; k < c.time.size(); ++k) {
    r.seconds += value(c.time[k], "time") * 1e-6 / c.time.size();
    r.bus_GBps += value(c.busbw[k], "busbw") / c.busbw.size();
  }
  return r;
}

// The header's rank lines: "#  Rank  0 Group  0 Pid  123 on HOST device  0 [...] NAME".
struct Ranks {
  int count = 0;
  std::map<std::string, int> per_host;
  std::string device;
};

void read_rank(const std::string& where, const std::vector<std::string>& w, const std::string& line, Ranks& r) {
  // # Rank N Group N Pid N on HOST device N ...
  if (w.size() < 11 || w[7] != "on" || w[9] != "device")
    throw Error(fmt::format("{}: a Rank line not of nccl-tests' form '#  Rank R Group G Pid P on HOST device D ...'",
                            where));
  ++r.count;
  ++r.per_host[w[8]];
  if (r.device.empty()) {
    const std::size_t bracket = line.find(']');
    r.device = bracket == std::string::npos ? w.back() : std::string(line.substr(line.find_first_not_of(' ', bracket + 1)));
  }
}

bool noise(std::string_view line) {
  // NCCL's own log lines (NCCL_DEBUG=INFO/WARN) interleave with the table in real logs.
  return line.find(" NCCL INFO") != std::string_view::npos || line.find(" NCCL WARN") != std::string_view::npos;
}

}  // namespace

double NcclTestsLog::bus_factor() const {
  const double ring = static_cast<double>(ranks - 1) / ranks;
  return collective == Collective::AllReduce ? 2 * ring : ring;
}

NcclTestsLog read_nccl_tests_log(const std::filesystem::path& file) {
  NcclTestsLog log;
  log.path = file.string();
  const std::string text = read_file_text(file);
  std::istringstream in(text);
  std::string named;
  Ranks ranks;
  std::optional<Columns> columns;
  int number_of_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++number_of_line;
    const std::string where = fmt::format("{}:{}", log.path, number_of_line);
    const std::vector<std::string> w = words(line);
    if (w.empty() || noise(line)) continue;
    if (w[0] == "#") {
      if (w.size() >= 5 && w[1] == "Collective" && w[2] == "test" && w[3] == "starting:") named = w[4];
      else if (w.size() >= 2 && w[1] == "Rank") read_rank(where, w, line, ranks);
      else if (auto c = columns_of(w)) columns = c;
      continue;
    }
    if (!columns)
      throw Error(fmt::format("{}: a row before the table's header ('#  size  count  type ... time  algbw  busbw')",
                              where));
    NcclTestsRow row = read_row(where, w, *columns);
    row.line = number_of_line;
    if (row.size_bytes == 0) continue;  // nothing sent: a size under one element a rank
    if (!log.rows.empty() && !(row.size_bytes > log.rows.back().size_bytes))
      throw Error(fmt::format("{}: size {} after {}: the sizes must increase (a log of several data types, "
                              "operations or cycles: give one -d, one -o and -N 1)",
                              where, row.size_bytes, log.rows.back().size_bytes));
    log.rows.push_back(row);
  }
  log.collective = test_of(log.path, named);
  if (ranks.count < 2)
    throw Error(fmt::format("{}: {} '#  Rank' lines in the header: a collective needs at least 2 ranks (the log's "
                            "header lists every rank)",
                            log.path, ranks.count));
  log.ranks = ranks.count;
  log.hosts = static_cast<int>(ranks.per_host.size());
  log.device = ranks.device;
  for (const auto& [host, n] : ranks.per_host)
    if (n != log.ranks_per_host())
      throw Error(fmt::format("{}: {} ranks on host {} but {} on average: strata's tiers need as many ranks on every "
                              "host",
                              log.path, n, host, log.ranks_per_host()));
  if (log.rows.size() < 2)
    throw Error(fmt::format("{}: {} of the table: a curve needs at least 2 sizes (run with -b below -e)", log.path,
                            log.rows.empty() ? std::string("no row") : std::string("1 row")));
  // The bus bandwidth nccl-tests printed must be the header's ranks' ring over that time.
  for (const NcclTestsRow& r : log.rows) {
    const double mine = r.size_bytes * log.bus_factor() / r.seconds / 1e9;
    if (std::abs(mine - r.bus_GBps) > 0.011 + 0.02 * r.bus_GBps)
      throw Error(fmt::format("{}:{}: busbw {:.4g} GB/s, but size {} in {:.4g} us over {} ranks (the header's Rank "
                              "lines) is {:.4g}: the header does not describe this table",
                              log.path, r.line, r.bus_GBps, r.size_bytes, r.seconds * 1e6, log.ranks, mine));
  }
  return log;
}

Calibration calibration_from_nccl_tests(const std::vector<NcclTestsLog>& logs, const std::vector<std::string>& tiers,
                                        std::string topology, std::string command) {
  if (tiers.size() < 2) throw Error("--from-nccl-tests: the topology needs a node tier and the tier outside it");
  Calibration cal;
  cal.topology = std::move(topology);
  cal.command = std::move(command);
  for (const std::string& name : tiers) cal.tiers.emplace_back().name = name;
  TierCalibration& node = cal.tiers[tiers.size() - 2];
  TierCalibration& cluster = cal.tiers.back();
  for (const NcclTestsLog& log : logs) {
    const bool across = log.hosts > 1;
    TierCalibration& tier = across ? cluster : node;
    auto& curve = tier.curves[static_cast<int>(log.collective)];
    if (curve)
      throw Error(fmt::format("{}: a second {} log on tier '{}' (one log a collective a tier)", log.path,
                              collective_key(log.collective), tier.name));
    // Across hosts every rank of a host sends its share over the host's NICs at once.
    const double sharing = across ? log.ranks_per_host() : 1;
    std::vector<double> bytes, seconds;
    for (const NcclTestsRow& r : log.rows) {
      bytes.push_back(r.size_bytes * log.bus_factor() / sharing);
      seconds.push_back(r.seconds);
    }
    const int sends = (log.collective == Collective::AllReduce ? 2 : 1) * (log.ranks - 1);
    curve = CollectiveCurve::fit(std::move(bytes), std::move(seconds), sends);
    const int group = across ? log.hosts : log.ranks, sharing_ranks = across ? log.ranks_per_host() : 1;
    if (tier.group_size > 0 && (tier.group_size != group || tier.ranks_sharing != sharing_ranks))
      throw Error(fmt::format("{}: {} ranks on {} host(s), where the other logs of tier '{}' ran a group of {} with "
                              "{} a host: one layout a tier",
                              log.path, log.ranks, log.hosts, tier.name, tier.group_size, tier.ranks_sharing));
    tier.group_size = group;
    tier.ranks_sharing = sharing_ranks;
    cal.world_size = std::max(cal.world_size, log.ranks);
  }
  return cal;
}

}  // namespace strata::plan
