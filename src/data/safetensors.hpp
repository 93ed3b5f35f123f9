#pragma once
// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ..., optional "__metadata__":
// {string: string}}) padded with spaces so the data starts 8-byte aligned, then the tensors'
// bytes, offsets relative to the end of the header, contiguous, no gaps or overlaps.
// This writer emits F32 only; the reader validates any standard dtype and returns F32 data.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/layout.hpp"

namespace strata::data {

class SafetensorsWriter {
 public:
  // fill writes the tensor's numel floats (row-major in `shape`) into the output buffer.
  void add(std::string name, std::vector<std::int64_t> shape, std::function<void(float* out)> fill);
  void add(std::string name, std::vector<std::int64_t> shape, std::span<const float> data);
  void set_metadata(std::string key, std::string value);
  // Atomic: the file exists whole or not at all.
  void write(const std::filesystem::path& path) const;

 private:
  struct Pending {
    std::string name;
    std::vector<std::int64_t> shape;
    std::size_t numel;
    std::function<void(float*)> fill;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsEntry {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::size_t begin = 0, end = 0;  // byte offsets into the data section
};

// Reads and validates a whole file; every refusal names the file and, where one is at
// fault, the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }
  const SafetensorsEntry& find(std::string_view name) const;  // throws Error
  std::vector<float> read_f32(std::string_view name) const;   // throws Error unless dtype F32

 private:
  std::filesystem::path path_;
  std::vector<std::byte> bytes_;
  std::size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The weights under their Hugging Face names (layout.hpp): GPT2LMHeadModel's (Conv1D matrices
// transposed to HF's [in, out]) or LlamaForCausalLM's; vocabulary matrices (wte,
// embed_tokens, lm_head) cut to the real vocabulary's rows; metadata {"format": "pt",
// "strata_model": the model's config as a checkpoint records it}.
void export_hf_safetensors(const model::ParamLayout& layout, const float* params,
                             const std::filesystem::path& path);
// The inverse: fills every tensor of `params` (padded vocabulary rows zeroed; alignment
// padding untouched). Refuses a missing or extra tensor, a dtype other than F32 and a shape
// other than this model's, naming the tensor.
void import_hf_safetensors(const model::ParamLayout& layout, const std::filesystem::path& path, float* params);

// The model a file from export_hf_safetensors records in its metadata; nullopt for a file
// without it (another tool's, or an export from before it was recorded).
std::optional<model::ModelConfig> safetensors_model(const SafetensorsFile& file);

// The model's config.json in Hugging Face's form for its family (GPT2Config or LlamaConfig field
// names), so that transformers' from_pretrained loads the exported folder.
nlohmann::json hf_config_json(const model::ModelConfig& config);

}  // namespace strata::data
