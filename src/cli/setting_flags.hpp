#pragma once
// One command-line flag per setting of the table (train/config.hpp): `strata train` registers
// every setting, `strata plan` those that shape a spec, through the same function, so the two
// spell, explain, default and parse each flag alike.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "train/config.hpp"

namespace strata::cli {

struct SettingFlag {
  const train::SettingInfo* info;
  CLI::Option* option = nullptr;
  train::SettingValue value;  // of the setting's kind
};

struct SettingFlags {
  std::vector<std::unique_ptr<SettingFlag>> flags;
  bool keep_weights_after_forward = false;
  bool sequence_parallel = false;

  // The settings the command line gave, by key (a flag given alone takes its bare value).
  train::Settings given() const;
};

// Registers `info`'s flag on `cmd`: its help, the setting's key and the default a run uses.
void add_setting_flag(CLI::App* cmd, const train::SettingInfo& info, SettingFlags& flags);
// --keep-weights-after-forward and --sequence-parallel: the spec's switches outside the table.
void add_switch_flags(CLI::App* cmd, SettingFlags& flags);
// The flags that shape a spec (train::shapes_spec) and the switches: what `strata plan` takes
// of `strata train`'s.
void add_spec_flags(CLI::App* cmd, SettingFlags& flags);

}  // namespace strata::cli
