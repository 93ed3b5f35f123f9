// The whole model: gradients against float64 finite differences of a float64 reference
// model, the unit access order, accumulation, grad_scale, determinism, every instruction
// set, initialisation and bad input.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/cpu.hpp"
#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/gpt.hpp"
#include "model/init.hpp"
#include "model/recompute_check.hpp"
#include "model/recording_access.hpp"
#include "model/reference.hpp"

namespace strata::model {
namespace {

using ref::Vec;

// `tiny` with a vocabulary that does not fill its padding, so masking is exercised.
ModelConfig test_config() {
  ModelConfig c = ModelConfig::preset("tiny");
  c.vocab_size = 250;
  c.padded_vocab_size = 256;
  return c;
}

struct Problem {
  static constexpr int B = 2;
  int T = 16;
  ModelConfig config = test_config();
  ParamLayout layout{config};
  std::vector<float> params;
  std::vector<std::int32_t> tokens, targets;

  explicit Problem(int seq = 16, std::uint64_t seed = 11)
      : T(seq), params(layout.total_floats()), tokens(B * T), targets(B * T) {
    model::init_params(layout, params.data(), seed);
    // Give every norm gain and bias a non-trivial value, so each term of every gradient matters.
    Rng rng(seed, 1);
    for (auto& t : layout.tensors())
      if (t.shape.size() == 1)
        for (std::size_t i = 0; i < t.numel; ++i)
          params[t.offset + i] += static_cast<float>(0.1 * rng.normal());
    for (int i = 0; i < B * T; ++i) {
      tokens[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
      targets[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
    }
  }

  // Loss and gradients (grad_scale x mean loss) accumulated onto `grads`.
  float run(GPT& gpt, std::vector<float>& grads, float grad_scale = 1.f) {
    ArenaAccess access(layout, params.data(), grads.data());
    return gpt.forward_backward(access, tokens.data(), targets.data(), grad_scale);
  }
  std::vector<float> zero_grads() const { return std::vector<float>(layout.total_floats(), 0.f); }
};

// Tensor by tensor: |got - want| <= rtol |want| + tensor_rtol max|want over the tensor|, as
// rounding differences of a tensor's small entries scale with its large ones.
void expect_grads_close(const ParamLayout& layout, const float* got, const Vec& want, double rtol,
                        double tensor_rtol, const std::string& what) {
  for (auto& t : layout.tensors()) {
    double scale = 0;
    for (std::size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::abs(want[t.offset + i]));
    ref::expect_close(got + t.offset, want.data() + t.offset, t.numel, rtol, tensor_rtol * scale,
                      what + " " + t.name);
  }
}

TEST(Gpt, MatchesFloat64ReferenceAndFiniteDifferences) {
  Problem pb;
  GPT gpt(pb.config, Problem::B, pb.T);
  auto grads = pb.zero_grads();
  const float loss = pb.run(gpt, grads);

  Vec pd(pb.params.begin(), pb.params.end()), ref_logits;
  const double ref_loss = ref::gpt_loss(pb.layout, pd.data(), pb.tokens.data(), pb.targets.data(), Problem::B,
                                        pb.T, &ref_logits);
  EXPECT_NEAR(loss, ref_loss, 2e-6 * ref_loss);
  ref::expect_close(gpt.logits(), ref_logits.data(), ref_logits.size(), 1e-4, 2e-5, "logits");

  auto f = [&] { return ref::gpt_loss(pb.layout, pd.data(), pb.tokens.data(), pb.targets.data(), Problem::B, pb.T); };
  Rng rng(5);
  for (auto& t : pb.layout.tensors()) {
    SCOPED_TRACE(t.name);
    const float* g = grads.data() + t.offset;
    double* p = pd.data() + t.offset;
    double g_max = 0;
    for (std::size_t i = 0; i < t.numel; ++i) g_max = std::max(g_max, std::abs(static_cast<double>(g[i])));
    ASSERT_GT(g_max, 0) << "no gradient reached " << t.name;

    // The whole tensor at once: the derivative along a random direction.
    Vec dir(t.numel);
    double analytic = 0, dir_norm = 0;
    for (std::size_t i = 0; i < t.numel; ++i) {
      dir[i] = rng.normal();
      analytic += g[i] * dir[i];
      dir_norm += dir[i] * dir[i];
    }
    const double h = 1e-4;
    for (std::size_t i = 0; i < t.numel; ++i) p[i] += h * dir[i];
    const double up = f();
    for (std::size_t i = 0; i < t.numel; ++i) p[i] -= 2 * h * dir[i];
    const double down = f();
    for (std::size_t i = 0; i < t.numel; ++i) p[i] += h * dir[i];
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-3 * std::abs(numeric) + 1e-5 * g_max * std::sqrt(dir_norm))
        << "directional derivative";

    // And a few single elements.
    for (int s = 0; s < 3; ++s) {
      const std::size_t i = rng.below(t.numel);
      const double fd = ref::central_diff(f, p[i], 1e-4);
      EXPECT_NEAR(g[i], fd, 1e-3 * std::abs(fd) + 1e-4 * g_max) << "element " << i;
    }
  }
  // Rows of wte past the vocabulary and rows of wpe past T take no part in the loss.
  const TensorInfo& wte = pb.layout.find("wte.weight");
  for (std::size_t i = static_cast<std::size_t>(pb.config.vocab_size) * pb.config.n_embd; i < wte.numel; ++i)
    ASSERT_EQ(grads[wte.offset + i], 0.f) << "padded wte row";
  const TensorInfo& wpe = pb.layout.find("wpe.weight");
  for (std::size_t i = static_cast<std::size_t>(pb.T) * pb.config.n_embd; i < wpe.numel; ++i)
    ASSERT_EQ(grads[wpe.offset + i], 0.f) << "unused wpe row";
}

TEST(Gpt, UnitEventOrderIsTheDocumentedWalk) {
  // n_layer = 2: E = 0, blocks 1 and 2, F = 3.
  using K = UnitEvent;
  const Phase f = Phase::Forward, b = Phase::Backward;
  const std::vector<UnitEvent> want = {
      {K::Acquire, 0, f},    {K::Acquire, 1, f},    {K::Release, 1, f},  {K::Acquire, 2, f},
      {K::Release, 2, f},    {K::Acquire, 3, f},    {K::Release, 3, f},  {K::Release, 0, f},
      {K::Acquire, 3, b},    {K::Acquire, 0, b},    {K::Release, 0, b},  {K::Release, 3, b},
      {K::GradsReady, 3, b}, {K::Acquire, 2, b},    {K::Release, 2, b},  {K::GradsReady, 2, b},
      {K::Acquire, 1, b},    {K::Release, 1, b},    {K::GradsReady, 1, b}, {K::GradsReady, 0, b}};
  EXPECT_EQ(unit_event_order(test_config()), want);
  ModelConfig four = test_config();
  four.n_layer = 4;
  EXPECT_EQ(unit_event_order(four).size(), 10 + 5 * 4u);  // 2L + 4 forward, 3L + 6 backward
}

TEST(Gpt, ForwardBackwardFollowsTheUnitOrderAndReadsOnlyAcquiredUnits) {
  Problem pb;
  GPT gpt(pb.config, Problem::B, pb.T);
  auto grads = pb.zero_grads();
  const float loss = pb.run(gpt, grads);

  RecordingAccess rec(pb.layout, pb.params.data());
  const float rec_loss = gpt.forward_backward(rec, pb.tokens.data(), pb.targets.data(), 1.f);
  EXPECT_EQ(rec.events, unit_event_order(pb.config));
  rec.expect_no_writes_after_ready();
  // Same arithmetic on copies: bit-identical to the plain arena (no NaN leaked in).
  EXPECT_EQ(loss, rec_loss);
  EXPECT_EQ(0, std::memcmp(grads.data(), rec.all_grads().data(), grads.size() * sizeof(float)));

  RecordingAccess fwd(pb.layout, pb.params.data());
  EXPECT_EQ(gpt.forward(fwd, pb.tokens.data(), pb.targets.data()), loss);
  auto order = unit_event_order(pb.config);
  order.resize(2 * pb.config.n_layer + 4);  // up to release(E, Forward)
  EXPECT_EQ(fwd.events, order);
  fwd.expect_no_writes_after_ready();
}

// One rank of a TP group of 2 whose partner contributes nothing: the sums are this rank's
// own values and a gather repeats its part. The arithmetic is not the split model's; the
// calls are, which is what it records.
struct RecordingTensorParallelGroup final : TensorParallelGroup {
  std::vector<TensorParallelCall> calls;
  bool backward = false;
  void all_reduce_sum(float*, std::size_t n) override {
    calls.push_back({strata::Collective::AllReduce, n, strata::DType::F32, backward});
  }
  void all_gather(const float* mine, std::size_t n, float* all) override {
    calls.push_back({strata::Collective::AllGather, n, strata::DType::F32, backward});
    std::copy(mine, mine + n, all);
    std::copy(mine, mine + n, all + n);
  }
  void reduce_scatter_sum(const float* all, std::size_t n, float* mine) override {
    calls.push_back({strata::Collective::ReduceScatter, n, strata::DType::F32, backward});
    std::copy(all, all + n / 2, mine);
  }
};

// The access of a TP slice that marks where backward begins (the head's backward acquire).
struct PhaseMarkingAccess final : UnitAccess {
  ArenaAccess arena;
  RecordingTensorParallelGroup& group;
  PhaseMarkingAccess(const ParamLayout& layout, const float* params, float* grads, RecordingTensorParallelGroup& g)
      : arena(layout, params, grads), group(g) {}
  const float* acquire(int unit, Phase phase) override {
    if (phase == Phase::Backward) group.backward = true;
    return arena.acquire(unit, phase);
  }
  void release(int unit, Phase phase) override { arena.release(unit, phase); }
  float* grads(int unit) override { return arena.grads(unit); }
  void grads_ready(int unit) override { arena.grads_ready(unit); }
};

TEST(Gpt, TheTensorParallelCallsAreTheOnesTheSplitModelMakesInOrder) {
  // The one list the schedule (and so the accounting and the planner) takes: what
  // forward_backward runs, call by call, with and without recomputation and sequence parallelism.
  const ModelConfig config = test_config();
  const int B = 2, T = 16;
  for (bool sp : {false, true})
  for (bool recompute : {false, true}) {
    RecordingTensorParallelGroup group;
    GPT gpt(config, B, T, recompute, kernels_for(detected_isa()), TensorParallel{{2, 0}, &group, sp});
    std::vector<float> params(gpt.layout().total_floats()), grads(params.size(), 0.f);
    Rng rng(5, 0);
    for (float& p : params) p = static_cast<float>(0.02 * rng.normal());
    std::vector<std::int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; ++i) {
      tokens[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
      targets[i] = static_cast<std::int32_t>(rng.below(config.vocab_size));
    }
    PhaseMarkingAccess access(gpt.layout(), params.data(), grads.data(), group);
    gpt.forward_backward(access, tokens.data(), targets.data(), 1.f);
    EXPECT_EQ(group.calls, tensor_parallel_calls(config, 2, B, T, recompute, sp))
        << "recompute " << recompute << " sequence parallel " << sp;
    if (!sp) {
      EXPECT_EQ(group.calls,
                tensor_parallel_calls(TensorParallelWalk{config.n_layer, config.n_embd, B, T, recompute}));
    }
  }
}

TEST(Gpt, ATensorParallelWalkOfAPipelineStageHoldsOnlyItsEnds) {
  using K = TensorParallelCall;
  const std::size_t act = 2 * 8 * 32;
  using C = strata::Collective;
  using strata::DType;
  const K fwd{C::AllReduce, act, DType::BF16, false}, bwd{C::AllReduce, act, DType::BF16, true},
      loss{C::AllGather, 3 * 2 * 8, DType::F32, false};
  // First of two stages (3 blocks), bf16: the embedding's output, no head or loss.
  const std::vector<K> first = tensor_parallel_calls(TensorParallelWalk{3, 32, 2, 8, false, true, false, DType::BF16});
  EXPECT_EQ(first, std::vector<K>({fwd, fwd, fwd, fwd, fwd, fwd, fwd, bwd, bwd, bwd, bwd, bwd, bwd}));
  // Last stage, recomputing: no embedding; the loss's fp32 gather and the head's gradient.
  const std::vector<K> last = tensor_parallel_calls(TensorParallelWalk{1, 32, 2, 8, true, false, true, DType::BF16});
  EXPECT_EQ(last, std::vector<K>({fwd, fwd, loss, bwd, bwd, bwd, bwd, bwd}));
}

TEST(Gpt, RunsAreBitIdentical) {
  Problem pb(40);
  GPT a(pb.config, Problem::B, pb.T), b(pb.config, Problem::B, pb.T);
  auto ga = pb.zero_grads(), gb = pb.zero_grads(), ga2 = pb.zero_grads();
  const float la = pb.run(a, ga), lb = pb.run(b, gb), la2 = pb.run(a, ga2);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, la2);
  EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(ga.data(), ga2.data(), ga.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.logits(), b.logits(),
                           sizeof(float) * Problem::B * pb.T * pb.config.padded_vocab_size));
}

// Full activation recomputation: the same loss, logits and gradients bit for bit, at 1 and
// 3 threads (uneven row shares), over accumulated micro-batches with an evaluation between,
// in the documented unit order, holding only each block's input besides one block's set.
TEST(Gpt, RecomputationGivesTheSameLossAndGradientsBitForBit) {
  Problem pb(40);
  Problem other(40, 12);  // a second micro-batch
  test::expect_recomputation_changes_no_bit<GPT>(pb, other);
  // Only the layers after the first drop their sets: L - 1 blocks' worth less.
  const std::uint64_t kept_bytes = GPT::activation_bytes(pb.config, Problem::B, pb.T, false);
  const std::uint64_t again_bytes = GPT::activation_bytes(pb.config, Problem::B, pb.T, true);
  const std::uint64_t BT = Problem::B * pb.T, C = pb.config.n_embd, T = pb.T, NH = pb.config.n_head;
  const std::uint64_t block_set = 4 * (BT * (16 * C + 4) + Problem::B * NH * T * T);  // res3 (BT x C) excepted
  EXPECT_EQ(kept_bytes - again_bytes, (pb.config.n_layer - 1) * (block_set - 4 * BT * C));
}

// 1 and 2 threads split the batch of 2 into whole sequences; 3 threads take uneven row
// shares and synchronise around attention. All agree to rounding.
TEST(Gpt, ThreadCountsAgree) {
  Problem pb(40);
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    GPT gpt(pb.config, Problem::B, pb.T);
    grads.push_back(pb.zero_grads());
    losses.push_back(pb.run(gpt, grads.back()));
  }
  omp_set_num_threads(saved);
  const Vec want(grads[0].begin(), grads[0].end());
  for (int i : {1, 2}) {
    EXPECT_NEAR(losses[i], losses[0], 1e-6 * losses[0]);
    expect_grads_close(pb.layout, grads[i].data(), want, 1e-5, 1e-6, std::to_string(i + 1) + " threads");
  }
}

