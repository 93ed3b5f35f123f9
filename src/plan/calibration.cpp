#include "plan/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/toml.hpp"
#include "base/fileio.hpp"

namespace strata::plan {

LineFit fit_line_relative(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2) throw Error("calibration fit: needs at least two points");
  // Weighted normal equations, weights 1/y².
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1 / (y[i] * y[i]);
    sw += w, sx += w * x[i], sy += w * y[i], sxx += w * x[i] * x[i], sxy += w * x[i] * y[i];
  }
  const double det = sw * sxx - sx * sx;
  LineFit f;
  if (det > 0) {
    f.slope = (sw * sxy - sx * sy) / det;
    f.intercept = (sy - f.slope * sx) / sw;
  }
  // A negative fixed cost (noise on a line through nearly zero) or a non-positive slope
  // (every size took the same time): refit through the origin.
  if (!(det > 0) || f.intercept < 0 || !(f.slope > 0)) f = {0, sxy / sxx};
  return f;
}

namespace {

// t = α·sends/messages + n/B, the fixed cost scaled to the op's steps; α = n½ / B.
double curve_seconds(double GBps, double latency_s, int messages, double bytes_sent, int sends) {
  const double alpha = messages > 0 ? latency_s * sends / messages : latency_s;
  return alpha + bytes_sent / (GBps * 1e9);
}

// A fitted line t = intercept + slope·n in the curve's form: bus bandwidth and half size.
std::pair<double, double> bus_and_half(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  const LineFit f = fit_line_relative(bytes, seconds);
  return {1 / f.slope / 1e9, f.intercept / f.slope};
}

// The sweep's own time at n bytes a rank: linear between its measured points (on the namespace
// cluster one line missed a host link's sweep by -41% to +49% at the same sizes in every
// run, likely as small messages ride the socket buffers and larger ones wait on the
// shaper); beyond the largest, that point plus the rest at the fitted bandwidth; below the
// smallest, from the fitted fixed cost at 0 bytes (or the smallest point's time, if less). A
// ring of another size pays the fitted fixed cost of its extra (or fewer) steps. Without
// points, the fitted curve.
double measured_seconds(const std::vector<double>& x, const std::vector<double>& y, double GBps, double latency_s,
                        int messages, double n, int sends) {
  if (x.size() < 2) return curve_seconds(GBps, latency_s, messages, n, sends);
  const double B = GBps * 1e9;
  double t = 0;
  if (n >= x.back()) {
    t = y.back() + (n - x.back()) / B;
  } else if (n <= x.front()) {
    const double at_zero = std::min(latency_s, y.front());
    t = at_zero + (y.front() - at_zero) * n / x.front();
  } else {
    const auto i = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), n) - x.begin());
    t = y[i - 1] + (y[i] - y[i - 1]) * (n - x[i - 1]) / (x[i] - x[i - 1]);
  }
  if (messages > 0) t += latency_s * (sends - messages) / messages;
  return std::max(0.0, t);
}

}  // namespace

double CollectiveCurve::seconds_for(double bytes_sent, int sends) const {
  return measured_seconds(bytes, seconds, bus_GBps, latency_s(), messages, bytes_sent, sends);
}

double CollectiveCurve::under_compute_factor(double bytes_sent, int sends) const {
  if (!has_under_compute()) return 1.0;
  const double busy =
      measured_seconds(busy_bytes, busy_seconds, busy_GBps, busy_latency_s(), messages, bytes_sent, sends);
  return std::max(1.0, busy / seconds_for(bytes_sent, sends));
}

void CollectiveCurve::fit_under_compute(std::vector<double> bytes, std::vector<double> seconds) {
  std::tie(busy_GBps, busy_half_bytes) = bus_and_half(bytes, seconds);
  busy_bytes = std::move(bytes);
  busy_seconds = std::move(seconds);
}

CollectiveCurve CollectiveCurve::fit(std::vector<double> bytes, std::vector<double> seconds, int messages) {
  CollectiveCurve c;
  std::tie(c.bus_GBps, c.half_bytes) = bus_and_half(bytes, seconds);
  c.messages = messages;
  c.bytes = std::move(bytes);
  c.seconds = std::move(seconds);
  return c;
}

