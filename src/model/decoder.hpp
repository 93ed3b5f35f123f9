#pragma once
// Incremental decoding with a KV cache: each step runs one position's forward through every
// block, attending over the keys and values the earlier positions left in the cache, so a new
// token costs one token's forward instead of the whole prefix's. One implementation per
// family (decode_gpt.cpp, decode_llama.cpp), computing with the same kernels as its training
// forward; the logits equal the full forward's up to fp32 rounding (one row's GEMV sums in
// another order than the prefix's GEMM).
#include <cstdint>
#include <memory>

#include "base/cpu.hpp"
#include "model/config.hpp"
#include "model/kernels.hpp"
#include "model/layout.hpp"

namespace strata::model {

class Decoder {
 public:
  virtual ~Decoder() = default;

  // Feeds `token` at position position() of the sequence and returns the logits of the token
  // after it: padded_vocab_size floats of which the first vocab_size count, valid until the
  // next step. `params`: the model's full parameter arena (layout.hpp). Throws Error for a
  // token outside the vocabulary or a position at max_len().
  virtual const float* step(const float* params, std::int32_t token) = 0;
  // Forgets the cached positions: the next step is position 0 of a new sequence.
  void reset() { position_ = 0; }

  int position() const { return position_; }  // positions cached so far
  int max_len() const { return max_len_; }
  const ParamLayout& layout() const { return layout_; }
  const ModelConfig& config() const { return layout_.config(); }

 protected:
  // Throws Error unless 1 <= max_len <= config.seq_len.
  Decoder(const ModelConfig& config, int max_len, const Kernels& kernels);
  // Checks `token` and that a position is left; returns the position this step fills.
  int begin_step(std::int32_t token);
  void end_step() { ++position_; }

  ParamLayout layout_;
  int max_len_;
  const Kernels& kernels_;

 private:
  int position_ = 0;
};

// The decoder of config.family for sequences of up to max_len (<= config.seq_len) positions.
std::unique_ptr<Decoder> make_decoder(const ModelConfig& config, int max_len,
                                      const Kernels& kernels = kernels_for(detected_isa()));

// Causal attention of one query position over the n cached positions, shared by both families:
// query head h (of NH, hd floats each in q) attends to K/V head h / (NH / NKV) of the caches,
// whose rows (one per position) are kv_stride floats apart; out receives NH * hd floats.
// scores: n floats of scratch.
void attend_cached(float* out, float* scores, const float* q, const float* k_cache, const float* v_cache, int n,
                   int NH, int NKV, int hd, int kv_stride);

// The families' decoders, for make_decoder (which picks by config.family).
std::unique_ptr<Decoder> make_gpt_decoder(const ModelConfig& config, int max_len, const Kernels& kernels);
std::unique_ptr<Decoder> make_llama_decoder(const ModelConfig& config, int max_len, const Kernels& kernels);

}  // namespace strata::model
