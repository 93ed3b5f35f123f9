#include "calibrate/measure.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/plural.hpp"
#include "comm/backends/tier_comms.hpp"
#include "comm/runtime/agree.hpp"
#include "comm/runtime/context.hpp"
#include "comm/runtime/mpi_session.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "plan/model_shapes.hpp"
#include "quant/quant.hpp"
#include "shard/spec.hpp"
#include "topo/groups.hpp"
#include "train/local_engine.hpp"

namespace strata::calibrate {
namespace {

double world_max(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double world_mean(double mine) {
  double sum = 0;
  int world = 1;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return sum / world;
}

// `iterations` timings of `run`, each the slowest rank's: a step waits for its slowest rank.
template <class F>
std::vector<double> slowest_timings(int iterations, F&& run) {
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    run();
    times.push_back(world_max(MPI_Wtime() - t0));
  }
  return times;
}

template <class F>
double time_collective(int iterations, F&& run) {
  const double once = slowest_timings(1, run).front();  // the warm-up, timed to choose how many timings
  return plan::median(
      slowest_timings(once < kCheapCollective_s ? std::max(iterations, kMinCollectiveTimings) : iterations, run));
}

// Compute timings repeat their kernel until a timing lasts at least this long: where ranks
// share cores, a kernel shorter than the scheduler's slice is timed alone or four times over
// depending on whether it was preempted; a longer run averages the sharing a step sees.
constexpr double kMinComputeTiming_s = 0.05;

// Runs `run` once (a warm-up) and returns how often every rank must repeat it for a timing
// to reach kMinComputeTiming_s: the same count on every rank.
template <class F>
int repetitions_for(F&& run) {
  const double t0 = MPI_Wtime();
  run();
  const double once = world_max(MPI_Wtime() - t0);
  return std::clamp(static_cast<int>(std::ceil(kMinComputeTiming_s / std::max(once, 1e-9))), 1, 100000);
}

// `timings` timings of `run` repeated repetitions_for(run) times, a run's share of each (after
// a warm-up of the repeated run), appended to `out` as one pass.
template <class F>
void time_pass_repeated(int timings, plan::PassTimings& out, F&& run) {
  const int reps = repetitions_for(run);
  auto repeated = [&] {
    for (int i = 0; i < reps; ++i) run();
  };
  repeated();
  std::vector<double> pass = slowest_timings(timings, repeated);
  for (double& t : pass) t /= reps;
  out.passes.push_back(std::move(pass));
}

// The sizes of the sweep: `points` buffer sizes from min_kib to max_mib, evenly on a log scale.
std::vector<std::size_t> sweep_bytes(const MeasureOptions& o) {
  std::vector<std::size_t> out;
  const double lo = o.min_kib * 1024, hi = o.max_mib * 1024 * 1024;
  for (int i = 0; i < o.points; ++i) {
    const double b = lo * std::pow(hi / lo, o.points == 1 ? 0.0 : double(i) / (o.points - 1));
    out.push_back(std::max<std::size_t>(4, static_cast<std::size_t>(b) / 4 * 4));
  }
  return out;
}

// The group a schedule op of tier t runs on: the innermost tier's own group, else the tier's across-group.
comm::Collectives& tier_group(comm::TierComms& comms, int t) {
  return t == 0 ? static_cast<comm::Collectives&>(comms.within(0)) : comms.across(t);
}

// What this rank sent on tier t during `run`, as the accounting counts it (the curves' x axis).
template <class Run>
comm::TierTraffic sent_on_tier(comm::Context& ctx, int t, Run&& run) {
  const comm::CommStats before = ctx.accounting().snapshot();
  run();
  return (ctx.accounting().snapshot() - before).tiers[t];
}

// A rank's fp32 chunk of a sweep buffer over a group: what sets the bytes it sends.
std::size_t sweep_chunk(std::size_t buffer_bytes, int group) { return comm::chunk_count(buffer_bytes / 4, group, 1); }

// The fp32 buffers of one sweep size over a group: the full buffer, a rank's chunk of it,
// and an all-to-all's receive side.
struct SweepBuffers {
  std::vector<float> full, shard, recv;
  SweepBuffers(std::size_t buffer_bytes, int group) {
    const std::size_t chunk = sweep_chunk(buffer_bytes, group);
    full.assign(chunk * group, 1.0f), shard.assign(chunk, 1.0f), recv.resize(chunk * group);
  }

