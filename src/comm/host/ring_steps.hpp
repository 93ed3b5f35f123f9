#pragma once
// The ring algorithms' steps as the ring pipeline runs them (Communicator::run_pipelined, see
// ring_all_gather.cpp and ring_reduce_scatter.cpp for what each step moves). An all-reduce
// runs the reduce-scatter's steps and then the all-gather's as one pipeline, so piece k of
// the gather leaves as soon as piece k of the member's own chunk is reduced.
#include "comm/host/communicator.hpp"

namespace strata::comm {

// d - 1 steps over `full` (d chunks of n elements): step s sends chunk (m - s) and
// receives chunk (m - s - 1).
class AllGatherSteps final : public PipelinedSteps {
 public:
  AllGatherSteps(const Communicator& c, Buf full, std::size_t n);
  int steps() const override { return d_ - 1; }
  std::size_t count() const override { return n_; }
  std::size_t granule() const override { return full_.granule(); }
  WireChunk send(int step, std::size_t first, std::size_t n) override;
  WireChunk recv(int step, std::size_t first, std::size_t n) override;

 private:
  Buf full_;
  std::size_t n_;
  int d_, m_;
};

// d - 1 steps: step s sends the partial sum of chunk (m - s - 1) (at s = 0 the member's
// own chunk of `full`) and receives the partial of chunk (m - s - 2), to which it adds its
// own; the last step's sum, divided by `divisor`, is the member's `shard`. Uses the
// communicator's algorithm scratch slots. Needs d >= 2.
class ReduceScatterSteps final : public PipelinedSteps {
 public:
  ReduceScatterSteps(Communicator& c, CBuf full, Buf shard, float divisor);
  int steps() const override { return d_ - 1; }
  std::size_t count() const override { return shard_.count; }
  std::size_t granule() const override { return shard_.granule(); }
  WireChunk send(int step, std::size_t first, std::size_t n) override;
  WireChunk recv(int step, std::size_t first, std::size_t n) override;
  void received(int step, std::size_t first, std::size_t n) override;

 private:
  CBuf full_;
  Buf shard_, partial_, incoming_;
  float divisor_;
  int d_, m_;
};

// `a`'s steps, then `b`'s, as one ring pass (both of the same count and granule).
class ChainedSteps final : public PipelinedSteps {
 public:
  ChainedSteps(PipelinedSteps& a, PipelinedSteps& b) : a_(a), b_(b) {}
  int steps() const override { return a_.steps() + b_.steps(); }
  std::size_t count() const override { return a_.count(); }
  std::size_t granule() const override { return a_.granule(); }
  int shift(int step) const override { return step < a_.steps() ? a_.shift(step) : b_.shift(step - a_.steps()); }
  WireChunk send(int step, std::size_t first, std::size_t n) override {
    return step < a_.steps() ? a_.send(step, first, n) : b_.send(step - a_.steps(), first, n);
  }
  WireChunk recv(int step, std::size_t first, std::size_t n) override {
    return step < a_.steps() ? a_.recv(step, first, n) : b_.recv(step - a_.steps(), first, n);
  }
  void received(int step, std::size_t first, std::size_t n) override {
    step < a_.steps() ? a_.received(step, first, n) : b_.received(step - a_.steps(), first, n);
  }

 private:
  PipelinedSteps& a_;
  PipelinedSteps& b_;
};

}  // namespace strata::comm