TEST(Gpt, GradientsAccumulate) {
  Problem pb;
  GPT gpt(pb.config, Problem::B, pb.T);
  auto fresh = pb.zero_grads();
  pb.run(gpt, fresh);
  Rng rng(3);
  auto start = ref::random_floats(fresh.size(), rng, 0.01);
  auto acc = start;
  pb.run(gpt, acc);
  Vec want(fresh.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(start[i]) + fresh[i];
  expect_grads_close(pb.layout, acc.data(), want, 1e-6, 1e-6, "start + gradient");
}

TEST(Gpt, GradScaleScalesEveryGradient) {
  Problem pb;
  GPT gpt(pb.config, Problem::B, pb.T);
  auto g1 = pb.zero_grads(), g4 = pb.zero_grads(), g03 = pb.zero_grads();
  const float l1 = pb.run(gpt, g1, 1.f), l4 = pb.run(gpt, g4, 4.f), l03 = pb.run(gpt, g03, 0.3f);
  EXPECT_EQ(l1, l4);
  EXPECT_EQ(l1, l03);
  Vec want4(g1.size()), want03(g1.size());
  for (std::size_t i = 0; i < g1.size(); ++i) {
    want4[i] = 4.0 * g1[i];
    want03[i] = 0.3 * g1[i];
  }
  // A power of two scales every rounding step exactly.
  expect_grads_close(pb.layout, g4.data(), want4, 0, 0, "grad_scale 4");
  expect_grads_close(pb.layout, g03.data(), want03, 1e-5, 1e-5, "grad_scale 0.3");
}

TEST(Gpt, BadInputIsRefusedBeforeAnyUnitIsAcquired) {
  Problem pb;
  GPT gpt(pb.config, Problem::B, pb.T);
  auto expect_refused = [&](std::vector<std::int32_t> tokens, std::vector<std::int32_t> targets, const char* what) {
    RecordingAccess rec(pb.layout, pb.params.data());
    try {
      gpt.forward_backward(rec, tokens.data(), targets.data(), 1.f);
      ADD_FAILURE() << "accepted a bad " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_TRUE(rec.events.empty());
  };
  auto tokens = pb.tokens, targets = pb.targets;
  tokens[5] = 250;  // inside the padding, outside the vocabulary
  expect_refused(tokens, pb.targets, "token id 250 at position 5");
  targets[31] = -1;
  expect_refused(pb.tokens, targets, "target id -1 at position 31");

  EXPECT_THROW(GPT(pb.config, 0, 16), Error);
  EXPECT_THROW(GPT(pb.config, 2, 0), Error);
  EXPECT_THROW(GPT(pb.config, 2, pb.config.seq_len + 1), Error);
}

// The scheme written out whole, tensor by tensor and chunk by chunk from each chunk's first
// pair: what init_params produced before it initialised ranges.
std::vector<float> whole_arena_walk(const ParamLayout& layout, std::uint64_t seed) {
  const ModelConfig& cfg = layout.config();
  std::vector<float> out(layout.total_floats(), 0.f);
  constexpr std::size_t kChunk = 1 << 16;
  for (std::size_t ti = 0; ti < layout.tensors().size(); ++ti) {
    const TensorInfo& t = layout.tensors()[ti];
    if (t.shape.size() == 1) {
      if (t.name.ends_with(".weight")) std::fill_n(out.begin() + t.offset, t.numel, 1.f);
      continue;
    }
    const double stddev = t.name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
    const std::size_t n = t.name == "wte.weight" ? static_cast<std::size_t>(cfg.vocab_size) * cfg.n_embd : t.numel;
    for (std::size_t c = 0; c * kChunk < n; ++c) {
      Rng rng(seed, (static_cast<std::uint64_t>(ti) << 32) | c);
      const std::size_t end = std::min(n, (c + 1) * kChunk);
      for (std::size_t i = c * kChunk; i < end; i += 2) {
        const auto z = rng.normal_pair();
        out[t.offset + i] = static_cast<float>(stddev * z[0]);
        if (i + 1 < end) out[t.offset + i + 1] = static_cast<float>(stddev * z[1]);
      }
    }
  }
  return out;
}

// Sharded initialisation: any arena range gets exactly the whole arena's values, and nothing
// outside the range is written. The model has tensors of several 64Ki chunks, so ranges
// start and end inside chunks, inside pairs, in padding and across tensors.
TEST(Gpt, InitParamsRangeEqualsTheWholeArenaBitForBit) {
  ModelConfig cfg = ModelConfig::preset("tiny");
  cfg.n_embd = 192;
  cfg.vocab_size = 1000;
  cfg.padded_vocab_size = 1024;
  ParamLayout layout(cfg);
  const std::size_t total = layout.total_floats();
  std::vector<float> full(total);
  model::init_params(layout, full.data(), 5);
  const std::vector<float> want = whole_arena_walk(layout, 5);
  ASSERT_EQ(0, std::memcmp(full.data(), want.data(), 4 * total));

  std::vector<std::pair<std::size_t, std::size_t>> ranges = {{0, total}, {0, 1}, {total - 1, total}, {7, 7}};
  const std::size_t wte = layout.find("wte.weight").offset;
  for (std::size_t edge : {wte + 65536, wte + 2 * 65536, wte + 1000 * 192, layout.find("h.1.mlp.c_fc.weight").offset})
    for (std::size_t a : {edge - 3, edge - 1, edge, edge + 1})
      for (std::size_t b : {edge + 1, edge + 2, edge + 65537}) ranges.push_back({a, std::min(b, total)});
  Rng rng(9);
  for (int i = 0; i < 40; ++i) {  // up to a little over a chunk long
    const std::size_t a = rng.below(total);
    ranges.push_back({a, std::min(total, a + 1 + rng.below(70000))});
  }
  for (auto [begin, end] : ranges) {
    SCOPED_TRACE(::testing::Message() << "range [" << begin << ", " << end << ")");
    // One guard float either side must keep its value.
    std::vector<float> got(end - begin + 2, -3.f);
    model::init_params_range(layout, begin, end, got.data() + 1, 5);
    ASSERT_EQ(got.front(), -3.f);
    ASSERT_EQ(got.back(), -3.f);
    ASSERT_EQ(0, std::memcmp(got.data() + 1, full.data() + begin, 4 * (end - begin)));
  }
  std::vector<float> out(4);
  EXPECT_THROW(model::init_params_range(layout, total - 2, total + 2, out.data(), 5), Error);
  EXPECT_THROW(model::init_params_range(layout, 3, 2, out.data(), 5), Error);
}

TEST(Gpt, InitParamsFollowsGpt2) {
  ModelConfig cfg = test_config();
  cfg.n_layer = 3;
  ParamLayout layout(cfg);
  std::vector<float> a(layout.total_floats(), 7.f), b(layout.total_floats()), c(layout.total_floats());
  model::init_params(layout, a.data(), 1);
  model::init_params(layout, b.data(), 1);
  model::init_params(layout, c.data(), 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);

  std::vector<char> is_tensor(a.size(), 0);
  for (auto& t : layout.tensors()) {
    SCOPED_TRACE(t.name);
    std::fill(is_tensor.begin() + t.offset, is_tensor.begin() + t.offset + t.numel, 1);
    std::size_t n = t.numel;
    if (t.name == "wte.weight") {
      n = static_cast<std::size_t>(cfg.vocab_size) * cfg.n_embd;
      for (std::size_t i = n; i < t.numel; ++i) ASSERT_EQ(a[t.offset + i], 0.f) << "padded row";
    }
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      sum += a[t.offset + i];
      sq += static_cast<double>(a[t.offset + i]) * a[t.offset + i];
    }
    const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
    const bool is_norm_gain = t.shape.size() == 1 && t.name.ends_with(".weight");
    if (t.shape.size() == 1) {
      EXPECT_EQ(mean, is_norm_gain ? 1.0 : 0.0);
      EXPECT_EQ(stddev, 0.0);
    } else {
      const double want = t.name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * cfg.n_layer) : 0.02;
      EXPECT_NEAR(stddev, want, 0.05 * want);
      EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(static_cast<double>(n)));
    }
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!is_tensor[i]) {
      ASSERT_EQ(a[i], 0.f) << "alignment padding at " << i;
    }
}

