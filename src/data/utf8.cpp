#include "data/utf8.hpp"

#include <algorithm>

namespace strata::data {

namespace {

// Bytes a sequence led by `lead` takes, with the range its second byte must fall in;
// 0 for a byte that cannot start one.
struct Lead {
  std::size_t length;
  int second_lo, second_hi;
};

Lead lead_of(unsigned char lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead >= 0xE0 && lead <= 0xEF) return {3, lead == 0xE0 ? 0xA0 : 0x80, lead == 0xED ? 0x9F : 0xBF};
  if (lead >= 0xF0 && lead <= 0xF4) return {4, lead == 0xF0 ? 0x90 : 0x80, lead == 0xF4 ? 0x8F : 0xBF};
  return {0, 0, 0};
}

// How many bytes from s[i] on agree with a well-formed sequence (its longest valid prefix).
std::size_t valid_prefix(std::string_view s, std::size_t i) {
  const Lead lead = lead_of(static_cast<unsigned char>(s[i]));
  if (lead.length <= 1) return lead.length;
  std::size_t n = 1;
  for (; n < lead.length && i + n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    const int lo = n == 1 ? lead.second_lo : 0x80, hi = n == 1 ? lead.second_hi : 0xBF;
    if (b < lo || b > hi) break;
  }
  return n;
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const std::size_t length = lead_of(static_cast<unsigned char>(s[i])).length;
  return length != 0 && valid_prefix(s, i) == length ? length : 0;
}

bool looks_like_text(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    if (bytes[i] == '\0') return false;
    const std::size_t len = utf8_sequence_length(bytes, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t len = utf8_sequence_length(bytes, i);
    if (len != 0) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += std::max<std::size_t>(1, valid_prefix(bytes, i));
    }
  }
  return out;
}

}  // namespace strata::data
