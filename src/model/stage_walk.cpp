#include "model/stage_walk.hpp"

#include "base/error.hpp"

namespace strata::model {

namespace {

// Stage unit indices: the embeddings (first stage), the blocks, the final norm and the head (last).
struct StageIndex {
  int blocks = 0, norm = -1, head = -1;
};

StageIndex index_of(const StageRange& r) {
  StageIndex i;
  i.blocks = r.first ? 1 : 0;
  if (r.last) i.norm = i.blocks + (r.end_layer - r.first_layer), i.head = i.norm + 1;
  return i;
}

}  // namespace

StageUnits stage_units(const ParamLayout& layout, const StageRange& r, int stages) {
  using K = UnitEvent;
  const Phase fwd = Phase::Forward, bwd = Phase::Backward;
  const StageIndex at = index_of(r);
  const bool tied = stages > 1 && layout.head_unit() == layout.embeddings_unit();
  StageUnits s;
  auto add = [&](int unit, std::string name) {
    s.layout_unit.push_back(unit);
    s.names.push_back(std::move(name));
  };
  if (r.first) add(layout.embeddings_unit(), layout.units()[layout.embeddings_unit()].name);
  for (int l = r.first_layer; l < r.end_layer; ++l) add(layout.block_unit(l), layout.units()[layout.block_unit(l)].name);
  if (r.last) {
    add(layout.final_norm_unit(), layout.units()[layout.final_norm_unit()].name);
    add(layout.head_unit(), tied ? "head (tied embeddings' copy)" : layout.units()[layout.head_unit()].name);
  }
  if (tied && r.first) s.tied_unit = 0;
  if (tied && r.last) s.tied_unit = at.head, s.tied_copy = true;

  auto& ev = s.events;
  if (r.first) ev.push_back({K::Acquire, 0, fwd}), ev.push_back({K::Release, 0, fwd});
  for (int b = 0; b < r.end_layer - r.first_layer; ++b)
    ev.push_back({K::Acquire, at.blocks + b, fwd}), ev.push_back({K::Release, at.blocks + b, fwd});
  if (r.last) {
    ev.push_back({K::Acquire, at.norm, fwd});
    ev.push_back({K::Acquire, at.head, fwd});
    ev.push_back({K::Release, at.head, fwd});
    ev.push_back({K::Release, at.norm, fwd});
    ev.push_back({K::Acquire, at.norm, bwd});
    ev.push_back({K::Acquire, at.head, bwd});
    ev.push_back({K::Release, at.head, bwd});
    ev.push_back({K::Release, at.norm, bwd});
    ev.push_back({K::GradsReady, at.head, bwd});
    ev.push_back({K::GradsReady, at.norm, bwd});
  }
  for (int b = r.end_layer - r.first_layer - 1; b >= 0; --b) {
    ev.push_back({K::Acquire, at.blocks + b, bwd});
    ev.push_back({K::Release, at.blocks + b, bwd});
    ev.push_back({K::GradsReady, at.blocks + b, bwd});
  }
  // The embeddings' backward scatters the gradient by token: it reads no parameters.
  if (r.first) ev.push_back({K::GradsReady, 0, bwd});
  return s;
}

StageWalk::StageWalk(const ModelConfig& config, const StageRange& range, int stages, int batch, int seq,
                     bool recompute, const TensorParallel& tp)
    : layout_(config, tp.split),
      range_(range),
      units_(stage_units(layout_, range, stages)),
      batch_(batch),
      seq_(seq),
      recompute_(recompute),
      sequence_parallel_(tp.sequence_parallel && tp.split.size > 1),
      stage_(make_stage_model(config, range, batch, seq, recompute, tp)) {}

StageWalk::~StageWalk() = default;

float StageWalk::forward_training(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                                  float grad_scale) {
  const Phase fwd = Phase::Forward;
  const StageIndex at = index_of(range_);
  grad_scale_ = grad_scale;
  if (range_.first) {
    stage_->embed_forward(access.acquire(0, fwd), tokens);
    access.release(0, fwd);
  }
  for (int l = range_.first_layer; l < range_.end_layer; ++l) {
    const int u = at.blocks + (l - range_.first_layer);
    stage_->block_forward(l, access.acquire(u, fwd));
    access.release(u, fwd);
  }
  if (!range_.last) return 0.f;
  const float* norm = access.acquire(at.norm, fwd);
  const float* head = access.acquire(at.head, fwd);
  const float loss = stage_->head_forward(norm, head, targets);
  access.release(at.head, fwd);
  access.release(at.norm, fwd);
  return loss;
}

void StageWalk::backward(UnitAccess& access) {
  const Phase bwd = Phase::Backward;
  const StageIndex at = index_of(range_);
  if (range_.last) {
    const float* norm = access.acquire(at.norm, bwd);
    const float* head = access.acquire(at.head, bwd);
    stage_->head_backward(norm, head, access.grads(at.norm), access.grads(at.head), grad_scale_);
    access.release(at.head, bwd);
    access.release(at.norm, bwd);
    access.grads_ready(at.head);
    access.grads_ready(at.norm);
  }
  for (int l = range_.end_layer - 1; l >= range_.first_layer; --l) {
    const int u = at.blocks + (l - range_.first_layer);
    const float* p = access.acquire(u, bwd);
    stage_->block_backward(l, p, access.grads(u));
    access.release(u, bwd);
    access.grads_ready(u);
  }
  if (range_.first) {
    stage_->embed_backward(access.grads(0));
    access.grads_ready(0);
  }
}

float StageWalk::forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) {
  return forward_training(access, tokens, targets, 1.0f);
}

const float* StageWalk::logits() const {
  throw Error("a pipeline stage's walk keeps no logits (the last stage's head computes the loss in place)");
}

std::uint64_t StageWalk::activation_bytes() const {
  return stage_activation_bytes(layout_.config(), range_, batch_, seq_, recompute_, layout_.split().size,
                                sequence_parallel_);
}

}  // namespace strata::model
