#pragma once
// UTF-8 validation and repair, shared by text preparation (which skips files that are not
// text) and tokenizers (whose decoded bytes may cut a character in two).
#include <cstddef>
#include <string>
#include <string_view>

namespace strata::data {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is malformed
// (overlong forms, surrogates, code points past U+10FFFF and sequences cut short included).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// No NUL byte and valid UTF-8: what `strata data prepare` takes for text.
bool looks_like_text(std::string_view bytes);

// `bytes` with each maximal ill-formed subpart replaced by U+FFFD, as the WHATWG decoder and
// Python's bytes.decode(errors="replace") do: "\xE2\x82!" gives "\uFFFD!", "\x80\x80" gives two.
std::string to_valid_utf8(std::string_view bytes);

}  // namespace strata::data
