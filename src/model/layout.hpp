#pragma once
// Where every parameter lives. Parameters (and, with the same layout, gradients and
// optimizer moments) sit in one flat fp32 arena split into units:
//   unit 0          "embeddings"  gpt2: wte, wpe; llama: model.embed_tokens
//   unit 1 + l      "h.<l>"       transformer block l
//   unit n_layer+1  "ln_f"        final norm (gpt2's LM head is wte, in unit 0)
//   unit n_layer+2  "lm_head"     llama only: the untied LM head, a unit of its own so that
//                                 sharding treats the largest matrix like any other unit
// Each unit is contiguous and starts on a 64-float (256-byte) boundary, so a sharding
// engine can gather, shard and free one unit at a time. Tensors inside a unit start on
// 16-float (64-byte) boundaries. Tensors carry their Hugging Face names (GPT2LMHeadModel's
// without the "transformer." prefix, LlamaForCausalLM's as they are).
// Matrices are stored [out, in] (torch.nn.Linear); Hugging Face's GPT-2 stores its Conv1D
// weights [in, out], which `hf_transposed` marks for import and export.
// Under tensor parallelism (tensor_parallel.hpp) a rank's layout holds its slice of every
// split tensor under the whole tensor's name: `shape` is the slice's, `full_shape` the
// whole tensor's, and slice_runs() says where the slice's elements sit in the whole.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"
#include "model/tensor_parallel.hpp"

namespace strata::model {

inline constexpr std::size_t kUnitAlignFloats = 64;
inline constexpr std::size_t kTensorAlignFloats = 16;

// Hands out kTensorAlignFloats-aligned buffers one after another from `base` (nullptr: only
// counts), so a model sizes its activation storage and places it with one list of takes.
class BufferPlacer {
 public:
  explicit BufferPlacer(float* base) : base_(base) {}
  void take(float*& p, std::size_t n) {
    p = base_ ? base_ + floats_ : nullptr;
    floats_ += (n + kTensorAlignFloats - 1) / kTensorAlignFloats * kTensorAlignFloats;
  }
  std::size_t floats() const { return floats_; }

 private:
  float* base_;
  std::size_t floats_ = 0;
};

// Places the activations of blocks [first, end) of n_layer, one Layer per block: take_all(layer)
// takes all of a block's buffers, its output `res3` ([BT, C], output_floats) among them; of
// the blocks before, only block first - 1's output, the stage's input (the others stay null).
// Under activation recomputation every block shares block `first`'s buffers but its output,
// the next block's input, which forward keeps for backward to recompute the block from. One
// rule for every model that recomputes (the CPU's GPT and Llama, the GPU's).
template <class Layer, class TakeAll>
void place_layers(std::vector<Layer>& layers, int n_layer, int first, int end, bool recompute, BufferPlacer& placer,
                  std::size_t output_floats, TakeAll&& take_all) {
  layers.assign(n_layer, Layer{});
  for (int l = first; l < end; ++l) {
    if (recompute && l > first) {
      layers[l] = layers[first];
      placer.take(layers[l].res3, output_floats);
    } else {
      take_all(layers[l]);
    }
  }
  if (first > 0) placer.take(layers[first - 1].res3, output_floats);
}
// Every block's (the whole model's).
template <class Layer, class TakeAll>
void place_layers(std::vector<Layer>& layers, int n_layer, bool recompute, BufferPlacer& placer,
                  std::size_t output_floats, TakeAll&& take_all) {
  place_layers(layers, n_layer, 0, n_layer, recompute, placer, output_floats, take_all);
}

// How initialization fills a tensor (model/init.hpp).
enum class Init { Zero, One, Normal, ResidualNormal };

// How a tensor is cut over a TensorSplit (tensor_parallel.hpp says which tensor is which).
enum class Split {
  None,      // whole on every rank
  Rows,      // rows [r R/N, (r+1) R/N) (a vector: its entries)
  Columns,   // input columns [r K/N, (r+1) K/N) of every row
  HeadRows,  // q, k and v rows (entries) of this rank's heads: three runs of rows
};

struct TensorInfo {
  std::string name;              // e.g. "h.3.attn.c_attn.weight"
  int unit = 0;
  std::size_t offset = 0;        // floats from the start of the arena
  std::vector<std::int64_t> shape;  // as stored here ([out, in] for matrices)
  std::size_t numel = 0;
  bool decay = false;            // AdamW weight decay applies (matrices and embeddings only)
  bool hf_transposed = false;    // Hugging Face stores it as shape reversed (Conv1D)
  bool vocab_rows = false;       // [padded_vocab_size, C]: rows past vocab_size are padding
  Init init = Init::Zero;
  Split split = Split::None;
  std::vector<std::int64_t> full_shape;  // the whole tensor's (== shape unless split)
};

// `count` elements of a tensor's slice from slice element `local` on are the whole tensor's
// elements from `full` on.
struct SliceRun {
  std::size_t full = 0, local = 0, count = 0;
};

// `count` floats of a layout's arena from `local` (relative to the run asked about) on are the
// whole model's arena floats from `whole` on; `zeros`: none of the run's floats, the whole
// arena's padding, which is zero.
struct WholeRun {
  std::size_t whole = 0, local = 0, count = 0;
  bool zeros = false;
};

// Which floats of a TP rank's arena whole_runs() maps.
enum class WholeCover {
  Saved,   // each whole-arena float once over the TP group: split tensors' slices on every rank;
           // whole tensors, and the whole arena's padding after each tensor, on TP rank 0
  Loaded,  // every float of this rank's tensors (its own padding maps nowhere: zero)
};

struct UnitInfo {
  std::string name;              // "embeddings", "h.<l>", "ln_f", "lm_head"
  std::size_t offset = 0;        // floats from the start of the arena
  std::size_t numel = 0;         // floats including internal alignment padding
  std::vector<int> tensors;      // indices into ParamLayout::tensors()
};

// A run of the arena with one weight-decay setting (padding counts as no decay).
struct DecaySegment {
  std::size_t begin = 0, end = 0;
  bool decay = false;
};

class ParamLayout {
 public:
  // The whole model, or (split.size > 1) TP rank split.rank's slice of it; throws
  // Error naming --tp when the model does not split that way.
  explicit ParamLayout(const ModelConfig& config, TensorSplit split = {});

