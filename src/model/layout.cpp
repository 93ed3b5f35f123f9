#include "model/layout.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::model {

static std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

ParamLayout::ParamLayout(const ModelConfig& config, TensorSplit split) : config_(config), split_(split) {
  config_.validate();
  const int N = split.size;
  if (N < 1 || split.rank < 0 || split.rank >= N)
    throw Error(fmt::format("--tp {}: TP rank {} is not in [0, {})", N, split.rank, N));
  if (N > 1) {
    if (config.n_head % N != 0)
      throw Error(fmt::format("--tp {}: does not divide model.n_head = {} (heads are split over the TP ranks)", N,
                              config.n_head));
    if (config.kv_heads() % N != 0)
      throw Error(fmt::format("--tp {}: does not divide model.n_kv_head = {} (K/V heads are split over the TP ranks, "
                              "each with the query heads that share it)",
                              N, config.kv_heads()));
    if (config.family == Family::Llama && config.ffn_size() % N != 0)
      throw Error(fmt::format("--tp {}: does not divide the SwiGLU width {} (model.ffn_hidden; gate and up are split "
                              "by rows)",
                              N, config.ffn_size()));
    if (config.padded_vocab_size % N != 0)
      throw Error(fmt::format("--tp {}: does not divide model.padded_vocab_size = {} (the embedding is split by "
                              "vocabulary rows)",
                              N, config.padded_vocab_size));
  }
  const std::int64_t C = config.n_embd, V = config.padded_vocab_size, T = config.seq_len;
  const std::int64_t KV = static_cast<std::int64_t>(config.kv_heads()) * config.head_dim(), F = config.ffn_size();
  std::size_t cursor = 0;

  auto begin_unit = [&](std::string name) {
    cursor = round_up(cursor, kUnitAlignFloats);
    units_.push_back({std::move(name), cursor, 0, {}});
  };
  struct Kind {
    bool decay, hf_transposed, vocab_rows;
    Init init;
  };
  // Matrices and embeddings decay; norms and biases do not.
  constexpr Kind gain{false, false, false, Init::One}, bias{false, false, false, Init::Zero},
      matrix{true, false, false, Init::Normal}, residual{true, false, false, Init::ResidualNormal},
      conv1d{true, true, false, Init::Normal}, conv1d_residual{true, true, false, Init::ResidualNormal},
      vocab{true, false, true, Init::Normal};
  auto add = [&](std::string name, std::vector<std::int64_t> full_shape, Kind k, Split cut = Split::None) {
    cursor = round_up(cursor, kTensorAlignFloats);
    std::vector<std::int64_t> shape = full_shape;
    if (cut == Split::Columns) shape.back() /= N;
    else if (cut != Split::None) shape.front() /= N;  // rows, or each of q, k, v's rows
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    TensorInfo t{std::move(name), static_cast<int>(units_.size()) - 1, cursor, std::move(shape), n, k.decay,
                 k.hf_transposed, k.vocab_rows, k.init, cut, std::move(full_shape)};
    units_.back().tensors.push_back(static_cast<int>(tensors_.size()));
    tensors_.push_back(std::move(t));
    cursor += n;
  };
  auto end_unit = [&] {
    cursor = round_up(cursor, kUnitAlignFloats);
    units_.back().numel = cursor - units_.back().offset;
  };

  if (config.family == Family::Llama) {
    // Heads are contiguous rows of q, k and v, so splitting rows splits heads; query head h
    // shares K/V head h / (n_head / n_kv_head), which lands on the same rank.
    begin_unit("embeddings");
    add("model.embed_tokens.weight", {V, C}, vocab, Split::Rows);
    end_unit();
    for (int l = 0; l < config.n_layer; ++l) {
      std::string p = fmt::format("model.layers.{}.", l);
      begin_unit(fmt::format("h.{}", l));
      add(p + "input_layernorm.weight", {C}, gain);
      add(p + "self_attn.q_proj.weight", {C, C}, matrix, Split::Rows);
      add(p + "self_attn.k_proj.weight", {KV, C}, matrix, Split::Rows);
      add(p + "self_attn.v_proj.weight", {KV, C}, matrix, Split::Rows);
      add(p + "self_attn.o_proj.weight", {C, C}, residual, Split::Columns);
      add(p + "post_attention_layernorm.weight", {C}, gain);
      add(p + "mlp.gate_proj.weight", {F, C}, matrix, Split::Rows);
      add(p + "mlp.up_proj.weight", {F, C}, matrix, Split::Rows);
      add(p + "mlp.down_proj.weight", {C, F}, residual, Split::Columns);
      end_unit();
    }
    begin_unit("ln_f");
    add("model.norm.weight", {C}, gain);
    end_unit();
    begin_unit("lm_head");
    add("lm_head.weight", {V, C}, vocab, Split::Rows);
    end_unit();
    total_ = cursor;
    return;
  }

  begin_unit("embeddings");
  add("wte.weight", {V, C}, vocab, Split::Rows);
  add("wpe.weight", {T, C}, matrix);
  end_unit();
  for (int l = 0; l < config.n_layer; ++l) {
    std::string p = fmt::format("h.{}.", l);
    begin_unit(fmt::format("h.{}", l));
    add(p + "ln_1.weight", {C}, gain);
    add(p + "ln_1.bias", {C}, bias);
    add(p + "attn.c_attn.weight", {3 * C, C}, conv1d, Split::HeadRows);
    add(p + "attn.c_attn.bias", {3 * C}, bias, Split::HeadRows);
    add(p + "attn.c_proj.weight", {C, C}, conv1d_residual, Split::Columns);
    add(p + "attn.c_proj.bias", {C}, bias);
    add(p + "ln_2.weight", {C}, gain);
    add(p + "ln_2.bias", {C}, bias);
    add(p + "mlp.c_fc.weight", {4 * C, C}, conv1d, Split::Rows);
    add(p + "mlp.c_fc.bias", {4 * C}, bias, Split::Rows);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, conv1d_residual, Split::Columns);
    add(p + "mlp.c_proj.bias", {C}, bias);
    end_unit();
  }
  begin_unit("ln_f");
  add("ln_f.weight", {C}, gain);
  add("ln_f.bias", {C}, bias);
  end_unit();
  total_ = cursor;
}

