// The training config file: TOML text -> settings -> a validated TrainConfig.
// Input: the config file's text. A strata::Error is the expected answer to bad input;
// anything else (another exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "train/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const strata::train::Settings settings = strata::train::parse_config_toml(text, "fuzz.toml");
    const strata::train::TrainConfig config = strata::train::build_config(settings);
    // What a run prints and records of the config it accepted.
    (void)config.to_json().dump();
  } catch (const strata::Error&) {
  }
  return 0;
}