  // One collective of `kind` over `c`.
  void run(comm::Collectives& c, Collective kind) {
    const std::size_t n = full.size(), chunk = shard.size();
    switch (kind) {
      case Collective::AllGather: return c.all_gather(comm::f32(shard.data(), chunk), comm::f32(full.data(), n));
      case Collective::ReduceScatter:
        return c.reduce_scatter(comm::f32(full.data(), n), comm::f32(shard.data(), chunk), comm::ReduceOp::Avg);
      case Collective::AllReduce: return c.all_reduce(comm::f32(full.data(), n), comm::ReduceOp::Avg);
      case Collective::AllToAll:
        return c.all_to_all(comm::f32(full.data(), n), comm::f32(recv.data(), recv.size()));
    }
  }
};

// Tier t's collectives over its across-group (the group a schedule op of level t runs on),
// every rank at once; the curve is fitted to the bytes a rank sent, as the accounting counts them.
plan::TierCalibration calibrate_tier(comm::Context& ctx, comm::TierComms& comms, int t, const MeasureOptions& o) {
  const topo::Topology& topology = ctx.topology();
  comm::Collectives& c = tier_group(comms, t);
  plan::TierCalibration tier;
  tier.name = topology.tier(t).name;
  tier.group_size = c.size();
  tier.ranks_sharing = topology.domain_ranks(t - 1);
  for (Collective kind : kCollectives) {
    std::vector<double> bytes, seconds;
    int messages = 0;
    for (std::size_t buffer : sweep_bytes(o)) {
      SweepBuffers b(buffer, c.size());
      const comm::TierTraffic sent = sent_on_tier(ctx, t, [&] { b.run(c, kind); });
      const double s = time_collective(o.iterations, [&] { b.run(c, kind); });
      bytes.push_back(world_mean(static_cast<double>(sent.bytes_sent)));
      seconds.push_back(s);
      messages = static_cast<int>(std::lround(world_mean(static_cast<double>(sent.messages))));
    }
    tier.curves[static_cast<int>(kind)] = plan::CollectiveCurve::fit(std::move(bytes), std::move(seconds), messages);
  }
  return tier;
}

struct MatmulShape {
  int rows, in, out;
  double flops() const { return 2.0 * rows * in * out; }
};

// y = x W^T of one shape, on buffers made once.
struct Matmul {
  MatmulShape s;
  std::vector<float> x, w, y;
  explicit Matmul(MatmulShape shape)
      : s(shape), x(std::size_t(s.rows) * s.in, 0.5f), w(std::size_t(s.out) * s.in, 0.25f), y(std::size_t(s.rows) * s.out) {}
  void run() { model::matmul_forward(y.data(), x.data(), w.data(), s.in, s.out, false, model::Range{0, s.rows}); }
};

// The linear layers of the model at the plan's tokens a micro-batch, and at a quarter and a
// sixteenth of them: the curve spans the sizes the step runs and smaller.
std::vector<MatmulShape> model_matmuls(const model::ModelConfig& config, int tokens) {
  const int C = config.n_embd;
  std::vector<MatmulShape> out;
  for (int rows : {tokens, std::max(1, tokens / 4), std::max(1, tokens / 16)})
    for (auto [in, o] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, config.padded_vocab_size}})
      out.push_back({rows, in, o});
  return out;
}

// The model's widest matmul (the MLP's up-projection) at a micro-batch's tokens.
MatmulShape widest_matmul(const MeasureOptions& o) {
  const model::ModelConfig config = model::ModelConfig::preset(o.model);
  return {o.micro_batch * (o.seq > 0 ? o.seq : config.seq_len), config.n_embd, 4 * config.n_embd};
}

// The model's widest matmul, run over and over on a thread of its own until stopped: the
// compute a training step runs beside its collectives.
class ComputeBeside {
 public:
  explicit ComputeBeside(const MeasureOptions& o)
      : wide_(widest_matmul(o)), thread_([this] {
          while (!stop_.load(std::memory_order_relaxed)) wide_.run();
        }) {}
  ~ComputeBeside() {
    stop_ = true;
    thread_.join();
  }

