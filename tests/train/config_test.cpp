#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "support.hpp"
#include "train/config.hpp"

using namespace strata;
using namespace strata::train;
using strata::test::error_of;

namespace {

TrainConfig from_toml(const std::string& text) { return build_config(parse_config_toml(text, "run.toml")); }

}  // namespace

TEST(TrainConfig, ReadsEverySectionAndFlagsReplaceFileValues) {
  Settings s = parse_config_toml(R"(
[model]
preset = "tiny"
n_layer = 3
[data]
train = "t.bin"
val = "v.bin"
[optim]
lr = 1e-3
warmup = 5
grad_clip = 0
[train]
batch = 2
steps = 7
grad_accum = 3
out = "runs/x"
)",
                                 "run.toml");
  s["train.batch"] = std::int64_t{5};  // what a --batch 5 flag does
  TrainConfig c = build_config(s);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.batch, 5);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.grad_accum, 3);
  EXPECT_EQ(c.seq_len(), 64);
  EXPECT_FLOAT_EQ(c.lr, 1e-3f);
  EXPECT_FLOAT_EQ(c.min_lr, 1e-4f);  // follows lr when not given
  EXPECT_EQ(c.warmup, 5);
  EXPECT_EQ(c.adamw.grad_clip, 0.0f);
  EXPECT_EQ(c.train_data, "t.bin");
  EXPECT_EQ(c.val_data, "v.bin");
  EXPECT_EQ(c.out_dir, "runs/x");
}

TEST(TrainConfig, PresetFlagKeepsTheFilesFieldOverrides) {
  Settings s = parse_config_toml("[model]\npreset = \"tiny\"\nn_layer = 4\n[data]\ntrain = \"t.bin\"\n", "run.toml");
  s["model.preset"] = std::string("small");
  TrainConfig c = build_config(s);
  EXPECT_EQ(c.model_name, "small");
  EXPECT_EQ(c.model.n_embd, 384);
  EXPECT_EQ(c.model.n_layer, 4);
}

TEST(TrainConfig, NewVocabularyBringsItsPaddedSize) {
  TrainConfig c = from_toml("[model]\nvocab_size = 50257\n[data]\ntrain = \"t.bin\"\n");
  EXPECT_EQ(c.model.padded_vocab_size, 50304);
}

TEST(TrainConfig, UnknownKeyIsRefusedNamingFileAndKey) {
  EXPECT_EQ(error_of([] { from_toml("[train]\nlerning_rate = 0.1\n"); }), "run.toml: train.lerning_rate: unknown key");
  EXPECT_EQ(error_of([] { from_toml("[trian]\nbatch = 1\n"); }), "run.toml: trian.batch: unknown key (did you mean 'train.batch'?)");
  EXPECT_EQ(error_of([] { from_toml("batch = 1\n"); }), "run.toml: batch: expected a section ([batch]), not a value");
}

TEST(TrainConfig, WrongTypesAreRefusedNamingTheKey) {
  EXPECT_EQ(error_of([] { from_toml("[train]\nbatch = \"four\"\n"); }), "run.toml: train.batch: must be an integer");
  EXPECT_EQ(error_of([] { from_toml("[optim]\nlr = \"fast\"\n"); }), "run.toml: optim.lr: must be a number");
  EXPECT_EQ(error_of([] { from_toml("[data]\ntrain = 3\n"); }), "run.toml: data.train: must be a string");
}

