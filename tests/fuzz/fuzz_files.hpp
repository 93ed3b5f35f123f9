#pragma once
// Scratch files for the fuzz targets whose parsers read from disk. Each process gets one
// folder of its own, on tmpfs when there is one (every input is written and read back, so
// a disk would make the file system the bottleneck), removed when the process exits.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "base/error.hpp"
#include "base/fileio.hpp"

namespace strata::fuzz {

// $STRATA_FUZZ_TMPDIR, else /dev/shm, else the system's temporary folder.
inline std::filesystem::path scratch_base() {
  if (const char* dir = std::getenv("STRATA_FUZZ_TMPDIR"); dir && *dir) return dir;
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

// A folder that lives as long as the process. Setup failures abort: they are not findings,
// but a target that cannot write its inputs must not report a clean run either.
inline const std::filesystem::path& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder may run after static destructors.
  static const std::filesystem::path* const dir = [] {
    std::string templ = (scratch_base() / "strata-fuzz-XXXXXX").string();
    if (!::mkdtemp(templ.data())) {
      std::fprintf(stderr, "fuzz: cannot create a scratch folder from %s: %s\n", templ.c_str(), std::strerror(errno));
      std::abort();
    }
    auto* path = new std::filesystem::path(templ);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return path;
  }();
  return *dir;
}

// Replaces `path` with exactly these bytes.
inline void write_whole_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  try {
    if (fd < 0) throw Error(std::strerror(errno));
    write_all(fd, data, size, path);
    if (::close(fd) != 0) throw Error(std::strerror(errno));
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz: cannot write %s: %s\n", path.c_str(), e.what());
    std::abort();
  }
}

}  // namespace strata::fuzz