double median(std::vector<double> timings) {
  if (timings.empty()) throw Error("calibration: a median of no timings");
  std::sort(timings.begin(), timings.end());
  const std::size_t mid = timings.size() / 2;
  return timings.size() % 2 ? timings[mid] : 0.5 * (timings[mid - 1] + timings[mid]);
}

double PassTimings::pooled_median() const {
  std::vector<double> all;
  for (const std::vector<double>& pass : passes) all.insert(all.end(), pass.begin(), pass.end());
  return median(std::move(all));
}

double PassTimings::pass_median(std::size_t pass) const { return median(passes.at(pass)); }

std::vector<double> pass_ratios(const std::vector<PassTimings>& measurements) {
  if (measurements.empty()) return {};
  const std::size_t n = measurements.front().passes.size();
  std::vector<double> totals(n, 0.0);
  for (const PassTimings& m : measurements) {
    if (m.passes.size() != n)
      throw Error(fmt::format("calibration: compute measurements timed in {} and {} passes", n, m.passes.size()));
    for (std::size_t p = 0; p < n; ++p) totals[p] += m.pass_median(p);
  }
  if (n == 0) return {};
  const double fastest = *std::min_element(totals.begin(), totals.end());
  for (double& t : totals) t /= fastest;
  return totals;
}

double pass_spread(const std::vector<PassTimings>& measurements) {
  const std::vector<double> ratios = pass_ratios(measurements);
  return ratios.empty() ? 1 : *std::max_element(ratios.begin(), ratios.end());
}

double ComputeCalibration::matmul_seconds(double flops, int matmuls) const {
  return (flops + matmuls * half_gflop * 1e9) / (peak_gflops * 1e9);
}

namespace {

// Reads the fields of one TOML table, naming "<origin>: <path>.<field>" in every refusal.
class Fields {
 public:
  // `separator`: ": " between a file and a top-level field, "." between a table and its field.
  Fields(const toml::table& table, std::string where, std::string_view separator = ".")
      : table_(table), where_(std::move(where)), separator_(separator) {}

  const std::string& where() const { return where_; }
  std::string at(std::string_view field) const { return fmt::format("{}{}{}", where_, separator_, field); }

  void only(const std::vector<std::string_view>& known) const {
    for (auto&& [key, node] : table_)
      if (std::find(known.begin(), known.end(), key.str()) == known.end())
        throw Error(fmt::format("{}: unknown field (fields: {})", at(key.str()), fmt::join(known, ", ")));
  }
  bool has(std::string_view field) const { return table_.contains(field); }
  const toml::node& node(std::string_view field) const {
    const toml::node* n = table_.get(field);
    if (!n) throw Error(fmt::format("{}: missing", at(field)));
    return *n;
  }
  double number(std::string_view field) const {
    const std::optional<double> v = as_number(node(field));
    if (!v) throw Error(fmt::format("{}: must be a number", at(field)));
    if (!std::isfinite(*v)) throw Error(fmt::format("{} = {}: must be finite", at(field), *v));
    return *v;
  }
  double positive(std::string_view field) const {
    const double v = number(field);
    if (!(v > 0)) throw Error(fmt::format("{} = {}: must be positive", at(field), v));
    return v;
  }
  double at_least(std::string_view field, double low) const {
    const double v = number(field);
    if (!(v >= low)) throw Error(fmt::format("{} = {}: must be at least {}", at(field), v, low));
    return v;
  }
  int integer(std::string_view field, int low) const {
    const toml::node& n = node(field);
    const auto* i = n.as_integer();
    if (!i) throw Error(fmt::format("{}: must be an integer", at(field)));
    if (i->get() < low || i->get() > (std::int64_t{1} << 30))
      throw Error(fmt::format("{} = {}: must be at least {}", at(field), i->get(), low));
    return static_cast<int>(i->get());
  }
  std::string string(std::string_view field) const {
    const toml::node& n = node(field);
    if (!n.is_string()) throw Error(fmt::format("{}: must be a string", at(field)));
    return *n.value<std::string>();
  }
  const toml::table& table(std::string_view field) const {
    const toml::table* t = node(field).as_table();
    if (!t) throw Error(fmt::format("{}: must be a table", at(field)));
    return *t;
  }
  // A list of positive numbers.
  std::vector<double> numbers(std::string_view field) const {
    const toml::array* a = node(field).as_array();
    if (!a || a->empty()) throw Error(fmt::format("{}: must be a non-empty list of numbers", at(field)));
    std::vector<double> out;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::optional<double> v = as_number(*a->get(i));
      if (!v || !(*v > 0) || !std::isfinite(*v))
        throw Error(fmt::format("{}[{}]: must be a positive number", at(field), i));
      out.push_back(*v);
    }
    return out;
  }

