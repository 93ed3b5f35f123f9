// strata's models against independent implementations: the PyTorch twins of
// bench/torch_gpt.py and bench/torch_llama.py run in float64. This test runs strata's
// initialisation and two accumulated micro-batches of forward_backward over ArenaAccess,
// dumps parameters, tokens, losses, logits and gradients with their ParamLayout index (and,
// for Llama, the Hugging Face safetensors export), and hands the folder to
// torch_reference.py, which loads the same weights into the twin and compares every number
// (see that script for the checks and tolerances). Skipped when /usr/bin/python3 or its
// torch is missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/cpu.hpp"
#include "base/fileio.hpp"
#include "data/safetensors.hpp"
#include "model/model.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::model;

namespace {

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kSkipExitCode = 77;  // torch_reference.py: torch is not importable
constexpr int kMicroBatches = 2;   // gradients accumulate (+=) over both, each scaled by 1/2

struct Case {
  ModelConfig config;
  int batch, seq;
  std::uint64_t seed;
};

template <class T>
void write_raw(const fs::path& path, std::span<const T> values) {
  atomic_write_file(path, std::as_bytes(values));
}

// Runs strata on `c` and writes what torch_reference.py reads into `dir`.
void dump_strata_run(const Case& c, const fs::path& dir) {
  const std::unique_ptr<Model> model = make_model(c.config, c.batch, c.seq);
  const ParamLayout& layout = model->layout();
  AlignedBuffer<float> params(layout.total_floats()), grads(layout.total_floats());
  model->init_params(params.data(), c.seed);
  ArenaAccess access(layout, params.data(), grads.data());
  // Linear weights are [out, in] in Hugging Face's Llama as here: the script compares the
  // file with the arena directly (GPT-2's Conv1D layout has its own test in tests/data).
  if (c.config.family == Family::Llama)
    data::export_hf_safetensors(layout, params.data(), dir / "model.safetensors");

  const std::size_t n = static_cast<std::size_t>(c.batch) * c.seq;
  std::vector<std::int32_t> tokens(kMicroBatches * n), targets(kMicroBatches * n);
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<std::int32_t> token(0, c.config.vocab_size - 1);
  for (auto& t : tokens) t = token(rng);
  for (auto& t : targets) t = token(rng);

  nlohmann::json losses = nlohmann::json::array();
  for (int m = 0; m < kMicroBatches; ++m)
    losses.push_back(model->forward_backward(access, tokens.data() + m * n, targets.data() + m * n,
                                          1.0f / kMicroBatches));
  const std::size_t n_logits = n * c.config.padded_vocab_size;

  nlohmann::json tensors = nlohmann::json::array();
  for (auto& t : layout.tensors())
    tensors.push_back({{"name", t.name}, {"offset", t.offset}, {"shape", t.shape}});
  nlohmann::json index = {{"config", c.config.to_json()},     {"batch", c.batch},
                          {"seq", c.seq},                     {"micro_batches", kMicroBatches},
                          {"grad_scale", 1.0 / kMicroBatches}, {"losses", losses},
                          {"total_floats", layout.total_floats()}, {"tensors", tensors},
                          {"isa", std::string(isa_name(detected_isa()))}};
  write_raw<float>(dir / "params.f32", {params.data(), params.size()});
  write_raw<float>(dir / "grads.f32", {grads.data(), grads.size()});
  write_raw<float>(dir / "logits.f32", {model->logits(), n_logits});  // of the last micro-batch
  write_raw<std::int32_t>(dir / "tokens.i32", tokens);
  write_raw<std::int32_t>(dir / "targets.i32", targets);
  atomic_write_file(dir / "index.json", index.dump(2));
}

test::CommandResult run_reference(const fs::path& dir) {
  return test::run_command(fmt::format("{} '{}' '{}'", kPython, STRATA_PEERS_SCRIPT, dir.string()),
                           test::Stderr::Capture);
}

class TorchReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kPython)) GTEST_SKIP() << kPython << " is missing: no PyTorch reference to compare with";
  }

  void check(const Case& c) {
    dump_strata_run(c, dir_.path());
    test::CommandResult r = run_reference(dir_.path());
    if (r.exit_code == kSkipExitCode) GTEST_SKIP() << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::printf("%s", r.output.c_str());
  }

  test::ScratchDir dir_;
};

TEST_F(TorchReference, TinyMatchesFloat64Twin) { check({ModelConfig::preset("tiny"), 2, 64, 7}); }

// Odd sizes everywhere: hidden 40 (not a multiple of a vector), head_dim 8, 3 layers, a
// sequence shorter than seq_len, of no power of two and longer than two attention tiles,
// and a vocabulary of 201 padded to 256, whose padded logits must stay out of the loss.
TEST_F(TorchReference, OddShapesAndPaddedVocabMatchFloat64Twin) {
  ModelConfig config{3, 5, 40, 80, 201, pad_vocab(201)};
  check({config, 3, 77, 11});
}

// Llama with grouped-query attention (3 query heads per K/V head), an odd MLP width, a
// rotary base other than the default, a sequence shorter than seq_len and a padded vocabulary.
TEST_F(TorchReference, LlamaMatchesFloat64TwinAndLoadsFromItsSafetensors) {
  ModelConfig config = ModelConfig::preset("llama-tiny");
  config.n_layer = 3;
  config.n_head = 6;
  config.n_kv_head = 2;
  config.n_embd = 48;
  config.ffn_hidden = 100;
  config.rope_theta = 1000;
  config.vocab_size = 201;
  config.padded_vocab_size = pad_vocab(201);
  check({config, 3, 37, 5});
}

TEST_F(TorchReference, LlamaTinyMatchesFloat64Twin) { check({ModelConfig::preset("llama-tiny"), 2, 64, 7}); }

}  // namespace
