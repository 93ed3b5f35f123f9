#include "base/toml.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata {

toml::table parse_toml(std::string_view text, std::string_view origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}:{}:{}: {}", origin, e.source().begin.line, e.source().begin.column, e.description()));
  }
}

}  // namespace strata
