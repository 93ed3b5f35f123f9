#include "model/model.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

#include "model/gpt.hpp"
#include "model/gpt_walk.hpp"
#include "model/init.hpp"
#include "model/llama.hpp"
#include "model/stage_walk.hpp"
#include "model/team.hpp"
#include "model/vocab_parallel.hpp"

namespace strata::model {

void Model::init_params(float* params, std::uint64_t seed) const { model::init_params(layout(), params, seed); }

// The walks gpt.hpp and llama.hpp document (E = embeddings, N = final norm, H = LM head: E
// itself for GPT-2's tied head), written out as data.
std::vector<UnitEvent> unit_event_order(const ModelConfig& config) {
  using K = UnitEvent;
  const bool tied = config.family != Family::Llama;
  const int L = config.n_layer, E = 0, N = L + 1, H = tied ? E : L + 2;
  const Phase fwd = Phase::Forward, bwd = Phase::Backward;
  std::vector<UnitEvent> ev;
  ev.push_back({K::Acquire, E, fwd});
  if (!tied) ev.push_back({K::Release, E, fwd});
  for (int l = 0; l < L; ++l) {
    ev.push_back({K::Acquire, 1 + l, fwd});
    ev.push_back({K::Release, 1 + l, fwd});
  }
  ev.push_back({K::Acquire, N, fwd});
  if (!tied) ev.push_back({K::Acquire, H, fwd});
  ev.push_back({K::Release, tied ? N : H, fwd});
  ev.push_back({K::Release, tied ? E : N, fwd});
  ev.push_back({K::Acquire, N, bwd});
  ev.push_back({K::Acquire, H, bwd});
  ev.push_back({K::Release, H, bwd});
  ev.push_back({K::Release, N, bwd});
  if (!tied) ev.push_back({K::GradsReady, H, bwd});
  ev.push_back({K::GradsReady, N, bwd});
  for (int l = L - 1; l >= 0; --l) {
    ev.push_back({K::Acquire, 1 + l, bwd});
    ev.push_back({K::Release, 1 + l, bwd});
    ev.push_back({K::GradsReady, 1 + l, bwd});
  }
  ev.push_back({K::GradsReady, E, bwd});
  return ev;
}

StageRange whole_model(const ModelConfig& config) { return {0, config.n_layer, true, true}; }

HostModel::HostModel(const ModelConfig& config, Family family, const char* name, int batch, int seq, bool recompute,
                     const TensorParallel& tp, const std::optional<StageRange>& stage)
    : layout_(config, tp.split),
      tp_group_(tp.group),
      sequence_parallel_(tp.sequence_parallel && tp.split.size > 1),
      shards_(tp.group, tp.split.size, static_cast<std::size_t>(batch) * seq, static_cast<std::size_t>(config.n_embd)),
      B_(batch),
      T_(seq),
      recompute_(recompute),
      stage_(stage.value_or(whole_model(config))) {
  if (stage_.first_layer < 0 || stage_.end_layer > config.n_layer || stage_.first_layer > stage_.end_layer ||
      stage_.first != (stage_.first_layer == 0) || stage_.last != (stage_.end_layer == config.n_layer))
    throw Error(fmt::format("model: stage of blocks [{}, {}) (first {}, last {}) is not a part of {} blocks",
                            stage_.first_layer, stage_.end_layer, stage_.first, stage_.last, config.n_layer));
  if (tp.split.size > 1 && !tp.group)
    throw Error(fmt::format("model: --tp {} needs a tensor-parallel group to reduce over", tp.split.size));
  if (config.family != family)
    throw Error(fmt::format("model: {} built for family {}", name, family_name(config.family)));
  if (batch <= 0) throw Error(fmt::format("model: batch = {}: must be positive", batch));
  if (seq <= 0 || seq > config.seq_len)
    throw Error(fmt::format("model: seq = {}: must be in [1, model.seq_len = {}]", seq, config.seq_len));
}

void HostModel::check_residual(int layer) const {
  if (layer < stage_.first_layer || layer > stage_.end_layer)
    throw Error(fmt::format("model: no residual stream at layer {} (the stage holds {}..{} of {})", layer,
                            stage_.first_layer, stage_.end_layer, config().n_layer));
}

void HostModel::tp_sum(float* data, std::size_t n) {
  if (tp_group_) tp_group_->all_reduce_sum(data, n);
}

float HostModel::head_loss(float* normed, const float* head_w, const std::int32_t* targets,
                           const std::function<void(float* out, Range rows)>& norm) {
  HostBuffers& h = *acts_;
  const ModelConfig& cfg = config();
  const VocabSlice slice(cfg, layout_.split());
  const int BT = B_ * T_;
  check_ids(targets, static_cast<std::size_t>(BT), cfg.vocab_size, "target");
  std::copy(targets, targets + BT, h.targets.begin());
  if (sequence_parallel_) {
    in_parallel([&](const Team& team) { norm(h.sp_rows, team.share(BT / layout_.split().size)); });
    shards_.gather(h.sp_rows, normed);
  }
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    if (!sequence_parallel_) norm(normed, rows);
    matmul_forward(h.logits, normed, head_w, cfg.n_embd, slice.rows, false, rows);
    if (h.vocab_loss) h.vocab_loss->reduce_rows(h.logits, h.targets.data(), slice, rows);
    else h.k->crossentropy_forward(h.lse, h.losses, h.logits, h.targets.data(), cfg.vocab_size, slice.rows, rows);
  });
  if (h.vocab_loss) return h.vocab_loss->combine(*tp_group_, h.lse, h.losses);
  double total = 0;  // in row order: deterministic
  for (int i = 0; i < BT; ++i) total += h.losses[i];
  return static_cast<float>(total / BT);
}

