#include "data/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <string>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "model/llama.hpp"

namespace strata::data {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so is this code");

namespace {

constexpr std::size_t kMaxHeaderBytes = 100u << 20;
constexpr std::string_view kModelMetadataKey = "strata_model";  // the format's own limit against hostile files

std::size_t dtype_bytes(std::string_view dtype) {
  static const std::map<std::string, std::size_t, std::less<>> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U16", 2}, {"I16", 2},
      {"F16", 2},  {"BF16", 2}, {"U32", 4}, {"I32", 4},     {"F32", 4},     {"U64", 8}, {"I64", 8},
      {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::size_t checked_numel(const std::vector<std::int64_t>& shape, const std::string& what) {
  std::size_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(fmt::format("{}: negative dimension {}", what, d));
    if (__builtin_mul_overflow(n, static_cast<std::size_t>(d), &n)) throw Error(fmt::format("{}: shape overflows", what));
  }
  return n;
}

// dst[c][r] = src[r][c] for a rows x cols source, in cache-sized tiles.
void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst) {
  constexpr std::size_t kTile = 32;
  for (std::size_t r0 = 0; r0 < rows; r0 += kTile)
    for (std::size_t c0 = 0; c0 < cols; c0 += kTile)
      for (std::size_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (std::size_t c = c0; c < std::min(cols, c0 + kTile); ++c) dst[c * rows + r] = src[r * cols + c];
}

// The tensor as Hugging Face stores it.
std::vector<std::int64_t> hf_shape(const model::ParamLayout& layout, const model::TensorInfo& t) {
  if (t.vocab_rows) return {layout.config().vocab_size, t.shape[1]};
  if (t.hf_transposed) return {t.shape[1], t.shape[0]};
  return t.shape;
}

}  // namespace

void SafetensorsWriter::add(std::string name, std::vector<std::int64_t> shape, std::function<void(float*)> fill) {
  if (name.empty() || name == "__metadata__")
    throw Error(fmt::format("safetensors: '{}' cannot name a tensor", name));
  for (const auto& t : tensors_)
    if (t.name == name) throw Error(fmt::format("safetensors: tensor '{}' added twice", name));
  const std::size_t numel = checked_numel(shape, "safetensors: tensor '" + name + "'");
  tensors_.push_back({std::move(name), std::move(shape), numel, std::move(fill)});
}

void SafetensorsWriter::add(std::string name, std::vector<std::int64_t> shape, std::span<const float> data) {
  const std::size_t numel = checked_numel(shape, "safetensors: tensor '" + name + "'");
  if (numel != data.size())
    throw Error(fmt::format("safetensors: tensor '{}': shape holds {} elements, data has {}", name, numel,
                            data.size()));
  add(std::move(name), std::move(shape), [data](float* out) { std::copy(data.begin(), data.end(), out); });
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const fs::path& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::size_t data_bytes = 0;
  for (const auto& t : tensors_) {
    const std::size_t bytes = t.numel * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {data_bytes, data_bytes + bytes}}};
    data_bytes += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data section starts 8-byte aligned

  std::vector<std::byte> out(8 + text.size() + data_bytes);
  const std::uint64_t header_len = text.size();
  std::memcpy(out.data(), &header_len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::size_t offset = 8 + text.size();
  for (const auto& t : tensors_) {
    t.fill(reinterpret_cast<float*>(out.data() + offset));
    offset += t.numel * sizeof(float);
  }
  atomic_write_file(path, out);
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path), bytes_(read_file_bytes(path)) {
  const std::string name = path.string();
  if (bytes_.size() < 8)
    throw Error(fmt::format("{}: truncated: {} bytes, too short for the safetensors header length", name,
                            bytes_.size()));
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes_.data(), 8);
  if (header_len > kMaxHeaderBytes || header_len > bytes_.size() - 8)
    throw Error(fmt::format("{}: header length {} does not fit the file's {} bytes", name, header_len,
                            bytes_.size()));
  data_start_ = 8 + static_cast<std::size_t>(header_len);
  const std::size_t data_size = bytes_.size() - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes_.data()) + 8,
                                   reinterpret_cast<const char*>(bytes_.data()) + data_start_);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: header is not valid JSON: {}", name, e.what()));
  }
  if (!header.is_object()) throw Error(fmt::format("{}: header is not a JSON object", name));

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& value = it.value();
    if (key == "__metadata__") {
      if (!value.is_object()) throw Error(fmt::format("{}: __metadata__ is not an object", name));
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string())
          throw Error(fmt::format("{}: __metadata__.{} is not a string", name, m.key()));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = fmt::format("{}: tensor '{}'", name, key);
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets"))
      throw Error(what + ": needs dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = key;
    if (!value["dtype"].is_string()) throw Error(what + ": dtype is not a string");
    e.dtype = value["dtype"].get<std::string>();
    const std::size_t elem = dtype_bytes(e.dtype);
    if (elem == 0) throw Error(fmt::format("{}: unknown dtype '{}'", what, e.dtype));
    const nlohmann::json& shape = value["shape"];
    if (!shape.is_array()) throw Error(what + ": shape is not an array");
    for (const auto& d : shape) {
      if (!d.is_number_integer()) throw Error(what + ": shape holds a non-integer");
      e.shape.push_back(d.get<std::int64_t>());
    }
    const nlohmann::json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw Error(what + ": data_offsets is not a pair of non-negative integers");
    e.begin = offsets[0].get<std::size_t>();
    e.end = offsets[1].get<std::size_t>();
    const std::size_t numel = checked_numel(e.shape, what);
    std::size_t expected = 0;
    if (__builtin_mul_overflow(numel, elem, &expected)) throw Error(what + ": size overflows");
    if (e.begin > e.end || e.end - e.begin != expected)
      throw Error(fmt::format("{}: data_offsets [{}, {}] hold {} bytes, shape {} of {} needs {}", what, e.begin,
                              e.end, e.end >= e.begin ? e.end - e.begin : 0, shape.dump(), e.dtype, expected));
    if (e.end > data_size)
      throw Error(fmt::format("{}: data_offsets end at {} but the data section has {} bytes (truncated file?)",
                              what, e.end, data_size));
    entries_.push_back(std::move(e));
  }

  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::size_t cursor = 0;
  for (const auto& e : entries_) {
    if (e.begin != cursor)
      throw Error(fmt::format("{}: tensor '{}' starts at byte {} of the data, expected {} ({})", name, e.name,
                              e.begin, cursor, e.begin < cursor ? "overlap" : "gap"));
    cursor = e.end;
  }
  if (cursor != data_size)
    throw Error(fmt::format("{}: {} bytes after the last tensor's data", name, data_size - cursor));
}

