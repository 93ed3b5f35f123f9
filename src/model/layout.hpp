#pragma once
// Where every parameter lives. Parameters (and, with the same layout, gradients and
// optimizer moments) sit in one flat fp32 arena split into units:
//   unit 0          "embeddings"  wte, wpe
//   unit 1 + l      "h.<l>"       transformer block l
//   unit n_layer+1  "ln_f"        final LayerNorm
// Each unit is contiguous and starts on a 64-float (256-byte) boundary, so a sharding
// engine can gather, shard and free one unit at a time. Tensors inside a unit start on
// 16-float (64-byte) boundaries. Tensors carry their GPT-2 (Hugging Face) names.
// Matrices are stored [out, in] (torch.nn.Linear); Hugging Face's GPT-2 stores its Conv1D
// weights [in, out], which `hf_transposed` marks for import and export.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.hpp"

namespace strata::model {

inline constexpr std::size_t kUnitAlignFloats = 64;
inline constexpr std::size_t kTensorAlignFloats = 16;

struct TensorInfo {
  std::string name;              // e.g. "h.3.attn.c_attn.weight"
  int unit = 0;
  std::size_t offset = 0;        // floats from the start of the arena
  std::vector<std::int64_t> shape;  // as stored here ([out, in] for matrices)
  std::size_t numel = 0;
  bool decay = false;            // AdamW weight decay applies (matrices and embeddings only)
  bool hf_transposed = false;    // Hugging Face stores it as shape reversed (Conv1D)
};

struct UnitInfo {
  std::string name;              // "embeddings", "h.<l>", "ln_f"
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
  explicit ParamLayout(const GPTConfig& config);

  const GPTConfig& config() const { return config_; }
  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  std::size_t total_floats() const { return total_; }   // arena size, padding included
  std::int64_t num_params() const;                        // real parameters, no padding

  int embeddings_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_norm_unit() const { return config_.n_layer + 1; }

  const TensorInfo& find(std::string_view name) const;  // throws Error naming the tensor
  const TensorInfo* try_find(std::string_view name) const;

  // Offset of a tensor inside its unit, so unit-local pointers can be formed.
  std::size_t offset_in_unit(const TensorInfo& t) const { return t.offset - units_[t.unit].offset; }

  // The decay runs covering [begin, end) of the arena, in order; for optimizer shards.
  std::vector<DecaySegment> decay_segments(std::size_t begin, std::size_t end) const;

 private:
  GPTConfig config_;
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
BlockOffsets block_offsets(const ParamLayout& layout);
EmbeddingOffsets embedding_offsets(const ParamLayout& layout);
FinalNormOffsets final_norm_offsets(const ParamLayout& layout);

}  // namespace strata::model
