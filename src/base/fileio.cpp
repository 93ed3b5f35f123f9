#include "base/fileio.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata {

namespace fs = std::filesystem;

void write_all(int fd, const void* data, std::size_t n, const fs::path& path) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: write failed: {}", path.string(), std::strerror(errno)));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some filesystems refuse; the rename is still atomic
  ::fsync(fd);
  ::close(fd);
}

void atomic_write_file(const fs::path& path, std::span<const std::byte> bytes) {
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot create: {}", tmp.string(), std::strerror(errno)));
  try {
    write_all(fd, bytes.data(), bytes.size(), tmp);
    if (::fsync(fd) != 0)
      throw Error(fmt::format("{}: fsync failed: {}", tmp.string(), std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: rename failed: {}", path.string(), std::strerror(e)));
  }
  fsync_directory(path.parent_path());
}

void atomic_write_file(const fs::path& path, std::string_view text) {
  atomic_write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

namespace {

std::string_view special_kind(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

std::uint64_t check_input_file(const fs::path& path, Empty empty) {
  const std::string name = path.string();
  if (name.empty()) throw Error("no file named (an empty path)");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw Error(fmt::format("{}: is a folder, not a file", name));
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{}: is {}, not a regular file", name, special_kind(st.st_mode)));
  // open(2), not access(2): it is what the reader will do, and it answers for root too.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot read: {}", name, std::strerror(errno)));
  ::close(fd);
  if (st.st_size == 0 && empty == Empty::refuse) throw Error(fmt::format("{}: is empty", name));
  return static_cast<std::uint64_t>(st.st_size);
}

std::vector<std::byte> read_file_bytes(const fs::path& path, Empty empty) {
  const std::uint64_t size = check_input_file(path, empty);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open for reading", path.string()));
  std::vector<std::byte> out(size);
  if (size && !in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size)))
    throw Error(fmt::format("{}: read failed", path.string()));
  return out;
}

std::string read_file_text(const fs::path& path, Empty empty) {
  auto b = read_file_bytes(path, empty);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::uint64_t checksum64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string checksum_hex(std::span<const std::byte> bytes) {
  return fmt::format("{:016x}", checksum64(bytes));
}

}  // namespace strata
