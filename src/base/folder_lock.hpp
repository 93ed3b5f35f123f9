#pragma once
// One process at a time in a folder: an exclusive flock(2) on FOLDER/.strata.lock, which
// records the holder's pid and host. Two runs writing into one output folder would mix their
// checkpoints, metrics and summary; the lock refuses the second before it touches anything.
// The kernel drops a flock when its holder exits or dies, so a lock file left behind by a
// killed process never blocks anyone.
#include <filesystem>
#include <string>

namespace strata {

class FolderLock {
 public:
  static constexpr const char* kFileName = ".strata.lock";

  // Creates the folder if needed and takes the lock without waiting. Throws Error naming the
  // folder and the holder's pid and host if another process (or another FolderLock of this
  // one) holds it.
  explicit FolderLock(const std::filesystem::path& folder);
  // Removes the lock file while still holding the lock, then releases it; a folder this lock
  // created and that holds nothing else goes too (a run refused at start leaves no trace).
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path folder_, file_;
  int fd_ = -1;
  bool created_folder_ = false;
};

// "pid 4242 on host node07", as the lock file records its holder.
std::string this_process_and_host();

}  // namespace strata