  const ModelConfig& config() const { return config_; }
  const TensorSplit& split() const { return split_; }
  // Where tensor t's slice sits in the whole tensor, in element indices, in slice order.
  std::vector<SliceRun> slice_runs(const TensorInfo& t) const;
  // Where the floats of arena run [begin, end) sit in the whole (TP 1) model's arena, in order
  // of this arena: checkpoints are written and read in whole-model coordinates. Without a split,
  // the run itself. Under one, the padding after a tensor goes with the tensor's first element.
  std::vector<WholeRun> whole_runs(std::size_t begin, std::size_t end, WholeCover cover) const;
  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::size_t total_floats() const { return total_; }   // arena size, padding included
  std::int64_t num_params() const;                        // real parameters, no padding

  int embeddings_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_norm_unit() const { return config_.n_layer + 1; }
  // The unit holding the LM head's matrix: the embeddings for gpt2 (tied), its own for llama.
  int head_unit() const { return config_.family == Family::Llama ? config_.n_layer + 2 : embeddings_unit(); }

  const TensorInfo& find(std::string_view name) const;  // throws Error naming the tensor
  const TensorInfo* try_find(std::string_view name) const;

  // Offset of a tensor inside its unit, so unit-local pointers can be formed.
  std::size_t offset_in_unit(const TensorInfo& t) const { return t.offset - units_[t.unit].offset; }

  // The decay runs covering [begin, end) of the arena, in order; for optimizer shards.
  std::vector<DecaySegment> decay_segments(std::size_t begin, std::size_t end) const;

 private:
  ModelConfig config_;
  TensorSplit split_;
  std::vector<UnitInfo> units_;
  std::vector<TensorInfo> tensors_;
  std::size_t total_ = 0;
};

// Offsets (in floats, from a unit's start) of one block's tensors, shared by every block.
struct BlockOffsets {
  std::size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b,
      fc_proj_w, fc_proj_b;
};
struct EmbeddingOffsets {
  std::size_t wte, wpe;
};
struct FinalNormOffsets {
  std::size_t w, b;
};
// Llama's (layout.hpp names them after LlamaForCausalLM).
struct LlamaBlockOffsets {
  std::size_t attn_norm, q, k, v, o, mlp_norm, gate, up, down;
};
struct LlamaOffsets {
  std::size_t embed;         // in the embeddings unit
  LlamaBlockOffsets block;   // in every block unit
  std::size_t final_norm;    // in the final-norm unit
  std::size_t head;          // in the head unit
};
LlamaOffsets llama_offsets(const ParamLayout& layout);
BlockOffsets block_offsets(const ParamLayout& layout);
EmbeddingOffsets embedding_offsets(const ParamLayout& layout);
FinalNormOffsets final_norm_offsets(const ParamLayout& layout);

}  // namespace strata::model