void HostModel::head_backward_through_norm(const float* normed, const float* head_w, float* head_grads,
                                           float* dnormed, float grad_scale, float* norm_grads,
                                           std::initializer_list<std::size_t> norm_offsets,
                                           const std::function<void(const float* d_rows, Range rows)>& input,
                                           const std::function<void(const float* d_rows, int R, Range cols)>& params) {
  HostBuffers& h = *acts_;
  const VocabSlice slice(config(), layout_.split());
  const int BT = B_ * T_, C = config().n_embd;
  const float scale = grad_scale / BT;
  in_parallel([&](const Team& team) {
    const Range rows = team.share(BT);
    if (h.vocab_loss)
      vocab_parallel_crossentropy_backward(h.dlogits, h.logits, h.lse, h.targets.data(), slice, scale, rows);
    else
      h.k->crossentropy_backward(h.dlogits, h.logits, h.lse, h.targets.data(), slice.real, slice.rows, scale, rows);
    // Logits past the vocabulary carry no gradient: only the slice's real rows of the head take part.
    matmul_backward_input(dnormed, h.dlogits, slice.rows, head_w, C, slice.real, rows);
  });
  // Each rank's vocabulary rows' share summed: whole, or under sequence parallelism the rank's rows.
  const bool sp = sequence_parallel_;
  const int R = sp ? BT / layout_.split().size : BT;
  if (sp) shards_.scatter(dnormed, h.sp_rows);
  else tp_sum(dnormed, static_cast<std::size_t>(BT) * C);
  const float* d_rows = sp ? h.sp_rows : dnormed;
  if (sp) std::fill_n(h.sp_norm_grads, norm_offsets.size() * C, 0.f);
  in_parallel([&](const Team& team) {
    input(d_rows, team.share(R));
    barrier();  // parameter gradients sum over every row
    matmul_backward_weight(head_grads, h.dlogits, slice.rows, normed, BT, C, team.share(slice.real));
    params(d_rows, R, team.share(C, kColumnAlign));
  });
  if (sp) shards_.finish_norm_grads(h.sp_norm_grads, norm_grads, norm_offsets);
}

const float* HostModel::logits() const { return acts_->logits; }

std::uint64_t HostModel::activation_bytes() const { return acts_->storage.size() * sizeof(float); }

float* HostModel::residual_grad() { return acts_->dres; }

float HostModel::forward(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets) {
  if (stage_.first_layer != 0 || stage_.end_layer != config().n_layer)
    throw Error("model: a pipeline stage's model runs no whole walk (StageWalk drives its part)");
  const std::size_t BT = static_cast<std::size_t>(B_) * T_;
  // Refuse bad ids before acquiring anything, so no unit is left acquired.
  check_ids(tokens, BT, config().vocab_size, "token");
  check_ids(targets, BT, config().vocab_size, "target");
  return forward_walk(
      layout_, access, [&](const float* embed) { embed_forward(embed, tokens); },
      [&](int l, const float* p) { block_forward(l, p); },
      [&](const float* norm, const float* head) { return head_forward(norm, head, targets); });
}

