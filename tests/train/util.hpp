#pragma once
// Shared by the train tests: token files and running the strata binary; the generic helpers
// (ScratchDir, run_command, read_json...) come from tests/support.hpp.
#include <pty.h>
#include <unistd.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokens.hpp"
#include "support.hpp"

namespace strata::test {

namespace fs = std::filesystem;

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

// Runs the strata binary with `args` (already shell-quoted where needed), its messages in the output.
inline CommandResult run_strata(const std::string& args) {
  return run_command(std::string(STRATA_BIN) + " " + args, Stderr::Capture);
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

}  // namespace strata::test
