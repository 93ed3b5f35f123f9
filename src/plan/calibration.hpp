#pragma once
// What `strata calibrate` measured on one machine or cluster, in the form the planner prices
// with (docs/calibration.md): per tier and collective, time against the bytes a rank sends;
// for compute, matmul time against its FLOPs, the share of the step's other kernels, Adam's
// memory rate, and how much a concurrent collective slows compute. One versioned TOML file;
// every refusal names the file and the field.
#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/collective.hpp"
#include "topo/topology.hpp"

namespace strata::plan {

// t = intercept + slope·x, least squares on relative error (weights 1/y²: a sweep over
// decades of sizes is fitted at every size, not only the largest), intercept kept >= 0.
struct LineFit {
  double intercept = 0, slope = 0;
};
LineFit fit_line_relative(const std::vector<double>& x, const std::vector<double>& y);

// One collective over one tier: t(n) = n / (B · n/(n + n½)) = (n + n½) / B for n bytes a
// rank sends; bus bandwidth B for large messages, half of it at n½. Its fixed cost
// α = n½ / B (latency of its `messages` sends and the call's launch) is what a small op pays.
// Where the sweep's points are kept (every file strata calibrate writes), an op is priced at
// them: linear between two measured sizes, the fitted B beyond the largest (the line alone
// misses a shaped host link by up to 49% at some sizes). The fit prices files without points.
// A calibration built from published figures may know B alone (a source that states only the
// large-message bus bandwidth): then `latency_known` is false and the op's fixed cost stays the
// topology's latency_us a message (docs/calibration.md "Shipped calibrations").
struct CollectiveCurve {
  double bus_GBps = 0;
  double half_bytes = 0;
  int messages = 0;                    // sends a rank of one call, as measured
  std::vector<double> bytes, seconds;  // the measured points, bytes increasing (may be empty when shipped)
  bool latency_known = true;           // false: half_bytes and messages unknown, the topology's latency is used

  // The same collective timed while every rank's compute thread runs matmuls beside it, as a
  // training step overlaps them (calibrate measures the sweep's sizes): where ranks share cores, a
  // message waits for its thread to be scheduled between compute. Absent (busy_GBps 0): the
  // op is priced as when alone. Same form, same `messages`.
  double busy_GBps = 0, busy_half_bytes = 0;
  std::vector<double> busy_bytes, busy_seconds;

  double latency_s() const { return half_bytes / (bus_GBps * 1e9); }
  double busy_latency_s() const { return busy_half_bytes / (busy_GBps * 1e9); }
  // An op of `sends` messages: the measured points' time at its bytes (the fitted curve
  // without points), plus α x (sends - messages) / messages (a ring over a group of another
  // size pays its own number of steps).
  double seconds_for(double bytes_sent, int sends) const;
  bool has_under_compute() const { return busy_GBps > 0; }
  // The op's time beside compute / alone, each at its own points (>= 1; 1 without the busy curve).
  double under_compute_factor(double bytes_sent, int sends) const;
  static CollectiveCurve fit(std::vector<double> bytes, std::vector<double> seconds, int messages);
  void fit_under_compute(std::vector<double> bytes, std::vector<double> seconds);
};

// A tier's achieved bus bandwidth a rank against the size of the group crossing it, from a
// measurement at several sizes (nccl-tests at scale, a paper's table): real fabrics deliver
// less to longer rings (congestion, adaptive routing, the job's placement), which the
// topology's one rate cannot say. A ring is priced on the curve at its own size: log-linear
// between two points (the rate linear in log size, as such tables are measured at doublings),
// the nearest point's rate outside the measured sizes.
struct GroupSizeCurve {
  enum class Key { Nodes, Ranks };  // nodes: the tier's inner domains the ring crosses; ranks: the ring's ranks
  Key key = Key::Nodes;
  std::vector<double> sizes, bus_GBps;  // sizes increasing, at least 2

  double bus_GBps_at(double size) const;
  bool clamped(double size) const { return size < sizes.front() || size > sizes.back(); }
};
std::string_view group_size_key_name(GroupSizeCurve::Key key);  // "nodes", "ranks"

struct TierCalibration {
  std::string name;
  int group_size = 0;     // ranks of the across-group it was measured on (0: the source does not say)
  int ranks_sharing = 0;  // ranks of one inner domain crossing the tier at once (shared ports included; 0: not said)
  // kCollectives order; a collective a shipped file has no figure for is empty, and its ops are
  // priced by the topology's α-β.
  std::array<std::optional<CollectiveCurve>, 4> curves;
  // The tier's rate by the crossing group's size, instead of the collectives' curves (a file
  // gives one or the other for a tier): every op's rate on the tier; latency stays the model's.
  std::optional<GroupSizeCurve> by_group_size{};
  // Compute's matmul time while this tier's all-reduces run beside it / alone (>= 1; 0: not
  // measured, the compute's overlap_slowdown). The planner slows compute by the factor of the
  // tier whose op is on the communication stream.
  double overlap_slowdown = 0;
  // The bytes a rank sent in one of the all-reduces overlap_slowdown was timed beside (0: not
  // recorded). With the tier's busy all-reduce curve it gives the rate beside which compute ran
  // overlap_slowdown times slower; an op moving fewer bytes a second slows compute less
  // (Calibration::compute_slowdown).
  double overlap_all_reduce_bytes = 0;

