#pragma once
// Reading flag and field text: comma lists and whole numbers, one way everywhere.
#include <algorithm>
#include <charconv>
#include <string_view>
#include <system_error>
#include <vector>

namespace strata {

// The items of a comma list, empty ones included: "a,,b" is a, "", b; "" is one empty item.
inline std::vector<std::string_view> split_list(std::string_view text) {
  std::vector<std::string_view> items;
  for (std::size_t pos = 0; pos <= text.size();) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    items.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return items;
}

// `text` read whole as a T by std::from_chars (no spaces, no '+'); false where it is not one
// or lies outside T's range.
template <class T>
bool parse_whole(std::string_view text, T& out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace strata
