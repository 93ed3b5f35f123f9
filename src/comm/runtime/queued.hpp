#pragma once
// A backend whose collectives run inline on the communication thread (Communicator,
// Hierarchy): each asynchronous form checks its arguments and queues the inline form there.
#include <functional>
#include <string_view>
#include <utility>

#include "comm/api/collectives.hpp"
#include "comm/runtime/context.hpp"

namespace strata::comm {

template <class Base>
class QueuedCollectives : public Base {
 public:
  Work all_gather_async(CBuf shard, Buf full) final {
    check_all_gather(*this, shard, full);
    return ctx_.run("all_gather", [=, this] { this->all_gather_inline(shard, full); });
  }
  Work reduce_scatter_async(CBuf full, Buf shard, ReduceOp op) final {
    check_reduce_scatter(*this, full, shard, op);
    const float divisor = divisor_of(op);
    return ctx_.run("reduce_scatter", [=, this] { this->reduce_scatter_inline(full, shard, divisor); });
  }
  Work all_reduce_async(Buf data, ReduceOp op) final {
    check_all_reduce(*this, data, op);
    const float divisor = divisor_of(op);
    return ctx_.run("all_reduce", [=, this] { all_reduce_inline(data, divisor); });
  }
  Work all_to_all_async(CBuf send, Buf recv) final {
    check_all_to_all(*this, send, recv);
    return ctx_.run("all_to_all", [=, this] { this->all_to_all_inline(send, recv); });
  }
  Work broadcast_async(Buf data, int root) final {
    check_broadcast(*this, data, root);
    return ctx_.run("broadcast", [=, this] { this->broadcast_inline(data, root); });
  }
  Work barrier_async() final {
    return ctx_.run("barrier", [this] { this->barrier_inline(); });
  }

 protected:
  template <class... Args>
  explicit QueuedCollectives(Context& ctx, Args&&... args) : Base(std::forward<Args>(args)...), ctx_(ctx) {}
  // The all-reduce's final fp32 sums divided by `divisor` (1 = sum), as reduce_scatter_inline.
  virtual void all_reduce_inline(Buf data, float divisor) = 0;
  float divisor_of(ReduceOp op) const { return op == ReduceOp::Avg ? float(this->size()) : 1.0f; }

  Context& ctx_;
};

}  // namespace strata::comm
