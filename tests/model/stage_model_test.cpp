// A pipeline stage's model (make_stage_model) holds activations for its part of the walk only:
// two stages driven by hand, the residual stream and its gradient copied between them, give
// the whole model's loss and gradients bit for bit, with and without recomputation, for GPT-2
// and Llama; a stage refuses the residual stream outside its layers and allocates less. Under
// tensor parallelism 2 with sequence parallelism (a TP group of two threads) a stage hands on
// its TP rank's half of the token rows, and the two stages compute the whole sequence-parallel
// model's loss and gradients bit for bit, running the TP collectives their schedule lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "model/init.hpp"
#include "model/model.hpp"
#include "model/stage_walk.hpp"

namespace strata::model {
namespace {

constexpr int kB = 2, kT = 16;

struct Run {
  float loss = 0;
  std::vector<float> grads;
};

// A TP group of `ranks` threads of this process: each rank publishes its buffer and reads
// every rank's in rank order, so every rank gets the same bits. Each Rank records its calls.
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks) : ranks_(ranks), sync_(ranks), in_(ranks) {}

  class Rank final : public TensorParallelGroup {
   public:
    Rank(ThreadGroup& group, int rank) : g_(group), r_(rank) {}
    std::vector<TensorParallelCall> calls;
    bool backward = false;  // set by the caller where the walk's backward begins

    void all_reduce_sum(float* data, std::size_t n) override {
      record(Collective::AllReduce, n);
      std::vector<float> sum(n, 0.f);
      for (const float* x : publish(data))
        for (std::size_t i = 0; i < n; ++i) sum[i] += x[i];
      g_.sync_.arrive_and_wait();  // every rank has read `data`
      std::copy(sum.begin(), sum.end(), data);
    }
    void all_gather(const float* mine, std::size_t n, float* all) override {
      record(Collective::AllGather, n);
      const auto& in = publish(mine);
      for (int k = 0; k < g_.ranks_; ++k) std::copy_n(in[k], n, all + k * n);
      g_.sync_.arrive_and_wait();
    }
    void reduce_scatter_sum(const float* all, std::size_t n, float* mine) override {
      record(Collective::ReduceScatter, n);
      const std::size_t share = n / g_.ranks_, at = share * r_;
      std::fill_n(mine, share, 0.f);
      for (const float* x : publish(all))
        for (std::size_t i = 0; i < share; ++i) mine[i] += x[at + i];
      g_.sync_.arrive_and_wait();
    }

   private:
    void record(Collective kind, std::size_t n) { calls.push_back({kind, n, DType::F32, backward}); }
    const std::vector<const float*>& publish(const float* mine) {
      g_.in_[r_] = mine;
      g_.sync_.arrive_and_wait();
      return g_.in_;
    }
    ThreadGroup& g_;
    int r_;
  };

 private:
  int ranks_;
  std::barrier<> sync_;
  std::vector<const float*> in_;
};

// The whole model (under `tp` its TP slice, `params` that slice's) in one walk.
Run run_whole(const ModelConfig& c, const std::vector<float>& params, const std::vector<std::int32_t>& tokens,
              const std::vector<std::int32_t>& targets, bool recompute, const TensorParallel& tp = {}) {
  const auto whole = make_model(c, kB, kT, recompute, kernels_for(detected_isa()), tp);
  Run r{0, std::vector<float>(whole->layout().total_floats(), 0.f)};
  ArenaAccess access(whole->layout(), params.data(), r.grads.data());
  r.loss = whole->forward_backward(access, tokens.data(), targets.data(), 1.f);
  return r;
}