 private:
  static std::optional<double> as_number(const toml::node& n) {
    if (const auto* i = n.as_integer()) return static_cast<double>(i->get());
    if (const auto* d = n.as_floating_point()) return d->get();
    return std::nullopt;
  }

  const toml::table& table_;
  std::string where_;
  std::string_view separator_;
};

// The measurements a curve was fitted to: equal lists, at least two points.
void check_points(const Fields& f, std::string_view x_field, const std::vector<double>& x,
                  const std::vector<double>& y, std::string_view y_field = "seconds") {
  if (x.size() != y.size() || x.size() < 2)
    throw Error(fmt::format("{}: {} and {} must list the same number of points, at least 2 ({} and {})", f.where(),
                            x_field, y_field, x.size(), y.size()));
}

// Sizes a curve is priced between (numbers() has refused what is not positive), increasing.
void check_increasing(const Fields& f, std::string_view field, const std::vector<double>& sizes,
                      std::string_view what) {
  for (std::size_t i = 1; i < sizes.size(); ++i)
    if (!(sizes[i] > sizes[i - 1]))
      throw Error(fmt::format("{}[{}] = {}: must be above the size before it ({}): {}, increasing", f.at(field), i,
                              sizes[i], sizes[i - 1], what));
}

// A sweep an op is priced at: its sizes increasing.
void check_sweep(const Fields& f, const std::vector<double>& bytes, const std::vector<double>& seconds) {
  check_points(f, "bytes", bytes, seconds);
  check_increasing(f, "bytes", bytes, "the sweep's sizes");
}

// bus_GBps always; half_bytes with messages, or neither (a published figure that states only the
// large-message bandwidth); the measured points when given.
CollectiveCurve read_curve(const Fields& tier, Collective c) {
  const Fields f(tier.table(collective_key(c)), tier.at(collective_key(c)));
  f.only({"bus_GBps", "half_bytes", "messages", "bytes", "seconds", "under_compute"});
  CollectiveCurve curve;
  curve.bus_GBps = f.positive("bus_GBps");
  curve.latency_known = f.has("half_bytes") || f.has("messages");
  if (curve.latency_known) {
    curve.half_bytes = f.at_least("half_bytes", 0);
    curve.messages = f.integer("messages", 1);
  }
  if (f.has("bytes") || f.has("seconds")) {
    curve.bytes = f.numbers("bytes");
    curve.seconds = f.numbers("seconds");
    check_sweep(f, curve.bytes, curve.seconds);
  }
  if (f.has("under_compute")) {
    // Measured by strata calibrate with the curve above; its scale of fixed cost (messages) is the curve's.
    if (!curve.latency_known)
      throw Error(fmt::format("{}: needs the curve's half_bytes and messages (it is measured with them)",
                              f.at("under_compute")));
    const Fields b(f.table("under_compute"), f.at("under_compute"));
    b.only({"bus_GBps", "half_bytes", "bytes", "seconds"});
    curve.busy_GBps = b.positive("bus_GBps");
    curve.busy_half_bytes = b.at_least("half_bytes", 0);
    curve.busy_bytes = b.numbers("bytes");
    curve.busy_seconds = b.numbers("seconds");
    check_sweep(b, curve.busy_bytes, curve.busy_seconds);
  }
  return curve;
}

// [tiers.bus_by_group_size]: key, sizes increasing, a positive bus_GBps a size.
GroupSizeCurve read_group_size_curve(const Fields& tier) {
  const Fields f(tier.table("bus_by_group_size"), tier.at("bus_by_group_size"));
  f.only({"key", "sizes", "bus_GBps"});
  GroupSizeCurve curve;
  const std::string key = f.string("key");
  if (key == group_size_key_name(GroupSizeCurve::Key::Nodes)) curve.key = GroupSizeCurve::Key::Nodes;
  else if (key == group_size_key_name(GroupSizeCurve::Key::Ranks)) curve.key = GroupSizeCurve::Key::Ranks;
  else throw Error(fmt::format("{} = '{}': must be nodes or ranks (what sizes count)", f.at("key"), key));
  curve.sizes = f.numbers("sizes");
  curve.bus_GBps = f.numbers("bus_GBps");
  check_points(f, "sizes", curve.sizes, curve.bus_GBps, "bus_GBps");
  check_increasing(f, "sizes", curve.sizes, "the group sizes");
  return curve;
}

