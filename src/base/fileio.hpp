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

// Every file strata reads as input passes here first. Refuses, naming the path, what is not a
// regular file with bytes to read: missing, a folder, a special file (device, FIFO, socket: a
// FIFO would block the reader), unreadable, or empty unless `empty` allows it. Checks with
// stat(2) before opening, so nothing blocks. Returns the file's size in bytes.
enum class Empty { refuse, allow };
std::uint64_t check_input_file(const std::filesystem::path& path, Empty empty = Empty::refuse);

// Reads a whole file after check_input_file; throws Error naming the path.
std::vector<std::byte> read_file_bytes(const std::filesystem::path& path, Empty empty = Empty::refuse);
std::string read_file_text(const std::filesystem::path& path, Empty empty = Empty::refuse);

// XXH3-64 of a byte range, as 16 lowercase hex digits.
std::uint64_t checksum64(std::span<const std::byte> bytes);
std::string checksum_hex(std::span<const std::byte> bytes);

}  // namespace strata