 private:
  Matmul wide_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Each tier's collectives again, at every size of the sweep, while every rank computes
// beside them: the busy curve the planner prices the part of an op that overlaps compute
// with (where ranks share cores, a message waits for its thread). Fitted like the alone
// curve, over the same sizes: two points let one slice of scheduler noise at either end set
// the curve (a busy bandwidth above the alone one, a latency of tens of ms).
void calibrate_under_compute(comm::Context& ctx, comm::TierComms& comms, plan::Calibration& cal, const MeasureOptions& o) {
  const std::vector<std::size_t> sweep = sweep_bytes(o);
  MPI_Barrier(MPI_COMM_WORLD);
  ComputeBeside beside(o);
  for (int t = 0; t < ctx.topology().num_tiers(); ++t) {
    comm::Collectives& c = tier_group(comms, t);
    for (Collective kind : kCollectives) {
      plan::CollectiveCurve& curve = *cal.tiers[t].curves[static_cast<int>(kind)];
      std::vector<double> bytes, seconds;
      for (std::size_t i = 0; i < sweep.size(); ++i) {
        SweepBuffers b(sweep[i], c.size());
        bytes.push_back(curve.bytes[i]);  // the same buffers send what the sweep counted
        seconds.push_back(time_collective(o.iterations, [&] { b.run(c, kind); }));
      }
      curve.fit_under_compute(std::move(bytes), std::move(seconds));
    }
  }
}

// Block quantization as the CPU runtime codes a quantized wire (encode, then decode-and-add),
// on the sweep's largest buffer, every rank at once: one pass of its timings.
void time_codec_pass(DType bits, const MeasureOptions& o, plan::PassTimings& out) {
  const quant::QuantSpec spec{bits, shard::ShardSpec{}.block_size};
  const std::size_t n = sweep_bytes(o).back() / 4;
  std::vector<float> src(n), dst(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) src[i] = std::sin(0.001 * static_cast<double>(i));
  std::vector<std::uint8_t> data(quant::quantized_bytes(n, spec));
  std::vector<float> scales(quant::num_blocks(n, spec));
  time_pass_repeated(timings_per_pass(o), out, [&] {
    quant::quantize(src.data(), n, spec, data.data(), scales.data());
    quant::dequantize_add(data.data(), scales.data(), n, spec, dst.data());
  });
}

// The compute measurements, timed in passes (kComputePasses) between the collective sweeps:
// the model's matmuls over the plan's shapes, its whole forward and backward, Adam, and the
// int8/int4 wire codecs. Buffers are made afresh each pass (the largest shapes' weights would
// hold hundreds of MB a rank through the sweeps).
class ComputeTimer {
 public:
  explicit ComputeTimer(const MeasureOptions& o)
      : o_(o),
        config_(model::ModelConfig::preset(o.model)),
        seq_(o.seq > 0 ? o.seq : config_.seq_len),
        shapes_(model_matmuls(config_, o.micro_batch * seq_)),
        matmuls_(shapes_.size()) {}