toml::array to_array(const std::vector<double>& v) {
  toml::array a;
  for (double x : v) a.push_back(x);
  return a;
}

nlohmann::json curve_json(const CollectiveCurve& c) {
  if (!c.latency_known) return {{"bus_GBps", c.bus_GBps}, {"latency", "the topology's latency_us a message"}};
  nlohmann::json j{{"bus_GBps", c.bus_GBps}, {"half_bytes", c.half_bytes}, {"latency_us", c.latency_s() * 1e6},
                   {"messages", c.messages},
                   {"priced_at", c.bytes.empty() ? nlohmann::json("the fitted curve (no measured points)")
                                                 : nlohmann::json(c.bytes.size())}};
  j["under_compute"] = c.has_under_compute()
                           ? nlohmann::json{{"bus_GBps", c.busy_GBps},
                                            {"half_bytes", c.busy_half_bytes},
                                            {"latency_us", c.busy_latency_s() * 1e6}}
                           : nlohmann::json("not measured: priced as alone");
  return j;
}

// [compute]'s measured GEMMs: the device, its peak, one [[compute.gemm]] a shape, and the
// efficiency they give (a file edited by hand to disagree is refused).
void read_gemms(const Fields& cf, Calibration& c) {
  c.gemm_device = cf.string("device");
  c.gemm_peak_tflops = cf.positive("peak_tflops");
  const toml::array* rows = cf.node("gemm").as_array();
  if (!rows || rows->empty())
    throw Error(fmt::format("{}: must be a non-empty list of tables ([[compute.gemm]])", cf.at("gemm")));
  for (std::size_t i = 0; i < rows->size(); ++i) {
    const toml::table* row = rows->get(i)->as_table();
    if (!row) throw Error(fmt::format("{}[{}]: must be a table ([[compute.gemm]])", cf.at("gemm"), i));
    const Fields f(*row, fmt::format("{}[{}]", cf.at("gemm"), i));
    f.only({"m", "n", "k", "dtype", "tflops"});
    GemmPoint g;
    g.m = f.positive("m"), g.n = f.positive("n"), g.k = f.positive("k");
    g.dtype = f.string("dtype");
    g.tflops = f.positive("tflops");
    if (g.dtype != "bf16" && g.dtype != "fp16")
      throw Error(fmt::format("{} = '{}': must be bf16 or fp16 (the precision of the device's peak)", f.at("dtype"),
                              g.dtype));
    c.gemms.push_back(std::move(g));
  }
  const double implied = flop_weighted_tflops(c.gemms) / c.gemm_peak_tflops;
  if (std::abs(implied - c.compute_efficiency) > 1e-6 * implied)
    throw Error(fmt::format("{} = {}: its GEMMs' FLOP-weighted {:.6g} TFLOP/s over peak_tflops {:g} give {:.6g}",
                            cf.at("efficiency"), c.compute_efficiency, flop_weighted_tflops(c.gemms),
                            c.gemm_peak_tflops, implied));
}

}  // namespace

double flop_weighted_tflops(const std::vector<GemmPoint>& gemms) {
  double flops = 0, seconds = 0;
  for (const GemmPoint& g : gemms) {
    flops += g.flops();
    seconds += g.flops() / (g.tflops * 1e12);
  }
  if (!(seconds > 0)) throw Error("gemm table: no GEMMs");
  return flops / seconds / 1e12;
}

