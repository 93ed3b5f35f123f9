// --model PATH: Hugging Face config.json files written from the published models' own values
// (their config.json on the Hugging Face hub), read into the planner's shapes and the trainer's
// configs; what strata cannot price is refused naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/hf_config.hpp"
#include "plan/model_shapes.hpp"
#include "train/config.hpp"
#include "support.hpp"

using namespace strata;
using namespace strata::plan;
using nlohmann::json;
using strata::test::error_of;

namespace {

// meta-llama/Llama-2-7b-hf
json llama2_7b() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
          {"hidden_size", 4096}, {"intermediate_size", 11008}, {"max_position_embeddings", 4096},
          {"num_attention_heads", 32}, {"num_hidden_layers", 32}, {"num_key_value_heads", 32},
          {"rms_norm_eps", 1e-05}, {"rope_scaling", nullptr}, {"tie_word_embeddings", false},
          {"vocab_size", 32000}, {"torch_dtype", "float16"}};
}

// TinyLlama/TinyLlama-1.1B-Chat-v1.0
json tinyllama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
          {"hidden_size", 2048}, {"intermediate_size", 5632}, {"max_position_embeddings", 2048},
          {"num_attention_heads", 32}, {"num_hidden_layers", 22}, {"num_key_value_heads", 4},
          {"rms_norm_eps", 1e-05}, {"tie_word_embeddings", false}, {"vocab_size", 32000}};
}

// openai-community/gpt2 (no tie_word_embeddings key: tied by default)
json gpt2() {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"activation_function", "gelu_new"},
          {"n_ctx", 1024}, {"n_embd", 768}, {"n_head", 12}, {"n_layer", 12}, {"n_positions", 1024},
          {"vocab_size", 50257}, {"layer_norm_epsilon", 1e-05}};
}

// meta-llama/Meta-Llama-3-8B
json llama3_8b() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_act", "silu"},
          {"hidden_size", 4096}, {"intermediate_size", 14336}, {"max_position_embeddings", 8192},
          {"num_attention_heads", 32}, {"num_hidden_layers", 32}, {"num_key_value_heads", 8},
          {"rope_theta", 500000.0}, {"tie_word_embeddings", false}, {"vocab_size", 128256}};
}

// mistralai/Mistral-7B-v0.1
json mistral_7b() {
  return {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"hidden_act", "silu"},
          {"hidden_size", 4096}, {"intermediate_size", 14336}, {"max_position_embeddings", 32768},
          {"num_attention_heads", 32}, {"num_hidden_layers", 32}, {"num_key_value_heads", 8},
          {"rope_theta", 10000.0}, {"sliding_window", 4096}, {"tie_word_embeddings", false},
          {"vocab_size", 32000}};
}

// Qwen/Qwen2-7B and Qwen/Qwen2-0.5B (tied)
json qwen2(bool small) {
  return {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"hidden_act", "silu"},
          {"hidden_size", small ? 896 : 3584}, {"intermediate_size", small ? 4864 : 18944},
          {"max_position_embeddings", small ? 131072 : 131072}, {"num_attention_heads", small ? 14 : 28},
          {"num_hidden_layers", small ? 24 : 28}, {"num_key_value_heads", small ? 2 : 4},
          {"rope_theta", 1000000.0}, {"sliding_window", 131072}, {"use_sliding_window", false},
          {"tie_word_embeddings", small}, {"vocab_size", small ? 151936 : 152064}};
}

// EleutherAI/gpt-neox-20b
json neox_20b() {
  return {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"}, {"hidden_act", "gelu_fast"},
          {"hidden_size", 6144}, {"intermediate_size", 24576}, {"max_position_embeddings", 2048},
          {"num_attention_heads", 64}, {"num_hidden_layers", 44}, {"rotary_emb_base", 10000},
          {"rotary_pct", 0.25}, {"tie_word_embeddings", false}, {"use_parallel_residual", true},
          {"vocab_size", 50432}};
}

class HfConfig : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const json& config) {
    const auto path = dir_ / name / "config.json";
    test::write_bytes(path, config.dump(2));
    return path.string();
  }
  test::ScratchDir dir_;
};

// Every field but the name and where it came from.
json shape_fields(const ModelShape& m) {
  json j = m.to_json();
  for (const char* key : {"name", "source", "notes", "units_from"}) j.erase(key);
  return j;
}

}  // namespace

