// strata data prepare|inspect: make token files from text and look inside them.
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "base/plural.hpp"
#include "cli/command.hpp"
#include "data/prepare.hpp"
#include "data/tokens.hpp"

namespace {

void run_prepare(const strata::data::PrepareOptions& options) {
  const auto report = strata::data::prepare_text(options);
  // Every file found is counted once, so the parts add up to the whole.
  const std::size_t found = report.files.size() + report.skipped_not_text + report.skipped_duplicates;
  fmt::print("data prepare: {} found, {} read as text", strata::count_of(static_cast<std::int64_t>(found), "file"), report.files.size());
  if (report.skipped_not_text) fmt::print(", {} skipped as not text (binary)", report.skipped_not_text);
  if (report.skipped_duplicates) fmt::print(", {} skipped as duplicates", report.skipped_duplicates);
  fmt::print("\n  tokenizer: {}: train with model.vocab_size >= {}", report.tokenizer, report.vocab_size);
  fmt::print("\n  {}: {} tokens\n  {}: {} tokens ({:.1f}%)\n", report.train_path.string(), report.train_tokens,
             report.val_path.string(), report.val_tokens,
             100.0 * static_cast<double>(report.val_tokens) /
                 static_cast<double>(report.train_tokens + report.val_tokens));
}

void run_inspect(const std::string& path, int vocab_size) {
  const strata::data::TokenFile file(path, vocab_size);
  const auto stats = strata::data::token_stats(file.tokens());
  fmt::print("{}: {} tokens, ids {}..{} ({} distinct), unigram entropy {:.4f} nats ({:.4f} bits)\n", path,
             stats.count, stats.min_id, stats.max_id, stats.distinct, stats.entropy_nats,
             stats.entropy_nats / std::log(2.0));
}

}  // namespace

static strata::cli::CommandRegistrar reg(20, [](CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare and inspect token files (llm.c .bin format)");
  data->require_subcommand(1);

  auto prepare = std::make_shared<strata::data::PrepareOptions>();
  auto* prep = data->add_subcommand(
      "prepare",
      "Tokenize text (bytes, or GPT-2 BPE with --tokenizer) into OUT/train.bin and OUT/val.bin. Directories are "
      "walked recursively for text files (no NUL byte, valid UTF-8); every (1/F)-th chunk of the text goes to "
      "validation.");
  prep->add_option("--input", prepare->inputs, "Text files or directories")->required();
  prep->add_option("--out", prepare->out_dir, "Output directory")->required();
  prep->add_option("--val-fraction", prepare->val_fraction, "Fraction of chunks held out for validation")
      ->capture_default_str();
  prep->add_option("--chunk-bytes", prepare->chunk_bytes, "Size of the chunks dealt to train or validation")
      ->capture_default_str();
  prep->add_option("--tokenizer", prepare->tokenizer,
                   "Directory of GPT-2 BPE files: vocab.json + merges.txt, or encoder.json + vocab.bpe (default: "
                   "bytes, vocabulary 256)");
  prep->callback([prepare] { run_prepare(*prepare); });

  auto path = std::make_shared<std::string>();
  auto vocab = std::make_shared<int>(0);
  auto* inspect = data->add_subcommand("inspect", "Token count, id range and unigram entropy of a token file");
  inspect->add_option("file", *path, "Token file")->required();
  inspect->add_option("--vocab-size", *vocab, "Refuse ids at or above this (0: no check)")->capture_default_str();
  inspect->callback([path, vocab] { run_inspect(*path, *vocab); });
});