Calibration Calibration::from_toml_string(std::string_view text, std::string_view origin) {
  const toml::table doc = parse_toml(text, origin);
  const Fields root(doc, std::string(origin), ": ");
  root.only({"version", "topology", "world_size", "command", "compute", "tiers"});
  Calibration c;
  c.version = root.integer("version", 1);
  if (c.version != kVersion)
    throw Error(fmt::format("{} = {}: this strata reads version {} (run strata calibrate again)", root.at("version"),
                            c.version, kVersion));
  c.topology = root.string("topology");
  if (root.has("world_size")) c.world_size = root.integer("world_size", 1);  // a shipped file may not know it
  c.command = root.string("command");

  if (root.has("compute")) {
    const toml::table* compute = doc["compute"].as_table();
    if (!compute) throw Error(fmt::format("{}: must be a table ([compute])", root.at("compute")));
    const Fields cf(*compute, root.at("compute"));
    if (cf.has("efficiency")) {
      // A fraction of peak stands for the whole curve; both would disagree.
      for (auto&& [key, node] : *compute)
        if (key.str() != "efficiency" && key.str() != "device" && key.str() != "peak_tflops" && key.str() != "gemm")
          throw Error(fmt::format("{}: stands alone in [compute], not beside a measured curve's fields ({}); "
                                  "beside it only the GEMMs it came from: device, peak_tflops, [[compute.gemm]]",
                                  cf.at("efficiency"), key.str()));
      c.compute_efficiency = cf.positive("efficiency");
      if (c.compute_efficiency > 1)
        throw Error(fmt::format("{} = {}: must be at most 1 (a fraction of peak)", cf.at("efficiency"),
                                c.compute_efficiency));
      if (cf.has("gemm") || cf.has("device") || cf.has("peak_tflops")) read_gemms(cf, c);
    } else {
      // "efficiency" is named for a misspelt field's message; it never reaches here.
      cf.only({"peak_gflops", "half_gflop", "kernel_overhead", "overlap_slowdown", "optimizer_GBps", "int8_codec_GBps",
               "int4_codec_GBps", "threads", "passes", "pass_spread", "gflop", "seconds", "efficiency"});
      ComputeCalibration& cc = c.compute.emplace();
      cc.peak_gflops = cf.positive("peak_gflops");
      cc.half_gflop = cf.at_least("half_gflop", 0);
      cc.kernel_overhead = cf.at_least("kernel_overhead", 1);
      cc.overlap_slowdown = cf.at_least("overlap_slowdown", 1);
      cc.optimizer_GBps = cf.positive("optimizer_GBps");
      if (cf.has("int8_codec_GBps")) cc.int8_codec_GBps = cf.positive("int8_codec_GBps");
      if (cf.has("int4_codec_GBps")) cc.int4_codec_GBps = cf.positive("int4_codec_GBps");
      cc.threads = cf.integer("threads", 1);
      if (cf.has("passes")) cc.passes = cf.integer("passes", 1);
      if (cf.has("pass_spread")) cc.pass_spread = cf.at_least("pass_spread", 1);
      cc.gflop = cf.numbers("gflop");
      cc.seconds = cf.numbers("seconds");
      check_points(cf, "gflop", cc.gflop, cc.seconds);
    }
  }

  const toml::array* tiers = doc["tiers"].as_array();
  if (!tiers || tiers->empty())
    throw Error(fmt::format("{}: missing (one [[tiers]] table a tier of the topology)", root.at("tiers")));
  for (std::size_t i = 0; i < tiers->size(); ++i) {
    const toml::table* t = tiers->get(i)->as_table();
    if (!t) throw Error(fmt::format("{}[{}]: must be a table ([[tiers]])", root.at("tiers"), i));
    const Fields f(*t, fmt::format("{}[{}]", root.at("tiers"), i));
    std::vector<std::string_view> known{"name",           "group_size", "ranks_sharing", "overlap_slowdown",
                                        "overlap_all_reduce_bytes", "bus_by_group_size"};
    for (Collective k : kCollectives) known.push_back(collective_key(k));
    f.only(known);
    TierCalibration tier;
    tier.name = f.string("name");
    const Fields named_tier(*t, fmt::format("{}[{}] ('{}')", root.at("tiers"), i, tier.name));
    if (named_tier.has("group_size")) tier.group_size = named_tier.integer("group_size", 1);
    if (named_tier.has("ranks_sharing")) tier.ranks_sharing = named_tier.integer("ranks_sharing", 1);
    if (named_tier.has("overlap_slowdown")) tier.overlap_slowdown = named_tier.at_least("overlap_slowdown", 1);
    if (named_tier.has("overlap_all_reduce_bytes"))
      tier.overlap_all_reduce_bytes = named_tier.positive("overlap_all_reduce_bytes");
    for (Collective k : kCollectives)
      if (named_tier.has(collective_key(k))) tier.curves[static_cast<int>(k)] = read_curve(named_tier, k);
    if (named_tier.has("bus_by_group_size")) {
      for (Collective k : kCollectives)
        if (tier.find(k))
          throw Error(fmt::format("{}: the tier's {} curve gives its rate too; give one of the two",
                                  named_tier.at("bus_by_group_size"), collective_key(k)));
      tier.by_group_size = read_group_size_curve(named_tier);
    }
    if (c.find_tier(tier.name)) throw Error(fmt::format("{}: name '{}' given twice", f.at("name"), tier.name));
    c.tiers.push_back(std::move(tier));
  }
  bool any_curve = false;
  for (const TierCalibration& t : c.tiers)
    for (const auto& curve : t.curves) any_curve = any_curve || curve.has_value() || t.by_group_size.has_value();
  if (!any_curve && !c.compute && !(c.compute_efficiency > 0))
    throw Error(fmt::format("{}: calibrates nothing (no [compute] and no collective in any [[tiers]])", origin));
  return c;
}