  const CollectiveCurve* find(Collective c) const {
    const auto& curve = curves[static_cast<int>(c)];
    return curve ? &*curve : nullptr;
  }
  const CollectiveCurve& curve(Collective c) const;  // throws Error naming the tier when it has none
};

// Compute of one rank, as it runs while every rank of the calibration computes at once.
// A matmul of F FLOPs takes (F + F½) / R: rate R for large ones, half of it at F½.
struct ComputeCalibration {
  double peak_gflops = 0;       // R
  double half_gflop = 0;        // F½
  double kernel_overhead = 1;   // measured forward+backward / its matmuls' curve time (norms, softmax, ...)
  double overlap_slowdown = 1;  // matmul time while the outermost tier's all-reduce runs / alone (>= 1);
                                // every tier's without a factor of its own (TierCalibration)
  double optimizer_GBps = 0;    // Adam: elements x (24 + 2 x 4) bytes / its time (the planner's count)
  // Block quantization on the cores that also compute (the CPU runtime codes int8/int4 wires
  // on its communication thread): fp32 bytes encoded plus decoded a second, every rank at
  // once. 0: not measured (a device's kernels; the codec is then not priced).
  double int8_codec_GBps = 0, int4_codec_GBps = 0;
  int threads = 1;              // OpenMP threads a rank computed with
  std::vector<double> gflop, seconds;  // the matmuls the curve was fitted to
  // Calibrate times compute in passes spread over its run (PassTimings); pass_spread is
  // the slowest pass's matmul time over the fastest's: far above 1, the machine changed speed
  // while it calibrated (1 and 1: one pass, or a file written before passes).
  int passes = 1;
  double pass_spread = 1;

  double matmul_seconds(double flops, int matmuls) const;  // (flops + matmuls·F½) / R
};

// The timings of one compute measurement, taken in passes spread over a calibration run: a
// spell of slow machine (a busy neighbour on a shared host) that covers one pass does not set
// the figure.
struct PassTimings {
  std::vector<std::vector<double>> passes;  // seconds of each timing, a vector a pass

  // The median of every pass's timings together: one slow pass of three moves it to the
  // fast passes' slowest timing at most.
  double pooled_median() const;
  double pass_median(std::size_t pass) const;
};
// Over measurements taken in the same passes: each pass's summed medians over the fastest
// pass's (empty without measurements). Throws Error when the measurements' passes differ in number.
std::vector<double> pass_ratios(const std::vector<PassTimings>& measurements);
// The slowest pass's ratio (>= 1; 1 with one pass or none).
double pass_spread(const std::vector<PassTimings>& measurements);

// The median of timings; throws Error when there are none.
double median(std::vector<double> timings);

// One GEMM of a measured table (strata calibrate --from-gemm-bench, plan/gemm_bench.hpp): an
// m x k by k x n product, 2mnk FLOPs, at the TFLOP/s it ran.
struct GemmPoint {
  double m = 0, n = 0, k = 0;
  std::string dtype;  // bf16 or fp16: the precision the device's peak is stated in
  double tflops = 0;
  int line = 0;  // of the table it was read from (0: from a calibration file)
  double flops() const { return 2 * m * n * k; }
};
// The table's FLOP-weighted rate, TFLOP/s: its FLOPs over their summed time (a step spends its
// time in the large GEMMs, so they weigh as they cost).
double flop_weighted_tflops(const std::vector<GemmPoint>& gemms);

struct Calibration {
  static constexpr int kVersion = 1;
  int version = kVersion;
  std::string topology;  // the topology's name when measured
  int world_size = 0;
  std::string command;   // what measured it
  std::vector<TierCalibration> tiers;  // innermost first, as the topology
  // Empty in a shipped calibration without a public compute figure: compute, Adam and overlap
  // are then priced from the device (peak x --compute-efficiency, HBM rate, no slowdown).
  std::optional<ComputeCalibration> compute;
  // A shipped file's `[compute] efficiency`, instead of a measured curve: the fraction of peak a
  // published training run on the device reached (model FLOPs / time / peak), which the planner
  // uses as the device's compute efficiency unless --compute-efficiency is given. 0: none.
  double compute_efficiency = 0;
  // Where compute_efficiency is a measured GEMM table's FLOP-weighted rate over the device's
  // peak: the table's GEMMs, and the device and peak divided by (empty: a published figure).
  std::vector<GemmPoint> gemms;
  std::string gemm_device;
  double gemm_peak_tflops = 0;

  static Calibration from_toml_string(std::string_view text, std::string_view origin = "<string>");
  static Calibration from_toml_file(const std::filesystem::path& path);
  std::string to_toml() const;
  nlohmann::json to_json() const;

  // The tier of this name; throws Error naming the calibration's tiers when it has none.
  const TierCalibration& tier(std::string_view name) const;
  const TierCalibration* find_tier(std::string_view name) const;  // nullptr when it has none
  std::vector<std::string_view> tier_names() const;
  // How much slower compute runs beside an op of this tier: its own factor, else compute's
  // (1 without a compute calibration).
  double overlap_slowdown(std::string_view tier) const;
  // Compute's slowdown beside an op of this tier that sends `bytes_per_second` a rank. Compute
  // loses (1 - 1/s) / R of a second per byte moved, at most 95% of its time: s the tier's
  // overlap_slowdown, R the rate its busy all-reduce curve gives the all-reduce s was timed
  // beside. Without overlap_all_reduce_bytes or that curve, overlap_slowdown whatever the rate.
  double compute_slowdown(std::string_view tier, double bytes_per_second) const;
  // R above, bytes a second (0: not known).
  double overlap_bytes_per_second(std::string_view tier) const;
  // Throws Error unless every tier of `topology` has a calibrated tier of its name.
  void check_covers(const topo::Topology& topology, std::string_view origin) const;
};

// What a plan says of the network's rate by group size, one line a tier above the innermost:
// the calibrated curve (and a warning where the topology's rings reach past its sizes), or
// that the calibration (or the plan, without one) has none and the rate is the same at every
// ring size.
std::vector<std::string> group_size_notes(const Calibration* calibration, const topo::Topology& topology);

}  // namespace strata::plan