  void time_pass() {
    const int timings = timings_per_pass(o_);
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      Matmul m(shapes_[i]);
      time_pass_repeated(timings, matmuls_[i], [&] { m.run(); });
    }
    train::LocalEngine engine(config_, o_.micro_batch, seq_, /*seed=*/1);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(o_.micro_batch) * seq_);
    std::mt19937_64 rng(42);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(config_.vocab_size));
    time_pass_repeated(timings, step_, [&] { engine.micro_step(ids.data(), ids.data(), 1.0f); });
    int step = 0;
    time_pass_repeated(timings, adam_, [&] { engine.optimizer_step({}, train::StepArgs{1e-4f, ++step}); });
    time_codec_pass(DType::I8, o_, int8_);
    time_codec_pass(DType::I4, o_, int4_);
  }

  // The passes' pooled medians, fitted.
  plan::ComputeCalibration fit() const {
    plan::ComputeCalibration c;
    c.threads = omp_get_max_threads();
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      c.gflop.push_back(shapes_[i].flops() / 1e9);
      c.seconds.push_back(matmuls_[i].pooled_median());
    }
    const plan::LineFit fit = plan::fit_line_relative(c.gflop, c.seconds);
    c.peak_gflops = 1 / fit.slope;
    c.half_gflop = fit.intercept / fit.slope;

    // The whole forward and backward against what the matmul curve says its matmuls take.
    const plan::ModelShape shape = plan::ModelShape::preset(o_.model);
    const std::vector<double> flops = shape.forward_flops_per_token(seq_);
    const std::vector<int> matmuls = shape.forward_matmuls();
    const double tokens = static_cast<double>(o_.micro_batch) * seq_;
    double curve_s = 0;
    for (std::size_t u = 0; u < flops.size(); ++u) curve_s += 3 * c.matmul_seconds(flops[u] * tokens, matmuls[u]);
    c.kernel_overhead = std::max(1.0, step_.pooled_median() / curve_s);

    // Adam over every parameter, in the planner's count of its bytes (fp32: 24 + 2 x 4 an element).
    c.optimizer_GBps = static_cast<double>(config_.num_params()) * 32.0 / adam_.pooled_median() / 1e9;
    const double codec_bytes = 2.0 * static_cast<double>(sweep_bytes(o_).back() / 4 * 4);
    c.int8_codec_GBps = codec_bytes / int8_.pooled_median() / 1e9;
    c.int4_codec_GBps = codec_bytes / int4_.pooled_median() / 1e9;
    c.passes = static_cast<int>(step_.passes.size());
    c.pass_spread = plan::pass_spread(matmuls_);
    return c;
  }

  // Each pass's matmul time over the fastest pass's (the spread's parts, for the report).
  std::vector<double> pass_ratios() const { return plan::pass_ratios(matmuls_); }

 private:
  const MeasureOptions& o_;
  model::ModelConfig config_;
  int seq_;
  std::vector<MatmulShape> shapes_;
  std::vector<plan::PassTimings> matmuls_;
  plan::PassTimings step_, adam_, int8_, int4_;
};

// Sets `tier`'s overlap_slowdown: how much slower the model's widest matmul runs while tier t's
// all-reduces run on the communication thread, queued to outlast it, every group of the tier at
// once: the median ratio of `iterations` pairs (one pair swings with where the scheduler's slices fall).
// Per tier: beside a copy through shared memory the cores are busy moving bytes, beside a
// transfer over a NIC they mostly wait (the planner applies the factor of the op on the stream).
// And its overlap_all_reduce_bytes, what a rank sends in one of those all-reduces: the planner
// takes the rate the tier's busy all-reduce curve gives that op as the rate beside which compute
// ran s times slower, and scales an op's slowdown by the bytes a second the op moves against it.
void overlap_slowdown(comm::Context& ctx, comm::TierComms& comms, int t, const MeasureOptions& o,
                      plan::TierCalibration& tier) {
  Matmul wide(widest_matmul(o));
  const int reps = repetitions_for([&] { wide.run(); });
  auto run_reps = [&] {
    const double start = MPI_Wtime();
    for (int i = 0; i < reps; ++i) wide.run();
    return MPI_Wtime() - start;
  };
  comm::Collectives& group = tier_group(comms, t);
  SweepBuffers b(overlap_bytes(o), group.size());
  auto all_reduce = [&] { b.run(group, Collective::AllReduce); };
  const double sent = world_mean(static_cast<double>(sent_on_tier(ctx, t, all_reduce).bytes_sent));
  all_reduce();  // a warm-up
  const double one_s = plan::median(slowest_timings(o.iterations, all_reduce));
  std::vector<double> ratios;
  for (int trial = 0; trial < o.iterations; ++trial) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double alone = world_max(run_reps());
    // Queued to outlast the matmuls even if they slow down threefold.
    const int queued = std::clamp(static_cast<int>(std::ceil(3 * alone / one_s)) + 1, 2, 10000);
    std::vector<comm::Work> inflight;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < queued; ++i)
      inflight.push_back(group.all_reduce_async(comm::f32(b.full.data(), b.full.size()), comm::ReduceOp::Avg));
    const double beside = run_reps();
    for (comm::Work& w : inflight) w.wait();
    ratios.push_back(world_max(beside) / alone);
  }
  tier.overlap_slowdown = std::max(1.0, plan::median(ratios));
  tier.overlap_all_reduce_bytes = sent;
}

}  // namespace

int timings_per_pass(const MeasureOptions& o) {
  return (std::max(o.iterations, kMinComputeTimings) + kComputePasses - 1) / kComputePasses;
}