// Found from fuzz_topology's finding of the same kind: a flag such as --out with bytes that are
// not UTF-8 made the run abort at its end, when summary.json was written.
TEST(TrainConfig, StringsThatAreNotUtf8AreRefusedNamingTheKey) {
  Settings s = {{"data.train", std::string("t.bin")}, {"train.out", std::string("runs/\x8f")}};
  EXPECT_EQ(error_of([&] { build_config(s); }), "train.out: not UTF-8 text");
  s["train.out"] = std::string("runs/\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(build_config(s).out_dir, "runs/\xc3\xa9t\xc3\xa9");
}

TEST(TrainConfig, SyntaxErrorNamesFileAndLine) {
  std::string e = error_of([] { from_toml("[train]\nbatch = = 3\n"); });
  EXPECT_EQ(e.rfind("run.toml:2:", 0), 0u) << e;
}

// Non-ASCII characters where TOML allows only ASCII (toml++ 3.3.0 classifies them through a
// path the fuzz build exempts from UBSan: tests/fuzz/toml_ignorelist.txt); inside strings
// they are fine.
TEST(TrainConfig, NonAsciiOutsideStringsIsASyntaxErrorNamingLineAndColumn) {
  for (const char* text : {"\xc3\xa9 = 1\n", "[train]\nbatch = 4\xc8\x8b\n", "[train]\nbatch = \xef\xb9\x90\n"}) {
    const std::string e = error_of([&] { parse_config_toml(text, "run.toml"); });
    EXPECT_TRUE(e.starts_with("run.toml:1:1:") || e.starts_with("run.toml:2:")) << text << " -> " << e;
  }
  EXPECT_EQ(from_toml("[data]\ntrain = \"donn\xc3\xa9" "es.bin\"\n").train_data, "donn\xc3\xa9" "es.bin");
}

TEST(TrainConfig, ZeroAndNegativeSizesAreRefusedNamingTheField) {
  const char* data = "[data]\ntrain = \"t.bin\"\n";
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[train]\nbatch = 0\n"); }),
            "train.batch = 0: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[train]\nsteps = -3\n"); }),
            "train.steps = -3: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[train]\nseq = 0\n"); }), "train.seq = 0: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[train]\ngrad_accum = 0\n"); }),
            "train.grad_accum = 0: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[model]\nn_embd = 0\n"); }),
            "model.n_embd = 0: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[model]\nn_layer = -1\n"); }),
            "model.n_layer = -1: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[optim]\nlr = 0\n"); }), "optim.lr = 0: must be positive");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[optim]\nwarmup = -1\n"); }),
            "optim.warmup = -1: must not be negative");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[shard]\nbucket_bytes = -1\n"); }),
            "shard.bucket_bytes = -1: must not be negative");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[shard]\ntp = 0\n"); }), "shard.tp = 0: must be positive");
}

TEST(TrainConfig, PiecesOnTheWireAreKibUpToOneGibAndZeroMeansWholeMessages) {
  const char* data = "[data]\ntrain = \"t.bin\"\n";
  EXPECT_EQ(from_toml(data).piece_bytes(), comm::kDefaultPieceBytes);
  EXPECT_EQ(from_toml(std::string(data) + "[comm]\npiece_kib = 0\n").piece_bytes(), 0u);
  EXPECT_EQ(from_toml(std::string(data) + "[comm]\npiece_kib = 256\n").piece_bytes(), 256u * 1024);
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[comm]\npiece_kib = -1\n"); }),
            "comm.piece_kib = -1: must lie in [0, 1048576] (KiB a piece; 0: whole messages)");
  EXPECT_EQ(error_of([&] { from_toml(std::string(data) + "[comm]\npiece_kib = 1048577\n"); }),
            "comm.piece_kib = 1048577: must lie in [0, 1048576] (KiB a piece; 0: whole messages)");
  // A command that takes the flag alone (strata bench collectives) names the flag.
  EXPECT_EQ(build_piece_bytes({{"comm.piece_kib", std::int64_t(4)}}), 4096u);
  EXPECT_EQ(error_of([] { build_piece_bytes({{"comm.piece_kib", std::int64_t(-2)}}); }),
            "--piece-kib = -2: must lie in [0, 1048576] (KiB a piece; 0: whole messages)");
}

TEST(TrainConfig, TensorParallelismTakesThePlannersNames) {
  const TrainConfig c = from_toml("[data]\ntrain = \"t.bin\"\n[shard]\ntp = 2\ntp_tier = \"node\"\n");
  EXPECT_EQ(c.shard.tp, 2);
  EXPECT_EQ(c.shard.tp_tier, "node");
  EXPECT_EQ(from_toml("[data]\ntrain = \"t.bin\"\n").shard.tp, 1);
}

TEST(TrainConfig, HeadsThatDoNotDivideHiddenAreRefused) {
  EXPECT_EQ(error_of([] { from_toml("[model]\nn_head = 5\n[data]\ntrain = \"t.bin\"\n"); }),
            "model.n_head = 5 does not divide model.n_embd = 64");
}

TEST(TrainConfig, LlamaFieldsComeFromThePresetAndTheFile) {
  const auto c = from_toml("[model]\npreset = \"llama-tiny\"\nn_kv_head = 1\nffn_hidden = 96\nrope_theta = 5e5\n"
                           "[data]\ntrain = \"t.bin\"\n");
  EXPECT_EQ(c.model.family, model::Family::Llama);
  EXPECT_EQ(c.model.n_kv_head, 1);
  EXPECT_EQ(c.model.ffn_size(), 96);
  EXPECT_EQ(c.model.rope_theta, 5e5);
  // A family on its own turns a preset's shape into that family.
  const auto t = from_toml("[model]\npreset = \"tiny\"\nfamily = \"llama\"\n[data]\ntrain = \"t.bin\"\n");
  EXPECT_EQ(t.model.family, model::Family::Llama);
  EXPECT_EQ(t.model.kv_heads(), t.model.n_head);
  EXPECT_EQ(model::ModelConfig::from_json(t.model.to_json()), t.model);
}