float HostModel::forward_training(UnitAccess& access, const std::int32_t* tokens, const std::int32_t* targets,
                                  float grad_scale) {
  grad_scale_ = grad_scale;
  return forward(access, tokens, targets);
}

void HostModel::backward(UnitAccess& access) {
  backward_walk(
      layout_, access,
      [&](const float* norm, const float* head, float* norm_grads, float* head_grads) {
        head_backward(norm, head, norm_grads, head_grads, grad_scale_);
      },
      [&](int l, const float* p, float* g) { block_backward(l, p, g); },
      [&](float* embed_grads) { embed_backward(embed_grads); });
}

// Sequence parallelism shards the micro-batch's token rows over the TP group.
static void check_sequence_parallel(int tp, int batch, int seq) {
  if (tp == 1) throw Error("--sequence-parallel: needs tensor parallelism (--tp 2 or more) to shard the rows over");
  if (static_cast<long long>(batch) * seq % tp != 0)
    throw Error(fmt::format("--sequence-parallel: --tp {} does not divide the micro-batch's {} x {} token rows", tp,
                            batch, seq));
}

std::vector<TensorParallelCall> tensor_parallel_calls(const ModelConfig& config, int tp, int batch, int seq,
                                                      bool recompute, bool sequence_parallel) {
  return stage_tensor_parallel_calls(config, whole_model(config), tp, batch, seq, recompute, sequence_parallel);
}

std::vector<TensorParallelCall> stage_tensor_parallel_calls(const ModelConfig& config, const StageRange& range, int tp,
                                                            int batch, int seq, bool recompute,
                                                            bool sequence_parallel) {
  if (sequence_parallel) check_sequence_parallel(tp, batch, seq);
  if (tp == 1) return {};
  static_cast<void>(ParamLayout(config, {tp, 0}));  // refuses a model that does not split so
  TensorParallelWalk walk{range.end_layer - range.first_layer, config.n_embd, batch, seq, recompute, range.first,
                          range.last};
  walk.sequence_parallel = sequence_parallel;
  walk.degree = tp;
  walk.norm_params = config.family == Family::Llama ? config.n_embd : 2 * config.n_embd;  // RMSNorm: a gain
  return tensor_parallel_calls(walk);
}

std::uint64_t activation_bytes(const ModelConfig& config, int batch, int seq, bool recompute, int tp,
                               bool sequence_parallel) {
  return stage_activation_bytes(config, whole_model(config), batch, seq, recompute, tp, sequence_parallel);
}

std::unique_ptr<Model> make_model(const ModelConfig& config, int batch, int seq, bool recompute,
                                  const Kernels& kernels, const TensorParallel& tp) {
  if (tp.sequence_parallel) check_sequence_parallel(tp.split.size, batch, seq);
  if (config.family == Family::Llama) return std::make_unique<Llama>(config, batch, seq, recompute, kernels, tp);
  return std::make_unique<GPT>(config, batch, seq, recompute, kernels, tp);
}

std::uint64_t stage_activation_bytes(const ModelConfig& config, const StageRange& range, int batch, int seq,
                                     bool recompute, int tp, bool sequence_parallel) {
  return config.family == Family::Llama
             ? Llama::activation_bytes(config, batch, seq, recompute, tp, sequence_parallel, range)
             : GPT::activation_bytes(config, batch, seq, recompute, tp, sequence_parallel, range);
}

std::unique_ptr<StageModel> make_stage_model(const ModelConfig& config, const StageRange& range, int batch, int seq,
                                             bool recompute, const TensorParallel& tp) {
  if (tp.sequence_parallel) check_sequence_parallel(tp.split.size, batch, seq);
  const Kernels& kernels = kernels_for(detected_isa());
  if (config.family == Family::Llama) return std::make_unique<Llama>(config, batch, seq, recompute, kernels, tp, range);
  return std::make_unique<GPT>(config, batch, seq, recompute, kernels, tp, range);
}

}  // namespace strata::model