Calibration Calibration::from_toml_file(const std::filesystem::path& path) {
  return from_toml_string(read_file_text(path), path.string());
}

std::string Calibration::to_toml() const {
  toml::table doc;
  doc.insert("version", version);
  doc.insert("topology", topology);
  if (world_size > 0) doc.insert("world_size", world_size);
  doc.insert("command", command);
  if (compute) {
    toml::table table{{"peak_gflops", compute->peak_gflops},
                      {"half_gflop", compute->half_gflop},
                      {"kernel_overhead", compute->kernel_overhead},
                      {"overlap_slowdown", compute->overlap_slowdown},
                      {"optimizer_GBps", compute->optimizer_GBps},
                      {"threads", compute->threads},
                      {"gflop", to_array(compute->gflop)},
                      {"seconds", to_array(compute->seconds)}};
    if (compute->int8_codec_GBps > 0) table.insert("int8_codec_GBps", compute->int8_codec_GBps);
    if (compute->int4_codec_GBps > 0) table.insert("int4_codec_GBps", compute->int4_codec_GBps);
    if (compute->passes > 1) table.insert("passes", compute->passes), table.insert("pass_spread", compute->pass_spread);
    doc.insert("compute", std::move(table));
  } else if (compute_efficiency > 0) {
    toml::table table{{"efficiency", compute_efficiency}};
    if (!gemms.empty()) {
      table.insert("device", gemm_device);
      table.insert("peak_tflops", gemm_peak_tflops);
      toml::array rows;
      for (const GemmPoint& g : gemms)
        rows.push_back(toml::table{{"m", static_cast<std::int64_t>(g.m)},
                                   {"n", static_cast<std::int64_t>(g.n)},
                                   {"k", static_cast<std::int64_t>(g.k)},
                                   {"dtype", g.dtype},
                                   {"tflops", g.tflops}});
      table.insert("gemm", std::move(rows));
    }
    doc.insert("compute", std::move(table));
  }
  toml::array tier_array;
  for (const TierCalibration& t : tiers) {
    toml::table table{{"name", t.name}};
    if (t.group_size > 0) table.insert("group_size", t.group_size);
    if (t.ranks_sharing > 0) table.insert("ranks_sharing", t.ranks_sharing);
    if (t.overlap_slowdown > 0) table.insert("overlap_slowdown", t.overlap_slowdown);
    if (t.overlap_all_reduce_bytes > 0) table.insert("overlap_all_reduce_bytes", t.overlap_all_reduce_bytes);
    for (Collective k : kCollectives) {
      const CollectiveCurve* c = t.find(k);
      if (!c) continue;
      toml::table curve{{"bus_GBps", c->bus_GBps}};
      if (c->latency_known) curve.insert("half_bytes", c->half_bytes), curve.insert("messages", c->messages);
      if (!c->bytes.empty()) curve.insert("bytes", to_array(c->bytes)), curve.insert("seconds", to_array(c->seconds));
      if (c->has_under_compute())
        curve.insert("under_compute", toml::table{{"bus_GBps", c->busy_GBps},
                                                  {"half_bytes", c->busy_half_bytes},
                                                  {"bytes", to_array(c->busy_bytes)},
                                                  {"seconds", to_array(c->busy_seconds)}});
      table.insert(collective_key(k), std::move(curve));
    }
    if (t.by_group_size)
      table.insert("bus_by_group_size", toml::table{{"key", group_size_key_name(t.by_group_size->key)},
                                                    {"sizes", to_array(t.by_group_size->sizes)},
                                                    {"bus_GBps", to_array(t.by_group_size->bus_GBps)}});
    tier_array.push_back(std::move(table));
  }
  doc.insert("tiers", std::move(tier_array));
  std::ostringstream out;
  out << "# strata calibration (docs/calibration.md): measured by `strata calibrate`, read by\n"
         "# `strata plan --calibration FILE`. Collective time: the measured seconds at the bytes a rank\n"
         "# sends (linear between two of them; beyond the largest, + the rest / bus_GBps); the fitted\n"
         "# (bytes + half_bytes) / bus_GBps where a curve has no points;\n"
         "# matmul time = (FLOPs + half_gflop) / peak_gflops, times kernel_overhead for the whole step;\n"
         "# under_compute: the collective while every rank computes beside it; a tier's overlap_slowdown:\n"
         "# matmul time while that tier's all-reduces of overlap_all_reduce_bytes (a rank sends) run\n"
         "# beside it / alone (an op moving fewer bytes a second than they do slows compute less).\n"
      << doc << "\n";
  return out.str();
}

