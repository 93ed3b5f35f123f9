#pragma once
// How strata reads its command line beyond what CLI11 does: counts written as a user types
// them, and refusals in strata's own words ("strata: error: ...", status 2) that name the
// nearest known command or flag.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace strata::cli {

// A whole number as typed for a count: "1000", "1_000", "1e3", "2.5e3", "-5". Returns its
// plain decimal digits ("1000"), or nullopt for anything else, "1.5e0" included (a count
// has no fraction) and numbers of more than 18 digits, with the reason in `problem`.
std::optional<std::string> normalize_count(const std::string& text, std::string* problem = nullptr);

// Lets every integer option of `app` and its subcommands, at any depth, take the forms of
// normalize_count, and refuses the rest naming the accepted ones.
void accept_count_forms(CLI::App& app);

// A refusal of the command names in argv before CLI11 parses it: an unknown command of a
// group ("unknown command 'trian' (did you mean 'train'?)", even with --help after it), or a
// group without a command ("strata ckpt"). nullopt when the names are fine.
std::optional<std::string> command_name_error(CLI::App& app, int argc, const char* const* argv);

// The message for a CLI11 parse error that is not a request for help or the version: an
// unknown option names the nearest known flags of its command.
std::string parse_error_message(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv);

}  // namespace strata::cli
