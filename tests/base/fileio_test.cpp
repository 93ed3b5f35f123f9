#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.hpp"
#include "base/fileio.hpp"

namespace fs = std::filesystem;
using namespace strata;

TEST(FileIo, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  fs::path dir = fs::temp_directory_path() / "strata_fileio_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path p = dir / "a.txt";
  atomic_write_file(p, std::string_view("first"));
  atomic_write_file(p, std::string_view("second version"));
  EXPECT_EQ(read_file_text(p), "second version");
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
  fs::remove_all(dir);
}

TEST(FileIo, FailedWriteKeepsTheOldFile) {
  fs::path dir = fs::temp_directory_path() / "strata_fileio_test2";
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_THROW(atomic_write_file(dir / "missing_dir" / "x", std::string_view("y")), Error);
  fs::remove_all(dir);
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