// Blocks [0, 1) and the embeddings on the first stage, [1, 3), the final norm and the head on
// the last, each stage's model holding its own part's activations; under `first_tp` and
// `last_tp` (one TP rank's slice, each stage its own group) the residual stream handed on is
// that rank's rows of it under sequence parallelism.
Run run_two_stages(const ModelConfig& c, const std::vector<float>& params, const std::vector<std::int32_t>& tokens,
                   const std::vector<std::int32_t>& targets, bool recompute, const TensorParallel& first_tp = {},
                   const TensorParallel& last_tp = {}, ThreadGroup::Rank* first_rank = nullptr,
                   ThreadGroup::Rank* last_rank = nullptr) {
  const ParamLayout layout(c, first_tp.split);
  const auto p = [&](int unit) { return params.data() + layout.units()[unit].offset; };
  Run r{0, std::vector<float>(layout.total_floats(), 0.f)};
  const auto g = [&](int unit) { return r.grads.data() + layout.units()[unit].offset; };
  const auto a = make_stage_model(c, {0, 1, true, false}, kB, kT, recompute, first_tp);
  const auto b = make_stage_model(c, {1, 3, false, true}, kB, kT, recompute, last_tp);
  const std::size_t stream =
      static_cast<std::size_t>(kB) * kT * c.n_embd / (first_tp.sequence_parallel ? first_tp.split.size : 1);
  a->embed_forward(p(layout.embeddings_unit()), tokens.data());
  a->block_forward(0, p(layout.block_unit(0)));
  std::copy_n(a->residual(1), stream, b->residual(1));
  for (int l = 1; l < 3; ++l) b->block_forward(l, p(layout.block_unit(l)));
  r.loss = b->head_forward(p(layout.final_norm_unit()), p(layout.head_unit()), targets.data());
  if (last_rank) last_rank->backward = true;
  b->head_backward(p(layout.final_norm_unit()), p(layout.head_unit()), g(layout.final_norm_unit()),
                   g(layout.head_unit()), 1.f);
  for (int l = 2; l >= 1; --l) b->block_backward(l, p(layout.block_unit(l)), g(layout.block_unit(l)));
  std::copy_n(b->residual_grad(), stream, a->residual_grad());
  if (first_rank) first_rank->backward = true;
  a->block_backward(0, p(layout.block_unit(0)), g(layout.block_unit(0)));
  a->embed_backward(g(layout.embeddings_unit()));
  if (first_tp.split.size == 1) {
    // Outside its layers a stage holds no residual stream.
    EXPECT_THROW(a->residual(2), Error);
    EXPECT_THROW(b->residual(0), Error);
  }
  return r;
}

void expect_stages_compute_the_whole_model(ModelConfig c) {
  c.n_layer = 3;
  const ParamLayout layout(c);
  std::vector<float> params(layout.total_floats());
  init_params(layout, params.data(), 5);
  Rng rng(5, 1);
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
    targets[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
  }
  const Run whole = run_whole(c, params, tokens, targets, false);
  for (bool recompute : {false, true}) {
    const Run staged = run_two_stages(c, params, tokens, targets, recompute);
    EXPECT_EQ(staged.loss, whole.loss) << "recompute " << recompute;
    EXPECT_EQ(0, std::memcmp(staged.grads.data(), whole.grads.data(), whole.grads.size() * sizeof(float)))
        << "recompute " << recompute;
    // Each stage allocates less than the whole model, the two together more (each its own
    // input or gradient buffers).
    const std::uint64_t all = activation_bytes(c, kB, kT, recompute);
    const std::uint64_t first = stage_activation_bytes(c, {0, 1, true, false}, kB, kT, recompute);
    const std::uint64_t last = stage_activation_bytes(c, {1, 3, false, true}, kB, kT, recompute);
    EXPECT_LT(first, all);
    EXPECT_LT(last, all);
    EXPECT_GT(first + last, all);
    EXPECT_EQ(stage_activation_bytes(c, whole_model(c), kB, kT, recompute), all);
  }
  // A stage model refuses a range that is not a part of the model's blocks.
  EXPECT_THROW(make_stage_model(c, {1, 4, false, true}, kB, kT), Error);
  EXPECT_THROW(make_stage_model(c, {0, 1, false, false}, kB, kT), Error);
}