std::vector<SliceRun> ParamLayout::slice_runs(const TensorInfo& t) const {
  const std::size_t N = static_cast<std::size_t>(split_.size), r = static_cast<std::size_t>(split_.rank);
  // Elements of one row of the whole tensor (1 for a vector).
  const std::size_t row = t.full_shape.size() > 1 ? static_cast<std::size_t>(t.full_shape.back()) : 1;
  const std::size_t rows = static_cast<std::size_t>(t.full_shape.front());
  std::vector<SliceRun> runs;
  switch (t.split) {
    case Split::None: runs.push_back({0, 0, t.numel}); break;
    case Split::Rows: runs.push_back({r * (rows / N) * row, 0, t.numel}); break;
    case Split::HeadRows: {
      const std::size_t part = rows / 3, mine = part / N;  // q, k, v: `part` rows each
      for (std::size_t p = 0; p < 3; ++p) runs.push_back({(p * part + r * mine) * row, p * mine * row, mine * row});
      break;
    }
    case Split::Columns: {
      const std::size_t cols = row / N;
      for (std::size_t i = 0; i < rows; ++i) runs.push_back({i * row + r * cols, i * cols, cols});
      break;
    }
  }
  return runs;
}

std::vector<WholeRun> ParamLayout::whole_runs(std::size_t begin, std::size_t end, WholeCover cover) const {
  if (split_.size == 1) return {{begin, 0, end - begin}};
  const ParamLayout whole(config_);
  const bool lead = split_.rank == 0;
  std::vector<WholeRun> out;
  for (std::size_t ti = 0; ti < tensors_.size(); ++ti) {
    const TensorInfo& t = tensors_[ti];
    if (end <= t.offset || begin >= t.offset + t.numel) continue;
    const TensorInfo& w = whole.tensors()[ti];
    if (t.split == Split::None && !lead && cover == WholeCover::Saved) continue;
    for (const SliceRun& run : slice_runs(t)) {
      const std::size_t lo = std::max(begin, t.offset + run.local), hi = std::min(end, t.offset + run.local + run.count);
      if (lo < hi) out.push_back({w.offset + run.full + (lo - t.offset - run.local), lo - begin, hi - lo});
    }
    // TP rank 0 holds every tensor's first element.
    if (cover == WholeCover::Saved && lead && t.offset >= begin) {
      const std::size_t gap_end = ti + 1 < tensors_.size() ? whole.tensors()[ti + 1].offset : whole.total_floats();
      if (gap_end > w.offset + w.numel) out.push_back({w.offset + w.numel, 0, gap_end - w.offset - w.numel, true});
    }
  }
  return out;
}