std::size_t overlap_bytes(const MeasureOptions& o) {
  std::vector<std::size_t> numel = plan::ModelShape::preset(o.model).unit_plan().numel;
  std::nth_element(numel.begin(), numel.begin() + numel.size() / 2, numel.end());
  const std::vector<std::size_t> sweep = sweep_bytes(o);
  return std::clamp(numel[numel.size() / 2] * 4, sweep.front(), sweep.back());
}

Measured measure(const MeasureOptions& o) {
  const comm::MpiSession& mpi = comm::mpi_session();
  std::optional<topo::Topology> loaded;
  comm::agree(MPI_COMM_WORLD, "world", [&] {
    if (o.topology.empty()) throw Error("calibrate: --topology: required (a preset or a TOML file)");
    if (o.out.empty()) throw Error("calibrate: --out: required (the calibration file to write)");
    if (!(o.min_kib > 0)) throw Error(fmt::format("calibrate: --min-kib {} must be positive", o.min_kib));
    if (!(o.max_mib * 1024 > o.min_kib))
      throw Error(fmt::format("calibrate: --max-mib {} must be above --min-kib {} KiB", o.max_mib, o.min_kib));
    if (o.points < 2) throw Error(fmt::format("calibrate: --points {} must be at least 2", o.points));
    if (o.iterations < 1) throw Error(fmt::format("calibrate: --iterations {} must be at least 1", o.iterations));
    if (o.micro_batch < 1) throw Error(fmt::format("calibrate: --micro-batch {} must be positive", o.micro_batch));
    const model::ModelConfig config = model::ModelConfig::preset(o.model);
    if (o.seq < 0 || o.seq > config.seq_len)
      throw Error(fmt::format("calibrate: --seq {} must be in 1..{} (model '{}')", o.seq, config.seq_len, o.model));
    loaded.emplace(topo::Topology::load(o.topology));
    for (const auto& spec : o.tier_overrides) loaded->apply_override(topo::parse_tier_override(spec));
    loaded->resolve(mpi.world_size());
    // A tier of one member a group sends nothing: there is no curve to measure.
    for (const topo::Tier& t : loaded->tiers())
      if (t.size < 2)
        throw Error(fmt::format("calibrate: tier '{}' has {} a group at {}: nothing crosses it; run more ranks "
                                "(mpirun -np {})",
                                t.name, count_of(t.size, "member"), count_of(mpi.world_size(), "rank"),
                                2 * mpi.world_size() / std::max(1, t.size)));
    // The planner prices an op between the sweep's points: each size must send more than the one before.
    const std::vector<std::size_t> sweep = sweep_bytes(o);
    for (const topo::Tier& t : loaded->tiers())
      for (std::size_t i = 1; i < sweep.size(); ++i)
        if (sweep_chunk(sweep[i], t.size) <= sweep_chunk(sweep[i - 1], t.size))
          throw Error(fmt::format("calibrate: --points {}: sizes {} and {} bytes send the same over tier '{}' (a "
                                  "group of {}); use fewer points or a wider --min-kib..--max-mib",
                                  o.points, sweep[i - 1], sweep[i], t.name, t.size));
  });
  comm::Context ctx(*loaded);
  const topo::Topology& topology = ctx.topology();
  topo::ProcessGroups groups(topology);
  comm::TierComms comms(ctx, groups);

  plan::Calibration cal;
  cal.topology = topology.name();
  cal.world_size = topology.world_size();
  cal.command = o.command_line;
  ComputeTimer compute(o);
  compute.time_pass();
  for (int t = 0; t < topology.num_tiers(); ++t) cal.tiers.push_back(calibrate_tier(ctx, comms, t, o));
  compute.time_pass();
  calibrate_under_compute(ctx, comms, cal, o);
  compute.time_pass();
  cal.compute = compute.fit();
  for (int t = 0; t < topology.num_tiers(); ++t) overlap_slowdown(ctx, comms, t, o, cal.tiers[t]);
  // Kept beside the per-tier factors: the file's one factor for every tier (the outermost's).
  cal.compute->overlap_slowdown = cal.tiers.back().overlap_slowdown;
  return {std::move(cal), compute.pass_ratios()};
}

}  // namespace strata::calibrate
