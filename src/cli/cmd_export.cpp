// strata export: a checkpoint's weights as a Hugging Face (GPT-2 or Llama) safetensors file.
#include <memory>

#include <fmt/format.h>

#include "base/aligned.hpp"
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

void run_export(const ExportArgs& a) {
  const std::filesystem::path dir = intact_checkpoint("export", a.checkpoint);
  const train::Checkpoint ckpt = train::Checkpoint::open(dir);
  const model::ParamLayout layout(ckpt.info().model);
  AlignedBuffer<float> params(layout.total_floats());
  ckpt.read(0, layout.total_floats(), params.data(), nullptr, nullptr);
  data::export_hf_safetensors(layout, params.data(), a.safetensors);
  fmt::print("exported {} (step {}, {} tensors, {:.2f}M parameters) to {}\n", dir.string(), ckpt.info().step,
             layout.tensors().size(), static_cast<double>(layout.num_params()) / 1e6, a.safetensors);
}

CommandRegistrar registrar(20, [](CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a checkpoint's weights in another format");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder, or an output folder (its newest intact checkpoint)")
      ->required();
  cmd->add_option("--safetensors", a->safetensors, "write the tensors under Hugging Face names (GPT2LMHeadModel or LlamaForCausalLM) to this .safetensors file")
      ->required();
  cmd->callback([a] { run_export(*a); });
});

}  // namespace
}  // namespace strata::cli