const SafetensorsEntry& SafetensorsFile::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e;
  throw Error(fmt::format("{}: no tensor named '{}'", path_.string(), name));
}

std::vector<float> SafetensorsFile::read_f32(std::string_view name) const {
  const SafetensorsEntry& e = find(name);
  if (e.dtype != "F32")
    throw Error(fmt::format("{}: tensor '{}' is {}, expected F32", path_.string(), name, e.dtype));
  std::vector<float> out((e.end - e.begin) / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes_.data() + data_start_ + e.begin, e.end - e.begin);
  return out;
}

void export_hf_safetensors(const model::ParamLayout& layout, const float* params, const fs::path& path) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");  // what Hugging Face loaders expect of PyTorch weights
  writer.set_metadata(std::string(kModelMetadataKey), layout.config().to_json().dump());
  for (const auto& t : layout.tensors()) {
    const float* src = params + t.offset;
    std::vector<std::int64_t> shape = hf_shape(layout, t);
    const std::size_t numel = checked_numel(shape, t.name);
    if (t.hf_transposed) {
      const auto rows = static_cast<std::size_t>(t.shape[0]), cols = static_cast<std::size_t>(t.shape[1]);
      writer.add(t.name, std::move(shape), [=](float* out) { transpose(src, rows, cols, out); });
    } else {
      writer.add(t.name, std::move(shape), std::span<const float>(src, numel));  // vocabulary matrices: their first vocab_size rows
    }
  }
  writer.write(path);
}

void import_hf_safetensors(const model::ParamLayout& layout, const fs::path& path, float* params) {
  SafetensorsFile file(path);
  const std::string name = path.string();
  // Everything is checked before the first parameter is overwritten.
  std::set<std::string> expected;
  for (const auto& t : layout.tensors()) {
    expected.insert(t.name);
    const SafetensorsEntry& e = file.find(t.name);
    const std::vector<std::int64_t> shape = hf_shape(layout, t);
    if (e.shape != shape)
      throw Error(fmt::format("{}: tensor '{}' has shape [{}], this model needs [{}]", name, t.name,
                              fmt::join(e.shape, ", "), fmt::join(shape, ", ")));
    if (e.dtype != "F32") throw Error(fmt::format("{}: tensor '{}' is {}, expected F32", name, t.name, e.dtype));
  }
  for (const auto& e : file.entries())
    if (!expected.count(e.name))
      throw Error(fmt::format("{}: tensor '{}' is not part of this model", name, e.name));

  for (const auto& t : layout.tensors()) {
    const std::vector<float> data = file.read_f32(t.name);
    float* dst = params + t.offset;
    if (t.hf_transposed) {
      transpose(data.data(), static_cast<std::size_t>(t.shape[1]), static_cast<std::size_t>(t.shape[0]), dst);
    } else {
      std::copy(data.begin(), data.end(), dst);
      std::fill(dst + data.size(), dst + t.numel, 0.0f);  // padded vocabulary rows
    }
  }
}

std::optional<model::ModelConfig> safetensors_model(const SafetensorsFile& file) {
  const auto it = file.metadata().find(std::string(kModelMetadataKey));
  if (it == file.metadata().end()) return std::nullopt;
  try {
    return model::ModelConfig::from_json(nlohmann::json::parse(it->second));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: metadata '{}': {}", file.path().string(), kModelMetadataKey, e.what()));
  }
}

nlohmann::json hf_config_json(const model::ModelConfig& c) {
  if (c.family == model::Family::Llama)
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.n_embd},
            {"intermediate_size", c.ffn_size()},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.kv_heads()},
            {"max_position_embeddings", c.seq_len},
            {"hidden_act", "silu"},
            {"rms_norm_eps", std::stod(fmt::format("{:g}", model::kRmsNormEps))},  // 1e-05, not float's digits
            {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", false},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"torch_dtype", "float32"}};
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_embd", c.n_embd},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_positions", c.seq_len},
          {"n_ctx", c.seq_len},
          {"n_inner", nullptr},  // 4 x n_embd
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},  // GPT-2's, as the LayerNorm kernels use
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

}  // namespace strata::data