TEST(TrainConfig, LlamaInconsistenciesAreRefusedNamingTheField) {
  EXPECT_EQ(error_of([] { from_toml("[model]\npreset = \"llama-tiny\"\nn_kv_head = 3\n[data]\ntrain = \"t.bin\"\n"); }),
            "model.n_kv_head = 3 does not divide model.n_head = 4");
  EXPECT_EQ(error_of([] { from_toml("[model]\nfamily = \"mamba\"\n[data]\ntrain = \"t.bin\"\n"); }),
            "model.family = 'mamba': unknown family (known: gpt2, llama)");
  EXPECT_EQ(error_of([] { from_toml("[model]\nn_kv_head = 1\n[data]\ntrain = \"t.bin\"\n"); }),
            "model.n_kv_head = 1: family gpt2 has one K/V head per head (n_head = 2); grouped-query attention needs "
            "model.family = \"llama\"");
  EXPECT_EQ(error_of([] { from_toml("[model]\npreset = \"llama-tiny\"\nrope_theta = 0.5\n[data]\ntrain = \"t.bin\"\n"); }),
            "model.rope_theta = 0.5: must be a finite number above 1");
}

TEST(TrainConfig, OtherInconsistenciesAreRefusedNamingTheField) {
  EXPECT_EQ(error_of([] { from_toml("[train]\nseq = 65\n[data]\ntrain = \"t.bin\"\n"); }),
            "train.seq = 65 exceeds model.seq_len = 64: raise model.seq_len (--seq-len 65, or seq_len in [model]) or "
            "shorten train.seq");
  EXPECT_EQ(error_of([] { from_toml("[train]\nsteps = 3\n"); }),
            "data.train: missing (give --train-data or [data] train in the config file)");
  EXPECT_EQ(error_of([] { from_toml("[optim]\nbeta2 = 1.0\n[data]\ntrain = \"t.bin\"\n"); }),
            "optim.beta2 = 1: must lie in [0, 1)");
  EXPECT_EQ(error_of([] { from_toml("[train]\nsave_every = 5\n[data]\ntrain = \"t.bin\"\n"); }),
            "train.save_every: checkpoints need an output folder (--out)");
  EXPECT_EQ(error_of([] { from_toml("[model]\npreset = \"huge\"\n[data]\ntrain = \"t.bin\"\n"); }),
            "model: unknown preset 'huge' (known: tiny, mini, small, gpt2-124m, llama-tiny, llama-small, tinyllama-1.1b, llama2-7b)");
  EXPECT_EQ(error_of([] { from_toml("[train]\nrecompute = \"half\"\n[data]\ntrain = \"t.bin\"\n"); }),
            "train.recompute = 'half': must be none or full");
  EXPECT_TRUE(from_toml("[train]\nrecompute = \"full\"\n[data]\ntrain = \"t.bin\"\n").recomputes());
  EXPECT_FALSE(from_toml("[data]\ntrain = \"t.bin\"\n").recomputes());
  EXPECT_EQ(error_of([] { from_toml("[train]\nprecision = \"fp16\"\n[data]\ntrain = \"t.bin\"\n"); }),
            "train.precision = 'fp16': must be fp32 or bf16");
  EXPECT_EQ(from_toml("[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\n[data]\ntrain = \"t.bin\"\n").precision,
            "bf16");
  EXPECT_EQ(from_toml("[data]\ntrain = \"t.bin\"\n").precision, "fp32");
}

TEST(TrainConfig, PipelineLayersAreBlockCountsAndABadOneIsRefusedNamingTheKey) {
  EXPECT_EQ(from_toml("[shard]\npp_layers = \"1,3\"\n[data]\ntrain = \"t.bin\"\n").shard.pp_layers,
            (std::vector<int>{1, 3}));
  EXPECT_TRUE(from_toml("[data]\ntrain = \"t.bin\"\n").shard.pp_layers.empty());
  EXPECT_EQ(error_of([] { from_toml("[shard]\npp_layers = \"1,x\"\n[data]\ntrain = \"t.bin\"\n"); }),
            "shard.pp_layers '1,x': 'x' is not a positive block count (give one a stage, e.g. 1,3)");
}

TEST(TrainConfig, EverySettingHasOneKeyAndOneFlag) {
  std::set<std::string> keys, flags;
  for (auto& info : setting_infos()) {
    EXPECT_TRUE(keys.insert(info.key).second) << info.key;
    EXPECT_TRUE(flags.insert(info.flag).second) << info.flag;
    EXPECT_EQ(std::string(info.flag).rfind("--", 0), 0u) << info.flag;
  }
}
