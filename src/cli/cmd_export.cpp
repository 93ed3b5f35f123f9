// strata export: a checkpoint's weights as a Hugging Face (GPT-2 or Llama) safetensors file, and
// the model's config.json beside it, so the folder loads in transformers as it is.
#include <memory>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/aligned.hpp"
#include "base/error.hpp"
#include "base/fileio.hpp"
#include "cli/checkpoints.hpp"
#include "cli/command.hpp"
#include "data/safetensors.hpp"
#include "model/layout.hpp"
#include "train/checkpoint.hpp"

namespace strata::cli {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string safetensors;
};

// The folder the file goes to, refused before any work when it is missing, naming it (not the
// temporary file the atomic write would fail on).
std::filesystem::path output_folder(const std::filesystem::path& file) {
  const std::filesystem::path folder = file.parent_path().empty() ? "." : file.parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw Error(fmt::format("export: --safetensors {}: the folder {} does not exist (create it first)", file.string(),
                            folder.string()));
  return folder;
}

void run_export(const ExportArgs& a) {
  const std::filesystem::path folder = output_folder(a.safetensors);
  const std::filesystem::path dir = intact_checkpoint("export", a.checkpoint);
  const train::Checkpoint ckpt = train::Checkpoint::open(dir);
  const model::ParamLayout layout(ckpt.info().model);
  AlignedBuffer<float> params(layout.total_floats());
  ckpt.read(0, layout.total_floats(), params.data(), nullptr, nullptr);
  data::export_hf_safetensors(layout, params.data(), a.safetensors);
  const std::filesystem::path config_json = folder / "config.json";
  atomic_write_file(config_json, data::hf_config_json(ckpt.info().model).dump(2) + "\n");
  fmt::print("exported {} (step {}, {} tensors, {:.2f}M parameters) to {}, its Hugging Face config to {}\n",
             dir.string(), ckpt.info().step, layout.tensors().size(), static_cast<double>(layout.num_params()) / 1e6,
             a.safetensors, config_json.string());
}

CommandRegistrar registrar(20, [](CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a checkpoint's weights in another format");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder, or an output folder (its newest intact checkpoint)")
      ->required();
  cmd->add_option("--safetensors", a->safetensors, "write the tensors under Hugging Face names (GPT2LMHeadModel or LlamaForCausalLM) to this .safetensors file, and the model's config.json beside it (its folder must exist)")
      ->required();
  cmd->callback([a] { run_export(*a); });
});

}  // namespace
}  // namespace strata::cli
