#pragma once
// How the commands that read a whole checkpoint (export, ckpt convert) pick it.
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "train/checkpoint.hpp"

namespace strata::cli {

// A checkpoint folder as is, when intact; of an output folder, its newest intact checkpoint,
// saying on stderr which newer ones `command` passed over and why.
inline std::filesystem::path intact_checkpoint(const std::string& command, const std::string& path) {
  const train::ResumeChoice choice = train::choose_checkpoint(path);
  for (const std::string& why : choice.passed_over)
    fmt::print(stderr, "strata: {} passes over a damaged checkpoint: {}\n", command, why);
  if (!choice.passed_over.empty())
    fmt::print(stderr, "strata: {} uses {}, the newest intact checkpoint\n", command, choice.dir.string());
  return choice.dir;
}

}  // namespace strata::cli
