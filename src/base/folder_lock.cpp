#include "base/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"

namespace strata {

namespace fs = std::filesystem;

std::string this_process_and_host() {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) std::strcpy(host.data(), "?");
  return fmt::format("pid {} on host {}", ::getpid(), host.data());
}

FolderLock::FolderLock(const fs::path& folder) : folder_(folder), file_(folder / kFileName) {
  std::error_code ec;
  created_folder_ = fs::create_directories(folder_, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the folder: {}", folder_.string(), ec.message()));
  // The file a holder removes on release may be opened by us just before: after locking,
  // make sure the path still names the file we locked, else lock the new one.
  for (;;) {
    fd_ = ::open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(fmt::format("{}: cannot open the lock file: {}", file_.string(), std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder;
      if (err == EWOULDBLOCK) {
        try {
          holder = read_file_text(file_, Empty::allow);
        } catch (const Error&) {
        }
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      }
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK)
        throw Error(fmt::format("{}: cannot lock: {}", file_.string(), std::strerror(err)));
      throw Error(fmt::format("{}: in use by another run ({}; lock file {}); wait for it to end or choose another "
                              "--out",
                              folder_.string(), holder.empty() ? "its pid and host not yet written" : holder,
                              file_.string()));
    }
    struct stat locked {}, named {};
    if (::fstat(fd_, &locked) == 0 && ::stat(file_.c_str(), &named) == 0 && locked.st_dev == named.st_dev &&
        locked.st_ino == named.st_ino)
      break;
    ::close(fd_);
  }
  // A stale file of a dead holder still names it: replace its text.
  const std::string text = this_process_and_host() + "\n";
  try {
    if (::ftruncate(fd_, 0) != 0)
      throw Error(fmt::format("{}: cannot write the lock file: {}", file_.string(), std::strerror(errno)));
    write_all(fd_, text.data(), text.size(), file_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

FolderLock::~FolderLock() {
  std::error_code ec;
  fs::remove(file_, ec);
  ::close(fd_);
  if (created_folder_) fs::remove(folder_, ec);  // fails, as it should, unless the folder is empty
}

}  // namespace strata