TEST_F(HfConfig, EachFamilyReadsToThePresetsShapeOrItsPublishedParameterCount) {
  // The folder or the file itself.
  const std::string llama2 = write("llama2", llama2_7b());
  EXPECT_EQ(shape_fields(ModelShape::from_name_and_fields((dir_ / "llama2").string(), {})),
            shape_fields(ModelShape::preset("llama2-7b")));
  EXPECT_EQ(shape_fields(ModelShape::from_name_and_fields(write("tinyllama", tinyllama()), {})),
            shape_fields(ModelShape::preset("tinyllama-1.1b")));
  // GPT-2 is priced from the runtime's layout, as the preset.
  const ModelShape g = ModelShape::from_name_and_fields(write("gpt2", gpt2()), {});
  ASSERT_TRUE(g.gpt.has_value());
  EXPECT_EQ(*g.gpt, model::ModelConfig::preset("gpt2-124m"));
  EXPECT_EQ(shape_fields(g), shape_fields(ModelShape::preset("gpt2-124m")));
  EXPECT_EQ(shape_fields(ModelShape::from_name_and_fields(write("neox", neox_20b()), {})),
            shape_fields(ModelShape::preset("gpt-neox-20b")));

  // Published parameter counts (the models' cards and safetensors indexes).
  const ModelShape l3 = ModelShape::from_name_and_fields(write("llama3", llama3_8b()), {});
  EXPECT_EQ(l3.num_params(), 8'030'261'248);
  EXPECT_EQ(l3.kv_heads, 8);
  EXPECT_EQ(l3.seq, 8192);
  EXPECT_EQ(l3.mlp, Mlp::SwiGlu);
  EXPECT_EQ(l3.norm, Norm::RmsNorm);
  EXPECT_NE(l3.describe().find("SwiGLU MLP 14336 wide"), std::string::npos) << l3.describe();
  EXPECT_NE(l3.describe().find("32 heads sharing 8 K/V heads"), std::string::npos) << l3.describe();
  const ModelShape mistral = ModelShape::from_name_and_fields(write("mistral", mistral_7b()), {});
  EXPECT_EQ(mistral.num_params(), 7'241'732'096);
  ASSERT_EQ(mistral.notes.size(), 1u);
  EXPECT_NE(mistral.notes[0].find("sliding_window 4096"), std::string::npos);
  // Qwen2: Q, K and V biases counted; the small model ties its head.
  const ModelShape q7 = ModelShape::from_name_and_fields(write("qwen7", qwen2(false)), {});
  EXPECT_EQ(q7.num_params(), 7'615'616'512);
  EXPECT_TRUE(q7.qkv_biases);
  EXPECT_FALSE(q7.biases);
  const ModelShape q05 = ModelShape::from_name_and_fields(write("qwen05", qwen2(true)), {});
  EXPECT_EQ(q05.num_params(), 494'032'768);
  EXPECT_TRUE(q05.tied_head);
  // Units still cover every parameter once.
  for (const ModelShape* m : {&q7, &q05, &l3}) {
    std::size_t total = 0;
    for (std::size_t n : m->unit_plan().numel) total += n;
    EXPECT_EQ(total, static_cast<std::size_t>(m->num_params())) << m->name;
  }
  // --shape still overrides a config's field.
  EXPECT_EQ(ModelShape::from_name_and_fields(llama2, {"seq=2048"}).seq, 2048);
}

TEST_F(HfConfig, RopeScalingIsReadAndItsOriginalLengthIsTheDefaultSequence) {
  json l31 = llama3_8b();  // meta-llama/Llama-3.1-8B
  l31["max_position_embeddings"] = 131072;
  l31["rope_scaling"] = {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
  const std::string path = write("llama31", l31);
  const ModelShape m = ModelShape::from_name_and_fields(path, {});
  EXPECT_EQ(m.seq, 8192);
  EXPECT_EQ(m.num_params(), 8'030'261'248);
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("rope_scaling llama3"), std::string::npos) << m.notes[0];
  // strata's Llama runs plain rotary positions: training it is refused, naming the field.
  EXPECT_NE(error_of([&] { model::to_gpt_config(model::read_hf_config(path)); }).find("rope_scaling"),
            std::string::npos);
}

TEST_F(HfConfig, TrainTakesGpt2AndLlamaAndRefusesTheOtherArchitectures) {
  EXPECT_EQ(model::to_gpt_config(model::read_hf_config(write("gpt2", gpt2()))), model::ModelConfig::preset("gpt2-124m"));
  EXPECT_EQ(model::to_gpt_config(model::read_hf_config(write("tl", tinyllama()))),
            model::ModelConfig::preset("tinyllama-1.1b"));
  EXPECT_EQ(model::to_gpt_config(model::read_hf_config(write("l2", llama2_7b()))), model::ModelConfig::preset("llama2-7b"));
  for (const auto& [name, config, architecture] :
       {std::tuple{"mistral", mistral_7b(), "MistralForCausalLM"}, std::tuple{"qwen", qwen2(false), "Qwen2ForCausalLM"},
        std::tuple{"neox", neox_20b(), "GPTNeoXForCausalLM"}}) {
    const std::string e = error_of([&] { model::to_gpt_config(model::read_hf_config(write(name, config))); });
    EXPECT_NE(e.find(architecture), std::string::npos) << e;
    EXPECT_NE(e.find("strata train runs GPT-2"), std::string::npos) << e;
  }
  // strata train --model PATH (model.preset) resolves the file the same way, and its overrides still apply.
  const std::string tl = write("tl-train", tinyllama());
  EXPECT_EQ(train::build_model({{"model.preset", tl}}), model::ModelConfig::preset("tinyllama-1.1b"));
  EXPECT_EQ(train::build_model({{"model.preset", tl}, {"model.seq_len", std::int64_t{512}}}).seq_len, 512);
  const std::string mistral = write("mistral-train", mistral_7b());
  EXPECT_NE(error_of([&] { train::build_model({{"model.preset", mistral}}); }).find("MistralForCausalLM"),
            std::string::npos);
  // Llama 3's vocabulary is beyond the token files' uint16 ids.
  const std::string e = error_of([&] { model::to_gpt_config(model::read_hf_config(write("l3", llama3_8b()))); });
  EXPECT_NE(e.find("model.vocab_size = 128256"), std::string::npos) << e;
}

TEST_F(HfConfig, WhatCannotBePricedIsRefusedNamingTheField) {
  json mixtral = mistral_7b();  // mistralai/Mixtral-8x7B-v0.1
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["num_local_experts"] = 8;
  mixtral["num_experts_per_tok"] = 2;
  json falcon = {{"architectures", {"FalconForCausalLM"}}, {"hidden_size", 4544}};
  json no_layers = llama2_7b();
  no_layers.erase("num_hidden_layers");
  json bad_type = llama2_7b();
  bad_type["hidden_size"] = "4096";
  json biased = llama2_7b();
  biased["attention_bias"] = true;
  json gqa = llama3_8b();
  gqa["num_key_value_heads"] = 5;
  const struct {
    std::string name;
    json config;
    std::vector<std::string> parts;
  } cases[] = {
      {"mixtral", mixtral, {"num_local_experts = 8", "mixture of experts"}},
      {"falcon", falcon, {"architectures", "FalconForCausalLM", "LlamaForCausalLM"}},
      {"nolayers", no_layers, {"num_hidden_layers: missing"}},
      {"badtype", bad_type, {"hidden_size: must be an integer"}},
      {"biased", biased, {"attention_bias = true"}},
      {"gqa", gqa, {"num_key_value_heads", "5 K/V heads do not divide the 32 heads"}},
  };
  for (const auto& c : cases) {
    const std::string path = write(c.name, c.config);
    const std::string e = error_of([&] { ModelShape::from_name_and_fields(path, {}); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    for (const std::string& part : c.parts) EXPECT_NE(e.find(part), std::string::npos) << c.name << ": " << e;
  }
  test::write_bytes(dir_ / "broken" / "config.json", "{\"architectures\": [");
  EXPECT_NE(error_of([&] { ModelShape::from_name_and_fields((dir_ / "broken").string(), {}); }).find("not JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ModelShape::from_name_and_fields((dir_ / "missing.json").string(), {}); })
                .find("no such file"),
            std::string::npos);
  // Names the OS refuses to look up (longer than a file name may be; found by fuzz_config) are
  // the user's error, named, not a std::filesystem exception.
  const std::string too_long(300, 'x');
  EXPECT_NE(error_of([&] { ModelShape::from_name_and_fields(too_long, {}); }).find(too_long), std::string::npos);
  EXPECT_NE(error_of([&] { ModelShape::from_name_and_fields(too_long + ".json", {}); }).find("no such file"),
            std::string::npos);
}
