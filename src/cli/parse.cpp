#include "cli/parse.hpp"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/suggest.hpp"

namespace strata::cli {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Digits with single underscores between them ("1_000"), underscores dropped; nullopt else.
std::optional<std::string> grouped_digits(std::string_view s) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t bar = s.find('_', start);
    const std::string_view group = s.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    if (!all_digits(group)) return std::nullopt;
    out += group;
    if (bar == std::string_view::npos) return out;
    start = bar + 1;
  }
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (; app; app = app->get_parent()) path = app->get_parent() ? " " + app->get_name() + path : "strata" + path;
  return path;
}

std::vector<std::string> command_names(const CLI::App& group) {
  std::vector<std::string> names;
  for (const CLI::App* sub : group.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

// The command the user ran: the deepest subcommand that was parsed.
const CLI::App* selected_command(const CLI::App& app) {
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  return cmd;
}

std::vector<std::string> flag_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : cmd.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string help_hint(const CLI::App* cmd) { return fmt::format("\n  see '{} --help'", command_path(cmd)); }

}  // namespace

std::optional<std::string> normalize_count(const std::string& text, std::string* problem) {
  auto refuse = [&](const char* why) -> std::optional<std::string> {
    if (problem) *problem = why;
    return std::nullopt;
  };
  constexpr const char* kNotANumber = "not a whole number (write 1000, 1_000 or 1e3)";
  std::string_view s = text;
  std::string sign;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    if (s[0] == '-') sign = "-";
    s.remove_prefix(1);
  }
  // mantissa [. fraction] [e exponent]; a fraction only with an exponent ("2.5e3").
  const std::size_t e = s.find_first_of("eE");
  const std::string_view mantissa = s.substr(0, e);
  long exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view exp = s.substr(e + 1);
    bool negative = false;
    if (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) {
      negative = exp[0] == '-';
      exp.remove_prefix(1);
    }
    if (!all_digits(exp) || exp.size() > 2) return refuse(kNotANumber);
    exponent = std::stol(std::string(exp)) * (negative ? -1 : 1);
  }
  const std::size_t dot = mantissa.find('.');
  if (dot != std::string_view::npos && e == std::string_view::npos) return refuse(kNotANumber);
  const auto whole = grouped_digits(mantissa.substr(0, dot));
  const auto fraction = dot == std::string_view::npos ? std::optional<std::string>("") : grouped_digits(mantissa.substr(dot + 1));
  if (!whole || !fraction) return refuse(kNotANumber);
  // The digits with the decimal point moved `exponent` places right: a count when nothing but
  // zeros is left behind the point.
  std::string digits = *whole + *fraction;
  long point = static_cast<long>(whole->size()) + exponent;
  if (point < 0) {  // "1e-3": zeros in front, so that the point falls inside the digits
    digits.insert(0, static_cast<std::size_t>(-point), '0');
    point = 0;
  }
  const std::size_t p = static_cast<std::size_t>(point);
  if (p < digits.size()) {
    if (digits.find_first_not_of('0', p) != std::string::npos) return refuse("not a whole number: a count has no fraction");
    digits.resize(p);
  } else {
    digits.append(p - digits.size(), '0');
  }
  const std::size_t first = digits.find_first_not_of('0');
  digits = first == std::string::npos ? "0" : digits.substr(first);
  if (digits.size() > 18) return refuse("too large (at most 18 digits)");
  return digits == "0" ? digits : sign + digits;
}

void accept_count_forms(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type != "INT" && type != "UINT") continue;
    opt->transform(CLI::Validator(
        [](std::string& value) -> std::string {
          std::string problem;
          const auto count = normalize_count(value, &problem);
          if (!count) return fmt::format("'{}': {}", value, problem);
          value = *count;
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) accept_count_forms(*sub);
}

std::optional<std::string> command_name_error(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* group = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string_view token = argv[i];
    const std::vector<std::string> names = command_names(*group);
    if (names.empty()) return std::nullopt;  // a command: CLI11 reads its arguments
    if (token.starts_with("-")) {
      if (token == "-h" || token == "--help" || token == "--help-all" || (group == &app && token == "--version"))
        return std::nullopt;
      break;
    }
    CLI::App* sub = nullptr;
    for (CLI::App* s : group->get_subcommands([](CLI::App*) { return true; }))
      if (s->get_name() == token) sub = s;
    if (!sub) {
      const std::string near = did_you_mean(token, names);
      return fmt::format("unknown command '{}'{}{}", token, group == &app ? "" : " of '" + command_path(group) + "'",
                         near.empty() ? fmt::format(" (commands: {})", fmt::join(names, ", ")) : near);
    }
    group = sub;
  }
  const std::vector<std::string> names = command_names(*group);
  if (names.empty()) return std::nullopt;
  return fmt::format("'{}' needs a command: {}{}", command_path(group), fmt::join(names, ", "), help_hint(group));
}

std::string parse_error_message(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv) {
  const CLI::App* cmd = selected_command(app);
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::vector<std::string> extras = app.remaining(true);
    const std::set<std::string> extra_set(extras.begin(), extras.end());
    // The first unknown option as typed; its value, if any, is an extra only because of it.
    for (int i = 1; i < argc; ++i) {
      const std::string token = argv[i];
      const std::string name = token.substr(0, token.find('='));
      if (token.starts_with("-") && token.size() > 1 && (extra_set.count(token) || extra_set.count(name)))
        return fmt::format("unknown option {} for '{}'{}{}", name, command_path(cmd),
                           did_you_mean(name, flag_names(*cmd), ""), help_hint(cmd));
    }
    if (!extras.empty())
      return fmt::format("unexpected argument '{}' for '{}'{}", extras.front(), command_path(cmd), help_hint(cmd));
  }
  // CLI11's wording of a value it could not read, in strata's.
  const std::string what = e.what();
  std::smatch m;
  if (dynamic_cast<const CLI::ConversionError*>(&e) &&
      std::regex_match(what, m, std::regex(R"(Could not convert: (\S+) = (.*))"))) {
    const CLI::Option* opt = cmd->get_option_no_throw(m[1].str());
    const bool count = opt && (opt->get_type_name() == "INT" || opt->get_type_name() == "UINT");
    return fmt::format("{}: '{}' {}{}", m[1].str(), m[2].str(), count ? "is out of range" : "is not a number",
                       help_hint(cmd));
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) &&
      std::regex_match(what, m, std::regex(R"((\S+): \d+ required (\S+) missing)")))
    return fmt::format("{}: needs a value ({}){}", m[1].str(), m[2].str(), help_hint(cmd));
  return fmt::format("{}{}", what, help_hint(cmd));
}

}  // namespace strata::cli
