#include "base/dtype.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I8: return "int8";
    case DType::I4: return "int4";
    case DType::F64: return "fp64";
  }
  return "?";
}

DType parse_dtype(std::string_view name, std::string_view field) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "f32") return DType::F32;
  if (n == "f16") return DType::F16;
  if (n == "i8") return DType::I8;
  if (n == "i4") return DType::I4;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I8, DType::I4})
    if (dtype_name(t) == n) return t;
  throw Error(fmt::format("{} = '{}': unknown element type (expected fp32, bf16, fp16, int8 or int4)", field, name));
}

std::size_t data_bytes(DType t, std::size_t count) {
  switch (t) {
    case DType::F32: return count * 4;
    case DType::BF16:
    case DType::F16: return count * 2;
    case DType::I8: return count;
    case DType::I4: return (count + 1) / 2;
    case DType::F64: return count * 8;
  }
  return 0;
}

std::size_t scale_count(DType t, std::size_t count, std::size_t block) {
  if (!is_quantized(t) || block == 0) return 0;
  return (count + block - 1) / block;
}

void check_block(DType t, std::size_t block, std::string_view what) {
  if (!is_quantized(t)) return;
  if (block == 0) throw Error(fmt::format("{}: {} buffer has block size 0 (one scale per block needs a block)", what, dtype_name(t)));
  if (t == DType::I4 && block % 2 != 0)
    throw Error(fmt::format("{}: int4 block size {} is odd; it must be even so every block starts on a byte", what, block));
}

}  // namespace strata
