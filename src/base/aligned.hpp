#pragma once
// 64-byte aligned, zero-initialised heap arrays: one cache line, one AVX-512 vector.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace strata {

inline constexpr std::size_t kAlignBytes = 64;

// `bytes` (> 0) of zeroed memory, kAlignBytes-aligned, for std::free; throws std::bad_alloc.
inline void* aligned_zeroed(std::size_t bytes) {
  bytes = (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
  void* p = std::aligned_alloc(kAlignBytes, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { resize(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  // Discards the old contents; the new array is zeroed.
  void resize(std::size_t n) {
    std::free(data_);
    data_ = nullptr;
    size_ = n;
    if (n > 0) data_ = static_cast<T*>(aligned_zeroed(n * sizeof(T)));
  }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace strata