// The scalars of a calibrated tier and compute under their own names (not the curves' points).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TierCalibration, name, group_size, ranks_sharing)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ComputeCalibration, peak_gflops, half_gflop, kernel_overhead, overlap_slowdown,
                                   optimizer_GBps, int8_codec_GBps, int4_codec_GBps, threads, passes, pass_spread)

nlohmann::json Calibration::to_json() const {
  nlohmann::json tiers_json = nlohmann::json::array();
  for (const TierCalibration& t : tiers) {
    nlohmann::json j = t;
    j["overlap_slowdown"] = overlap_slowdown(t.name);
    if (t.overlap_all_reduce_bytes > 0) {
      j["overlap_all_reduce_bytes"] = t.overlap_all_reduce_bytes;
      j["overlap_bytes_per_second"] = overlap_bytes_per_second(t.name);
    }
    for (Collective k : kCollectives)
      j[std::string(collective_key(k))] = t.find(k) ? curve_json(*t.find(k)) : nlohmann::json("the topology's figures");
    if (t.by_group_size)
      j["bus_by_group_size"] = {{"key", group_size_key_name(t.by_group_size->key)},
                                {"sizes", t.by_group_size->sizes},
                                {"bus_GBps", t.by_group_size->bus_GBps}};
    tiers_json.push_back(std::move(j));
  }
  nlohmann::json compute_json = "the device's: peak x compute efficiency, HBM rate, no slowdown";
  if (compute)
    compute_json = *compute;
  else if (!gemms.empty())
    compute_json = {{"efficiency", compute_efficiency},
                    {"gemms", gemms.size()},
                    {"flop_weighted_tflops", flop_weighted_tflops(gemms)},
                    {"device", gemm_device},
                    {"peak_tflops", gemm_peak_tflops},
                    {"means", "measured GEMMs' FLOP-weighted rate over the device's peak: the device's compute "
                              "efficiency for every matmul unless --compute-efficiency is given"}};
  else if (compute_efficiency > 0)
    compute_json = {{"efficiency", compute_efficiency},
                    {"means", "a published run's fraction of peak: the device's compute efficiency unless "
                              "--compute-efficiency is given; HBM rate the device's, no slowdown"}};
  return {{"version", version},
          {"topology", topology},
          {"world_size", world_size},
          {"command", command},
          {"compute", compute_json},
          {"tiers", tiers_json}};
}

std::string_view group_size_key_name(GroupSizeCurve::Key key) {
  return key == GroupSizeCurve::Key::Nodes ? "nodes" : "ranks";
}

double GroupSizeCurve::bus_GBps_at(double size) const {
  if (size <= sizes.front()) return bus_GBps.front();
  if (size >= sizes.back()) return bus_GBps.back();
  std::size_t i = 1;
  while (sizes[i] < size) ++i;
  const double share = std::log(size / sizes[i - 1]) / std::log(sizes[i] / sizes[i - 1]);
  return bus_GBps[i - 1] + share * (bus_GBps[i] - bus_GBps[i - 1]);
}

