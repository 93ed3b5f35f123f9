// Pairwise all-to-all: member m keeps its own chunk m, then in step s (1 <= s < d) sends
// chunk m+s to member m+s and receives member (m-s)'s chunk m into slot m-s. One message
// to every other member; no member waits on more than one partner per step. The steps go
// through the pipeline (pipeline.cpp), so a large chunk is on the wire in pieces.
#include "comm/host/communicator.hpp"

namespace strata::comm {

namespace {

// Pipeline step i is the algorithm's step s = i + 1.
class AllToAllSteps final : public PipelinedSteps {
 public:
  AllToAllSteps(const Communicator& c, CBuf send, Buf recv)
      : send_(send), recv_(recv), n_(send.count / std::size_t(c.size())), d_(c.size()), m_(c.index()) {}
  int steps() const override { return d_ - 1; }
  std::size_t count() const override { return n_; }
  std::size_t granule() const override { return recv_.granule(); }
  int shift(int step) const override { return step + 1; }
  WireChunk send(int step, std::size_t first, std::size_t n) override {
    return wire_chunk(send_, std::size_t((m_ + shift(step)) % d_) * n_ + first, n);
  }
  WireChunk recv(int step, std::size_t first, std::size_t n) override {
    return wire_chunk(recv_, std::size_t((m_ - shift(step) + d_) % d_) * n_ + first, n);
  }

 private:
  CBuf send_;
  Buf recv_;
  std::size_t n_;
  int d_, m_;
};

}  // namespace

void pairwise_all_to_all(Communicator& c, CBuf send, Buf recv) {
  const int m = c.index();
  const std::size_t n = send.count / std::size_t(c.size());
  copy_elements(send, std::size_t(m) * n, recv, std::size_t(m) * n, n);
  AllToAllSteps steps(c, send, recv);
  c.run_pipelined(steps);
}

}  // namespace strata::comm