// TP 2 with sequence parallelism, each TP rank a thread: per rank, the two stages' loss and
// gradients (of its slice) against the whole sequence-parallel model's, and each stage's TP
// calls against the stage's list (stage_tensor_parallel_calls, what its schedule holds).
void expect_sequence_parallel_stages_compute_the_whole_model(ModelConfig c) {
  c.n_layer = 3;
  constexpr int N = 2;
  Rng rng(7, 1);
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  for (int i = 0; i < kB * kT; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
    targets[i] = static_cast<std::int32_t>(rng.below(c.vocab_size));
  }
  ThreadGroup group(N);
  for (bool recompute : {false, true}) {
    std::vector<Run> whole(N), staged(N);
    std::vector<std::vector<TensorParallelCall>> first_calls(N), last_calls(N);
    std::vector<std::thread> threads;
    for (int r = 0; r < N; ++r)
      threads.emplace_back([&, r] {
        ThreadGroup::Rank whole_rank(group, r), first_rank(group, r), last_rank(group, r);
        const TensorSplit split{N, r};
        const ParamLayout layout(c, split);
        std::vector<float> params(layout.total_floats());
        init_params(layout, params.data(), 5);
        whole[r] = run_whole(c, params, tokens, targets, recompute, {split, &whole_rank, true});
        staged[r] = run_two_stages(c, params, tokens, targets, recompute, {split, &first_rank, true},
                                   {split, &last_rank, true}, &first_rank, &last_rank);
        first_calls[r] = first_rank.calls;
        last_calls[r] = last_rank.calls;
      });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < N; ++r) {
      const std::string at = "TP rank " + std::to_string(r) + " recompute " + std::to_string(recompute);
      EXPECT_EQ(staged[r].loss, whole[r].loss) << at;
      ASSERT_EQ(staged[r].grads.size(), whole[r].grads.size()) << at;
      EXPECT_EQ(0, std::memcmp(staged[r].grads.data(), whole[r].grads.data(), whole[r].grads.size() * sizeof(float)))
          << at;
      EXPECT_EQ(first_calls[r], stage_tensor_parallel_calls(c, {0, 1, true, false}, N, kB, kT, recompute, true)) << at;
      EXPECT_EQ(last_calls[r], stage_tensor_parallel_calls(c, {1, 3, false, true}, N, kB, kT, recompute, true)) << at;
    }
    EXPECT_EQ(whole[0].loss, whole[1].loss);
  }
  // Sequence parallelism needs rows to split: refused naming the flag, as the whole model's.
  ThreadGroup::Rank alone(group, 0);
  try {
    make_stage_model(c, {0, 1, true, false}, 1, 3, false, {{N, 0}, &alone, true});
    ADD_FAILURE() << "3 token rows split over TP 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--sequence-parallel"), std::string::npos) << e.what();
  }
}

TEST(StageModel, TwoStagesOfGpt2ComputeTheWholeModelsLossAndGradientsBitForBit) {
  expect_stages_compute_the_whole_model(ModelConfig::preset("tiny"));
}

TEST(StageModel, TwoStagesOfLlamaComputeTheWholeModelsLossAndGradientsBitForBit) {
  expect_stages_compute_the_whole_model(ModelConfig::preset("llama-tiny"));
}

TEST(StageModel, TwoSequenceParallelStagesOfGpt2ComputeTheWholeSequenceParallelModelBitForBit) {
  expect_sequence_parallel_stages_compute_the_whole_model(ModelConfig::preset("tiny"));
}

TEST(StageModel, TwoSequenceParallelStagesOfLlamaComputeTheWholeSequenceParallelModelBitForBit) {
  expect_sequence_parallel_stages_compute_the_whole_model(ModelConfig::preset("llama-tiny"));
}

}  // namespace
}  // namespace strata::model
