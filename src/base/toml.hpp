#pragma once
// TOML documents (topologies, run configs, calibrations) parsed one way: a syntax error becomes
// an Error that names the origin (usually the file), line and column.
#include <string_view>

#include <toml++/toml.h>

namespace strata {

toml::table parse_toml(std::string_view text, std::string_view origin);

}  // namespace strata
