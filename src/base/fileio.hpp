#pragma once
// Crash-safe file writes and checksums. A file written here either exists whole, with the
// bytes asked for, or not at all: write to PATH.tmp.<pid>, fsync, rename, fsync the folder.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

void atomic_write_file(const std::filesystem::path& path, std::span<const std::byte> bytes);
// write(2) until all n bytes are out (retrying short writes and EINTR); errors name `path`.
void write_all(int fd, const void* data, std::size_t n, const std::filesystem::path& path);
void atomic_write_file(const std::filesystem::path& path, std::string_view text);
void fsync_directory(const std::filesystem::path& dir);

// Reads a whole file; throws Error naming the path if it is missing or unreadable.
std::vector<std::byte> read_file_bytes(const std::filesystem::path& path);
std::string read_file_text(const std::filesystem::path& path);

// XXH3-64 of a byte range, as 16 lowercase hex digits.
std::uint64_t checksum64(std::span<const std::byte> bytes);
std::string checksum_hex(std::span<const std::byte> bytes);

}  // namespace strata