const CollectiveCurve& TierCalibration::curve(Collective c) const {
  if (const CollectiveCurve* found = find(c)) return *found;
  throw Error(fmt::format("calibration: tier '{}' has no {} curve", name, collective_key(c)));
}

const TierCalibration* Calibration::find_tier(std::string_view name) const {
  for (const TierCalibration& t : tiers)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string_view> Calibration::tier_names() const {
  std::vector<std::string_view> names;
  for (const TierCalibration& t : tiers) names.push_back(t.name);
  return names;
}

const TierCalibration& Calibration::tier(std::string_view name) const {
  if (const TierCalibration* t = find_tier(name)) return *t;
  throw Error(fmt::format("calibration: no tier '{}' (it has {})", name, fmt::join(tier_names(), ", ")));
}

double Calibration::overlap_slowdown(std::string_view name) const {
  const TierCalibration& t = tier(name);
  if (t.overlap_slowdown > 0) return t.overlap_slowdown;
  return compute ? compute->overlap_slowdown : 1.0;
}

double Calibration::overlap_bytes_per_second(std::string_view name) const {
  const TierCalibration& t = tier(name);
  const CollectiveCurve* all_reduce = t.find(Collective::AllReduce);
  if (t.overlap_all_reduce_bytes <= 0 || !all_reduce || !all_reduce->latency_known) return 0;
  const double n = t.overlap_all_reduce_bytes;
  return n / (all_reduce->seconds_for(n, all_reduce->messages) * all_reduce->under_compute_factor(n, all_reduce->messages));
}

double Calibration::compute_slowdown(std::string_view name, double bytes_per_second) const {
  const double s = overlap_slowdown(name), timed_rate = overlap_bytes_per_second(name);
  if (timed_rate <= 0) return s;
  // The cores the communication thread takes scale with the bytes it moves: beside the timed
  // all-reduces, priced as the planner prices an op, compute kept 1/s of its speed.
  const double lost = std::min(0.95, (1 - 1 / s) * bytes_per_second / timed_rate);
  return 1 / (1 - lost);
}

void Calibration::check_covers(const topo::Topology& t, std::string_view origin) const {
  for (const topo::Tier& tier : t.tiers())
    if (!find_tier(tier.name))
      throw Error(fmt::format("{}: tiers: no tier '{}' of topology '{}' (calibrated: {}); calibrate on this "
                              "topology",
                              origin, tier.name, t.name(), fmt::join(tier_names(), ", ")));
}

std::vector<std::string> group_size_notes(const Calibration* calibration, const topo::Topology& topology) {
  std::vector<std::string> notes;
  for (int t = 1; t < topology.num_tiers(); ++t) {
    const std::string& name = topology.tier(t).name;
    const std::optional<GroupSizeCurve>* found = calibration ? &calibration->tier(name).by_group_size : nullptr;
    const GroupSizeCurve* curve = found && *found ? &**found : nullptr;
    if (!curve) {
      notes.push_back(fmt::format("tier {}: no curve of achieved bandwidth by group size ({}): a ring's rate on it is "
                                  "the same at every size (docs/calibration.md \"By group size\")",
                                  name, calibration ? "the calibration has none" : "no --calibration"));
      continue;
    }
    std::vector<std::string> points;
    for (std::size_t i = 0; i < curve->sizes.size(); ++i)
      points.push_back(fmt::format("{:g} {:g} GB/s", curve->sizes[i], curve->bus_GBps[i]));
    // The largest ring on the tier: all its inner domains, or all the ranks of one of its domains.
    const double largest = curve->key == GroupSizeCurve::Key::Nodes ? topology.tier(t).size : topology.domain_ranks(t);
    notes.push_back(fmt::format(
        "tier {}: bus bandwidth a rank by {} in the ring, {}; log-linear in size between points, the nearest "
        "point's rate outside them{}", name,
        group_size_key_name(curve->key), fmt::join(points, ", "),
        curve->clamped(largest) ? fmt::format("; warning: rings of up to {:g} {} reach outside the measured sizes, "
                                              "priced at the nearest point's rate",
                                              largest, group_size_key_name(curve->key))
                                : std::string()));
  }
  return notes;
}

}  // namespace strata::plan
