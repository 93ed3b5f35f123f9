#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace strata;

TEST(FileIo, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  test::ScratchDir dir;
  fs::path p = dir / "a.txt";
  atomic_write_file(p, std::string_view("first"));
  atomic_write_file(p, std::string_view("second version"));
  EXPECT_EQ(read_file_text(p), "second version");
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
}

TEST(FileIo, FailedWriteKeepsTheOldFile) {
  test::ScratchDir dir;
  EXPECT_THROW(atomic_write_file(dir / "missing_dir" / "x", std::string_view("y")), Error);
}

TEST(FileIo, ReadMissingFileNamesThePath) {
  try {
    read_file_bytes("/nonexistent/strata/file.bin");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/strata/file.bin"), std::string::npos);
  }
}

TEST(FileIo, ChecksumDetectsOneFlippedBit) {
  std::string a(1000, 'x');
  std::string b = a;
  b[500] ^= 1;
  auto ca = checksum64(std::as_bytes(std::span(a.data(), a.size())));
  auto cb = checksum64(std::as_bytes(std::span(b.data(), b.size())));
  EXPECT_NE(ca, cb);
  EXPECT_EQ(checksum_hex(std::as_bytes(std::span(a.data(), a.size()))).size(), 16u);
}
