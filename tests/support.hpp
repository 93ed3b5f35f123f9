#pragma once
// Helpers the test folders share: scratch folders, files of the source tree, strata::Error
// messages, shell commands and the JSON they print. Folder-specific helpers stay in their
// folder (e.g. tests/train/util.hpp).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "base/fileio.hpp"

namespace strata::test {

// A fresh folder per test, removed afterwards. Named after the test and the process, so that
// tests running at the same time (ctest -j, other checkouts on this machine) never share one.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // A parameterized test's names hold '/' (Presets/CudaTrainer.X/tiny): one folder, not a tree.
    std::string name = "strata_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;  // a copy would remove the folder twice
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// `relative` (e.g. "configs/topology/2node-2gpu-2die.toml") in the source tree, which ctest
// names in STRATA_SOURCE_DIR; relative to the working folder when a test binary runs by hand.
inline std::filesystem::path source_path(const std::string& relative) {
  const char* root = std::getenv("STRATA_SOURCE_DIR");
  return std::filesystem::path(root ? root : ".") / relative;
}

// Writes exactly `bytes` to `path`, creating its folder: a test's hand-made input file.
inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the strata::Error that `fn` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Runs `fn`, expects a strata::Error whose message holds every one of `parts`.
template <class F>
void expect_error(F&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "no strata::Error thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (auto part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
  }
}

// Where a command's stderr goes: into the output (to check its messages) or away (so that
// stdout alone is parsed, e.g. as JSON).
enum class Stderr { Capture, Discard };

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not start or did not exit normally
  std::string output;
};

// Runs `shell_command` through /bin/sh and waits for it.
inline CommandResult run_command(const std::string& shell_command, Stderr stderr_mode) {
  const std::string command = shell_command + (stderr_mode == Stderr::Capture ? " 2>&1" : " 2>/dev/null");
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    r.output = "popen failed: " + command;
    return r;
  }
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The JSON a command printed. A failed command or output that is not JSON fails the test
// (non-fatally: the caller's checks on the empty document then fail too, naming the fields).
inline nlohmann::json parse_json_output(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  try {
    return nlohmann::json::parse(r.output);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.output;
    return {};
  }
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_file_text(path));
}

// One document per line, as metrics.jsonl holds them.
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_file_text(path));
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace strata::test
