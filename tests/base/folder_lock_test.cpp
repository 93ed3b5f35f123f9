#include "base/folder_lock.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "support.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {
std::string refusal(const fs::path& folder) {
  try {
    FolderLock second(folder);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(FolderLock, ASecondHolderIsRefusedNamingTheFirstOnesPidAndHost) {
  test::ScratchDir dir;
  const fs::path out = dir / "out";
  {
    FolderLock first(out);
    EXPECT_EQ(read_file_text(first.file()), this_process_and_host() + "\n");
    // flock belongs to an open file: a second open, even in this process, conflicts.
    EXPECT_EQ(refusal(out), out.string() + ": in use by another run (" + this_process_and_host() + "; lock file " +
                                (out / ".strata.lock").string() + "); wait for it to end or choose another --out");
    EXPECT_EQ(this_process_and_host().rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u);
    atomic_write_file(out / "metrics.jsonl", std::string_view("{}\n"));
  }
  // Released: the lock file is gone, the folder with results stays, and the next run locks it.
  EXPECT_FALSE(fs::exists(out / ".strata.lock"));
  EXPECT_TRUE(fs::exists(out / "metrics.jsonl"));
  FolderLock again(out);
}

TEST(FolderLock, AStaleLockFileDoesNotBlock) {
  test::ScratchDir dir;
  const fs::path out = dir / "out";
  fs::create_directories(out);
  atomic_write_file(out / ".strata.lock", std::string_view("pid 1 on host elsewhere\n"));
  FolderLock lock(out);  // nobody holds the flock: taken, and the text names this process
  EXPECT_EQ(read_file_text(lock.file()), this_process_and_host() + "\n");
}

TEST(FolderLock, AFolderItCreatedAndLeftEmptyGoesWithIt) {
  test::ScratchDir dir;
  const fs::path out = dir / "new" / "out";
  { FolderLock lock(out); }
  EXPECT_FALSE(fs::exists(out));
  const fs::path file = dir / "file";
  atomic_write_file(file, std::string_view("x"));
  EXPECT_THROW(FolderLock{file}, Error);
}
