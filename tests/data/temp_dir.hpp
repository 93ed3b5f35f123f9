#pragma once
// A fresh directory per test, removed afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace strata::testing {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("strata_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs f, expects strata::Error, and checks that its message holds every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string_view> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected strata::Error";
  } catch (const strata::Error& e) {
    const std::string what = e.what();
    for (auto frag : fragments) EXPECT_NE(what.find(frag), std::string::npos) << "'" << frag << "' not in: " << what;
  }
}

}  // namespace strata::testing
