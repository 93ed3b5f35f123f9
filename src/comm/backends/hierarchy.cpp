#include "comm/backends/hierarchy.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::comm {

namespace {
// Slots of a Hierarchy's memory (its own; the levels keep theirs): 0..3 hold what lies
// between a chain's steps, then the padded input, and the all-to-all's two layouts.
constexpr int kPadded = 4, kWorkA = 5, kWorkB = 6;

// dst block (y, x) = src block (x, y) for an X x Y grid of blocks of `blk` elements.
void transpose_blocks(SlotMemory& memory, const CBuf& src, const Buf& dst, int X, int Y, std::size_t blk) {
  for (int x = 0; x < X; ++x)
    for (int y = 0; y < Y; ++y)
      memory.copy(src, (std::size_t(x) * Y + y) * blk, dst, (std::size_t(y) * X + x) * blk, blk);
}
}  // namespace

Hierarchy::Hierarchy(std::string name, Context& ctx, std::vector<Collectives*> levels,
                     std::unique_ptr<SlotMemory> memory)
    : QueuedCollectives(ctx), name_(std::move(name)), levels_(std::move(levels)), memory_(std::move(memory)) {
  if (!memory_) memory_ = std::make_unique<HostChainScratch>(scratch_);
  if (levels_.empty()) throw Error(fmt::format("hierarchy '{}': needs at least one level", name_));
  for (auto* l : levels_) {
    if (!l) throw Error(fmt::format("hierarchy '{}': a level is null", name_));
    std::vector<int> w;
    for (int m = 0; m < l->size(); ++m) w.push_back(l->world_rank_of(m));
    for (std::size_t i = 2; i < w.size(); ++i)
      if (w[i] - w[i - 1] != w[1] - w[0])
        throw Error(fmt::format("hierarchy '{}': level '{}' has world ranks that are not evenly strided; levels "
                                "must be tier groups (within/across)",
                                name_, l->name()));
    size_ *= l->size();
    digits_.push_back(l->index());
    index_ = index_ * l->size() + l->index();
    level_sizes_.push_back(l->size());
    if (l->size() > 1) {
      active_.push_back(l);
      active_digits_.push_back(l->index());
    }
  }
  if (active_.empty()) {  // a group of one: level 0 performs the local copies
    active_.push_back(levels_.front());
    active_digits_.push_back(0);
  }
  for (Collectives* l : active_) active_sizes_.push_back(l->size());
}

int Hierarchy::world_rank_of(int index) const {
  if (index < 0 || index >= size_) throw Error(fmt::format("hierarchy '{}': index {} out of [0, {})", name_, index, size_));
  int world = ctx_.world_rank();
  for (int l = num_levels() - 1; l >= 0; --l) {
    int a = levels_[l]->size(), e = index % a;
    index /= a;
    world += levels_[l]->world_rank_of(e) - levels_[l]->world_rank_of(digits_[l]);
  }
  return world;
}

std::size_t Hierarchy::level_elements(std::size_t n, DType t, std::size_t block, int l) const {
  return comm::level_elements(level_sizes_, chunk_count(n, size_, granule(t, block)) * std::size_t(size_), l);
}

// ---- compositions (communication thread) ------------------------------------------------

void Hierarchy::run_reduction(CBuf full, Buf shard, float divisor, Collective kind) {
  const std::size_t padded = shard.count * std::size_t(size_);
  CBuf cur = full.count == padded ? full : CBuf(memory_->padded_copy(kPadded, full, padded));
  const auto steps = reduce_scatter_steps(active_sizes_, padded, 0, int(active_.size()), kind, full.dtype, full.block);
  run_chain(active_, steps, cur, &shard, divisor, *memory_);
}

void Hierarchy::all_gather_inline(CBuf shard, Buf full) {
  const std::size_t padded = shard.count * std::size_t(size_);
  const auto steps = all_gather_steps(active_sizes_, padded, int(active_.size()), 0, shard.dtype, shard.block);
  CBuf got = run_chain(active_, steps, shard, full.count == padded ? &full : nullptr, 1.0f, *memory_);
  if (full.count != padded) memory_->copy(got, 0, full, 0, full.count);
}

void Hierarchy::all_to_all_inline(CBuf send, Buf recv) {
  const std::size_t c = recv.count / std::size_t(size_);
  // Layout before level l: [source s < S][destination t < T][c], S * T = D.
  CBuf cur = send.count == recv.count ? send : CBuf(memory_->padded_copy(kPadded, send, recv.count));
  int S = 1, T = size_;
  const int k = int(active_.size()) - 1;
  for (int l = 0; l <= k; ++l) {
    const int a = active_[l]->size();
    const int T_next = T / a;
    const std::size_t blk = std::size_t(T_next) * c;  // one source's chunks for one level-l peer
    // Pack [s][p][t'] -> [p][s][t'] so each peer's part is contiguous.
    CBuf packed = cur;
    if (S > 1) {
      Buf p = memory_->view(kWorkA, send.dtype, recv.count, send.block);
      transpose_blocks(*memory_, cur, p, S, a, blk);
      packed = p;
    }
    // Receive [p'][s][t'] and unpack to [s][p'][t']: the source index gains digit l last.
    // With a single source the received layout already is the unpacked one.
    Buf received = (l == k && S == 1) ? recv : memory_->view(kWorkB, send.dtype, recv.count, send.block);
    active_[l]->all_to_all_inline(packed, received);
    if (S == 1) {
      cur = received;
    } else {
      Buf out = l == k ? recv : memory_->view(kPadded, send.dtype, recv.count, send.block);
      transpose_blocks(*memory_, received, out, a, S, blk);
      cur = out;
    }
    S *= a;
    T = T_next;
  }
}

void Hierarchy::broadcast_inline(Buf data, int root) {
  std::vector<int> root_digits(int(active_.size()));
  for (int l = int(active_.size()) - 1; l >= 0; --l) {
    root_digits[l] = root % active_[l]->size();
    root /= active_[l]->size();
  }
  for (int l = int(active_.size()) - 1; l >= 0; --l) {
    bool holds_or_gets = true;  // ranks sharing the root's digits below l take part at level l
    for (int i = 0; i < l; ++i) holds_or_gets = holds_or_gets && active_digits_[i] == root_digits[i];
    if (holds_or_gets) active_[l]->broadcast_inline(data, root_digits[l]);
  }
}

// ---- queued entry points -----------------------------------------------------------------

void Hierarchy::all_reduce_inline(Buf data, float divisor) {
  const std::size_t c = chunk_count(data.count, size_, data.granule());
  const std::size_t padded = c * std::size_t(size_);
  Buf whole = data.count == padded ? data : memory_->padded_copy(kPadded, data, padded);
  // The shard is kept in the buffer's own chunk: nothing reads that chunk again before the gather.
  Buf shard(data.dtype, static_cast<std::byte*>(whole.data) + data_bytes(data.dtype, std::size_t(index_) * c), c);
  run_reduction(whole, shard, divisor, Collective::ReduceScatter);
  all_gather_inline(shard, whole);
  if (whole.data != data.data) memory_->copy(whole, 0, data, 0, data.count);
}

void Hierarchy::barrier_inline() {
  for (auto* l : active_) l->barrier_inline();
}

Work Hierarchy::reduce_scatter_by_all_to_all_async(CBuf full, Buf shard, ReduceOp op) {
  check_reduce_scatter(*this, full, shard, op);
  float divisor = op == ReduceOp::Avg ? float(size_) : 1.0f;
  return ctx_.run("reduce_scatter", [=, this] { run_reduction(full, shard, divisor, Collective::AllToAll); });
}

}  // namespace strata::comm
