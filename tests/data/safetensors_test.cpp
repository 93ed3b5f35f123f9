#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <span>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "data/safetensors.hpp"
#include "model/layout.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::data;
using strata::test::expect_error;
using strata::test::ScratchDir;
using strata::test::write_bytes;
namespace fs = std::filesystem;

namespace {

std::vector<float> iota_floats(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// A raw file from a header text and a data section, as another tool would write it.
std::string raw_file(const std::string& header, const std::string& data) {
  const std::uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

model::ModelConfig tiny_with_real_vocab(int vocab) {
  auto c = model::ModelConfig::preset("tiny");
  c.vocab_size = vocab;
  c.padded_vocab_size = model::pad_vocab(vocab);
  return c;
}

std::vector<float> random_arena(const model::ParamLayout& layout, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> p(layout.total_floats());
  for (auto& x : p) x = d(rng);
  return p;
}

}  // namespace

TEST(Safetensors, WriterOutputFollowsTheFormat) {
  ScratchDir dir;
  SafetensorsWriter w;
  const auto a = iota_floats(6, 1.0f), b = iota_floats(5, 100.0f), s = iota_floats(1, -7.0f);
  w.add("a", {2, 3}, a);
  w.add("b.odd", {5}, b);
  w.add("empty", {0, 4}, std::span<const float>());
  w.add("scalar", {}, s);
  w.set_metadata("format", "pt");
  w.write(dir / "t.safetensors");

  // Re-parse by hand: length prefix, padded JSON header, contiguous offsets, raw floats.
  const auto bytes = read_file_bytes(dir / "t.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(n % 8, 0u);
  const std::string header(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  const auto json = nlohmann::json::parse(header);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, json.dump().size());  // only spaces pad it
  EXPECT_EQ(json["__metadata__"], (nlohmann::json{{"format", "pt"}}));
  EXPECT_EQ(json["a"]["dtype"], "F32");
  EXPECT_EQ(json["a"]["shape"], (nlohmann::json{2, 3}));
  EXPECT_EQ(json["a"]["data_offsets"], (nlohmann::json{0, 24}));
  EXPECT_EQ(json["b.odd"]["data_offsets"], (nlohmann::json{24, 44}));
  EXPECT_EQ(json["empty"]["data_offsets"], (nlohmann::json{44, 44}));
  EXPECT_EQ(json["scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(json["scalar"]["data_offsets"], (nlohmann::json{44, 48}));
  ASSERT_EQ(bytes.size(), 8 + n + 48);
  float f;
  std::memcpy(&f, bytes.data() + 8 + n + 24 + 4 * 4, 4);
  EXPECT_EQ(f, 104.0f);

  SafetensorsFile r(dir / "t.safetensors");
  ASSERT_EQ(r.entries().size(), 4u);
  EXPECT_EQ(r.read_f32("a"), a);
  EXPECT_EQ(r.read_f32("b.odd"), b);
  EXPECT_TRUE(r.read_f32("empty").empty());
  EXPECT_EQ(r.read_f32("scalar"), s);
  EXPECT_EQ(r.find("a").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  expect_error([&] { r.find("c"); }, {"no tensor named 'c'"});
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  SafetensorsWriter w;
  const auto a = iota_floats(6, 0.0f);
  expect_error([&] { w.add("x", {4}, a); }, {"'x'", "4 elements", "data has 6"});
  expect_error([&] { w.add("__metadata__", {6}, a); }, {"__metadata__"});
  w.add("x", {6}, a);
  expect_error([&] { w.add("x", {6}, a); }, {"'x' added twice"});
}

TEST(Safetensors, ReaderRefusesMalformedFilesNamingThem) {
  ScratchDir dir;
  const std::string f8(8, '\0');  // two float zeros
  auto check = [&](const char* name, const std::string& contents, std::initializer_list<std::string_view> frags) {
    write_bytes(dir / name, contents);
    std::vector<std::string_view> all(frags);
    const std::string path = (dir / name).string();
    all.push_back(path);
    try {
      SafetensorsFile file(dir / name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      for (auto frag : all) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
    }
  };
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(write_bytes(dir / "good", raw_file(good, f8)); SafetensorsFile(dir / "good"));
  check("short", "abc", {"truncated"});
  check("huge_header", raw_file(good, f8).replace(0, 1, "\xff"), {"header length"});
  check("not_json", raw_file("{not json}", f8), {"not valid JSON"});
  check("array", raw_file("[1,2]", ""), {"not a JSON object"});
  check("truncated_data", raw_file(good, f8.substr(0, 6)), {"'w'", "data section has 6 bytes"});
  check("size_mismatch", raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8),
        {"'w'", "needs 12"});
  check("dtype", raw_file(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", f8), {"'w'", "F33"});
  check("missing_field", raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", f8), {"'w'", "data_offsets"});
  check("overlap",
        raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],)"
                 R"("data_offsets":[4,8]}})",
                 f8),
        {"overlap"});
  check("gap", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f8), {"'a'", "gap"});
  check("trailing", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f8),
        {"4 bytes after the last tensor"});
  check("metadata", raw_file(R"({"__metadata__":{"k":1}})", ""), {"__metadata__.k"});
  write_bytes(dir / "i32", raw_file(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", f8));
  expect_error([&] { SafetensorsFile(dir / "i32").read_f32("w"); }, {"'w' is I32"});
}

TEST(Gpt2Export, HuggingFaceNamesTransposedConv1DAndTruncatedVocab) {
  ScratchDir dir;
  model::ParamLayout layout(tiny_with_real_vocab(250));  // padded to 256 rows
  const auto params = random_arena(layout, 3);
  export_hf_safetensors(layout, params.data(), dir / "m.safetensors");

  SafetensorsFile file(dir / "m.safetensors");
  EXPECT_EQ(file.entries().size(), layout.tensors().size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const auto& t : layout.tensors()) {
    SCOPED_TRACE(t.name);
    const auto& e = file.find(t.name);
    const auto data = file.read_f32(t.name);
    const float* src = params.data() + t.offset;
    if (t.name == "wte.weight") {
      ASSERT_EQ(e.shape, (std::vector<std::int64_t>{250, 64}));
      ASSERT_TRUE(std::equal(data.begin(), data.end(), src));
    } else if (t.hf_transposed) {
      const auto out = t.shape[0], in = t.shape[1];
      ASSERT_EQ(e.shape, (std::vector<std::int64_t>{in, out}));
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t i = 0; i < in; ++i)
          ASSERT_EQ(data[static_cast<std::size_t>(i * out + o)], src[o * in + i]) << o << "," << i;
    } else {
      ASSERT_EQ(e.shape, t.shape);
      ASSERT_TRUE(std::equal(data.begin(), data.end(), src));
    }
  }
  EXPECT_EQ(file.find("h.1.mlp.c_fc.weight").shape, (std::vector<std::int64_t>{64, 256}));
  EXPECT_EQ(file.find("h.1.mlp.c_proj.weight").shape, (std::vector<std::int64_t>{256, 64}));

  // And back: every tensor element equal, padded vocabulary rows zero.
  std::vector<float> back(layout.total_floats(), 9.0f);
  import_hf_safetensors(layout, dir / "m.safetensors", back.data());
  for (const auto& t : layout.tensors()) {
    const std::size_t real = t.name == "wte.weight" ? 250u * 64u : t.numel;
    for (std::size_t i = 0; i < t.numel; ++i)
      ASSERT_EQ(back[t.offset + i], i < real ? params[t.offset + i] : 0.0f) << t.name << " " << i;
  }
}

TEST(Gpt2Export, ImportRefusesAnotherModelAndLeavesParamsAlone) {
  ScratchDir dir;
  model::ParamLayout tiny(model::ModelConfig::preset("tiny"));
  auto tiny_cfg = model::ModelConfig::preset("tiny");
  tiny_cfg.n_layer = 3;
  model::ParamLayout deeper(tiny_cfg);
  tiny_cfg = model::ModelConfig::preset("tiny");
  tiny_cfg.n_embd = 32;
  model::ParamLayout narrower(tiny_cfg);

  const auto params = random_arena(deeper, 1);
  export_hf_safetensors(deeper, params.data(), dir / "deeper.safetensors");
  std::vector<float> target(tiny.total_floats(), 5.0f);
  expect_error([&] { import_hf_safetensors(tiny, dir / "deeper.safetensors", target.data()); },
               {"deeper.safetensors", "'h.2.", "not part of this model"});
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](float x) { return x == 5.0f; }));

  const auto small_params = random_arena(narrower, 2);
  export_hf_safetensors(narrower, small_params.data(), dir / "narrow.safetensors");
  expect_error([&] { import_hf_safetensors(tiny, dir / "narrow.safetensors", target.data()); },
               {"narrow.safetensors", "'wte.weight'", "[256, 32]", "[256, 64]"});

  std::vector<float> deeper_target(deeper.total_floats());
  export_hf_safetensors(tiny, random_arena(tiny, 4).data(), dir / "tiny.safetensors");
  expect_error([&] { import_hf_safetensors(deeper, dir / "tiny.safetensors", deeper_target.data()); },
               {"no tensor named 'h.2.ln_1.weight'"});
}

// An independent reader (Python's json + numpy, if present) agrees on names, shapes and values.
TEST(Gpt2Export, ReadableByAnIndependentParser) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3 numpy";
  ScratchDir dir;
  model::ParamLayout layout(tiny_with_real_vocab(250));
  const auto params = random_arena(layout, 8);
  export_hf_safetensors(layout, params.data(), dir / "m.safetensors");
  const auto& w = layout.find("h.1.attn.c_attn.weight");  // stored [192, 64]; HF [64, 192]
  const std::string script = R"(
import json, struct, sys, numpy as np
raw = open(sys.argv[1], 'rb').read()
n, = struct.unpack('<Q', raw[:8])
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
def get(name):
    e = head[name]; b, end = e['data_offsets']
    return np.frombuffer(data[b:end], dtype='<f4').reshape(e['shape'])
print(len([k for k in head if k != '__metadata__']), get('wte.weight').shape[0], repr(float(get('h.1.attn.c_attn.weight')[5, 100])))
)";
  write_bytes(dir / "read.py", script);
  const std::string cmd = "/usr/bin/python3 " + (dir / "read.py").string() + " " + (dir / "m.safetensors").string() +
                          " > " + (dir / "out.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(dir / "out.txt");
  std::size_t count = 0;
  int vocab_rows = 0;
  double value = 0;
  in >> count >> vocab_rows >> value;
  EXPECT_EQ(count, layout.tensors().size());
  EXPECT_EQ(vocab_rows, 250);
  EXPECT_EQ(static_cast<float>(value), params[w.offset + 100 * 64 + 5]);  // HF [in=5, out=100]
}

// Llama under LlamaForCausalLM's names, [out, in] as nn.Linear stores them, the embedding and
// the untied head cut to the real vocabulary; back again; and what does not fit is refused
// naming the tensor (tests/peers loads the same export into the PyTorch twin).
TEST(LlamaExport, HuggingFaceNamesRoundTripAndRefusals) {
  ScratchDir dir;
  auto cfg = model::ModelConfig::preset("llama-tiny");
  cfg.vocab_size = 250;
  model::ParamLayout layout(cfg);
  const auto params = random_arena(layout, 5);
  export_hf_safetensors(layout, params.data(), dir / "m.safetensors");

  SafetensorsFile file(dir / "m.safetensors");
  EXPECT_EQ(file.entries().size(), 3 + 9 * 2u);
  using Shape = std::vector<std::int64_t>;
  EXPECT_EQ(file.find("model.embed_tokens.weight").shape, (Shape{250, 64}));
  EXPECT_EQ(file.find("lm_head.weight").shape, (Shape{250, 64}));
  EXPECT_EQ(file.find("model.norm.weight").shape, (Shape{64}));
  EXPECT_EQ(file.find("model.layers.1.self_attn.q_proj.weight").shape, (Shape{64, 64}));
  EXPECT_EQ(file.find("model.layers.1.self_attn.k_proj.weight").shape, (Shape{32, 64}));  // 2 of 4 heads
  EXPECT_EQ(file.find("model.layers.1.self_attn.v_proj.weight").shape, (Shape{32, 64}));
  EXPECT_EQ(file.find("model.layers.1.self_attn.o_proj.weight").shape, (Shape{64, 64}));
  EXPECT_EQ(file.find("model.layers.1.mlp.gate_proj.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(file.find("model.layers.1.mlp.up_proj.weight").shape, (Shape{256, 64}));
  EXPECT_EQ(file.find("model.layers.1.mlp.down_proj.weight").shape, (Shape{64, 256}));
  EXPECT_EQ(file.find("model.layers.0.input_layernorm.weight").shape, (Shape{64}));
  EXPECT_EQ(file.find("model.layers.0.post_attention_layernorm.weight").shape, (Shape{64}));
  const auto& q = layout.find("model.layers.1.self_attn.q_proj.weight");
  const auto q_data = file.read_f32(q.name);
  EXPECT_TRUE(std::equal(q_data.begin(), q_data.end(), params.begin() + static_cast<std::ptrdiff_t>(q.offset)));

  std::vector<float> back(layout.total_floats(), 9.0f);
  import_hf_safetensors(layout, dir / "m.safetensors", back.data());
  for (const auto& t : layout.tensors()) {
    const std::size_t real = t.vocab_rows ? 250u * 64u : t.numel;
    for (std::size_t i = 0; i < t.numel; ++i)
      ASSERT_EQ(back[t.offset + i], i < real ? params[t.offset + i] : 0.0f) << t.name << " " << i;
  }

  // A file missing one tensor, one with an extra tensor, one with a tensor of the wrong shape.
  auto write_without = [&](const std::string& skip, const std::string& extra, const std::string& reshape,
                           const std::filesystem::path& path) {
    SafetensorsWriter w;
    std::vector<std::vector<float>> kept;  // the writer reads the spans it was given at write()
    for (const auto& e : file.entries()) {
      if (e.name == skip) continue;
      kept.push_back(file.read_f32(e.name));
      Shape shape = e.shape;
      if (e.name == reshape) shape = {shape[1], shape[0]};
      w.add(e.name, shape, std::span<const float>(kept.back()));
    }
    if (!extra.empty()) w.add(extra, {1}, std::span<const float>(params.data(), 1));
    w.write(path);
  };
  std::vector<float> target(layout.total_floats(), 5.0f);
  write_without("model.layers.0.mlp.up_proj.weight", "", "", dir / "missing.safetensors");
  expect_error([&] { import_hf_safetensors(layout, dir / "missing.safetensors", target.data()); },
               {"missing.safetensors", "model.layers.0.mlp.up_proj.weight"});
  write_without("", "model.layers.0.self_attn.rotary_emb.inv_freq", "", dir / "extra.safetensors");
  expect_error([&] { import_hf_safetensors(layout, dir / "extra.safetensors", target.data()); },
               {"extra.safetensors", "'model.layers.0.self_attn.rotary_emb.inv_freq' is not part of this model"});
  write_without("", "", "model.layers.1.self_attn.k_proj.weight", dir / "shape.safetensors");
  expect_error([&] { import_hf_safetensors(layout, dir / "shape.safetensors", target.data()); },
               {"'model.layers.1.self_attn.k_proj.weight' has shape [64, 32]", "needs [32, 64]"});
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](float x) { return x == 5.0f; }));

  // A GPT-2 file is not a Llama one.
  model::ParamLayout gpt(model::ModelConfig::preset("tiny"));
  export_hf_safetensors(gpt, random_arena(gpt, 1).data(), dir / "gpt2.safetensors");
  expect_error([&] { import_hf_safetensors(layout, dir / "gpt2.safetensors", target.data()); },
               {"gpt2.safetensors", "model.embed_tokens.weight"});
}
