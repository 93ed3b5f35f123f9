#pragma once
// Shared by the train tests: scratch folders, token files, and running the strata binary.
#include <pty.h>
#include <unistd.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/fileio.hpp"
#include "data/tokens.hpp"

namespace strata::test {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("strata_train_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Byte tokens of text with structure a small model learns quickly: sentences drawn from a
// short list by a fixed LCG.
inline std::vector<std::uint16_t> sample_text_tokens(std::size_t n, std::uint64_t seed = 7) {
  static const char* sentences[] = {"the cat sat on the mat. ", "a dog ran in the park! ",
                                    "we train small models on bytes. ", "strata shards every state. ",
                                    "hello world, hello tokens. "};
  std::vector<std::uint16_t> out;
  std::uint64_t x = seed;
  while (out.size() < n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    for (const char* p = sentences[(x >> 33) % 5]; *p && out.size() < n; ++p)
      out.push_back(static_cast<unsigned char>(*p));
  }
  return out;
}

inline void write_tokens(const fs::path& path, const std::vector<std::uint16_t>& tokens) {
  data::write_token_file(path, tokens);
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the strata binary with `args` (already shell-quoted where needed).
inline CommandResult run_strata(const std::string& args) {
  const std::string cmd = std::string(STRATA_BIN) + " " + args + " 2>&1";
  CommandResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline constexpr int kNoTerminal = -2;  // this machine gives no pseudo-terminal

// Runs the strata binary on a pseudo-terminal, as a person at a shell would: `args` split on spaces.
inline CommandResult run_strata_on_terminal(const std::string& args) {
  std::vector<std::string> words{STRATA_BIN};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  CommandResult r;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) {
    r.exit_code = kNoTerminal;
    r.output = std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::array<char, 4096> buf;
  for (;;) {
    const ssize_t n = ::read(master, buf.data(), buf.size());
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    r.output.append(buf.data(), static_cast<std::size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_file_text(path));
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

inline nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file_text(path)); }

}  // namespace strata::test