// Every instruction set runs the same micro-step: each path in a child process with
// STRATA_ISA set (the ISA is chosen once per process), compared against the scalar path.
TEST(GptIsaChild, DISABLED_DumpLossAndGradients) {
  const char* path = std::getenv("STRATA_TEST_DUMP");
  ASSERT_NE(path, nullptr) << "run by GptIsa.PathsAgree";
  Problem pb(40);  // two attention row blocks
  GPT gpt(pb.config, Problem::B, pb.T);
  auto grads = pb.zero_grads();
  const float loss = pb.run(gpt, grads);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&loss), sizeof loss);
  out.write(reinterpret_cast<const char*>(grads.data()), static_cast<std::streamsize>(grads.size() * sizeof(float)));
  ASSERT_TRUE(out.good());
}

TEST(GptIsa, PathsAgree) {
  const Problem pb(40);
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::map<Isa, std::vector<float>> results;  // loss, then gradients
  for (int i = 0; i <= static_cast<int>(detected_isa()); ++i) {
    const Isa isa = static_cast<Isa>(i);
    const std::string file = (dir / ("strata_gpt_isa_" + std::to_string(::getpid()) + "_" +
                                     std::string(isa_name(isa)))).string();
    const std::string cmd = "STRATA_ISA=" + std::string(isa_name(isa)) + " STRATA_TEST_DUMP=" + file +
                            " " + self + " --gtest_also_run_disabled_tests"
                            " --gtest_filter=GptIsaChild.DISABLED_DumpLossAndGradients > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<float>& r = results[isa];
    r.resize(1 + pb.layout.total_floats());
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(r.data()), static_cast<std::streamsize>(r.size() * sizeof(float)));
    ASSERT_TRUE(in.good()) << file;
    std::filesystem::remove(file);
  }
  const std::vector<float>& scalar = results.at(Isa::Scalar);
  const Vec want(scalar.begin() + 1, scalar.end());
  for (auto& [isa, r] : results) {
    EXPECT_NEAR(r[0], scalar[0], 1e-6 * scalar[0]) << isa_name(isa) << " loss";
    expect_grads_close(pb.layout, r.data() + 1, want, 1e-5, 1e-5, std::string(isa_name(isa)));
  }
}

}  // namespace
}  // namespace strata::model