std::int64_t ParamLayout::num_params() const {
  std::int64_t n = 0;
  for (auto& t : tensors_) n += static_cast<std::int64_t>(t.numel);
  return n;
}

const TensorInfo* ParamLayout::try_find(std::string_view name) const {
  for (auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& ParamLayout::find(std::string_view name) const {
  if (auto* t = try_find(name)) return *t;
  throw Error(fmt::format("model: no tensor named '{}'", name));
}

std::vector<DecaySegment> ParamLayout::decay_segments(std::size_t begin, std::size_t end) const {
  std::vector<DecaySegment> out;
  auto push = [&](std::size_t b, std::size_t e, bool decay) {
    b = std::max(b, begin);
    e = std::min(e, end);
    if (b >= e) return;
    if (!out.empty() && out.back().end == b && out.back().decay == decay)
      out.back().end = e;
    else
      out.push_back({b, e, decay});
  };
  std::size_t cursor = 0;
  for (auto& t : tensors_) {
    push(cursor, t.offset, false);  // alignment padding
    push(t.offset, t.offset + t.numel, t.decay);
    cursor = t.offset + t.numel;
  }
  push(cursor, std::max(total_, end), false);
  return out;
}

BlockOffsets block_offsets(const ParamLayout& layout) {
  auto off = [&](const char* suffix) {
    return layout.offset_in_unit(layout.find(fmt::format("h.0.{}", suffix)));
  };
  return {off("ln_1.weight"),        off("ln_1.bias"),       off("attn.c_attn.weight"),
          off("attn.c_attn.bias"),   off("attn.c_proj.weight"), off("attn.c_proj.bias"),
          off("ln_2.weight"),        off("ln_2.bias"),       off("mlp.c_fc.weight"),
          off("mlp.c_fc.bias"),      off("mlp.c_proj.weight"), off("mlp.c_proj.bias")};
}

EmbeddingOffsets embedding_offsets(const ParamLayout& layout) {
  return {layout.offset_in_unit(layout.find("wte.weight")), layout.offset_in_unit(layout.find("wpe.weight"))};
}

LlamaOffsets llama_offsets(const ParamLayout& layout) {
  auto off = [&](const std::string& name) { return layout.offset_in_unit(layout.find(name)); };
  auto block = [&](const char* suffix) { return off(fmt::format("model.layers.0.{}.weight", suffix)); };
  return {off("model.embed_tokens.weight"),
          {block("input_layernorm"), block("self_attn.q_proj"), block("self_attn.k_proj"), block("self_attn.v_proj"),
           block("self_attn.o_proj"), block("post_attention_layernorm"), block("mlp.gate_proj"),
           block("mlp.up_proj"), block("mlp.down_proj")},
          off("model.norm.weight"),
          off("lm_head.weight")};
}

FinalNormOffsets final_norm_offsets(const ParamLayout& layout) {
  return {layout.offset_in_unit(layout.find("ln_f.weight")), layout.offset_in_unit(layout.find("ln_f.bias"))};
}

}  // namespace strata::model
