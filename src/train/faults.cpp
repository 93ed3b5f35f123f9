#include "train/faults.hpp"

#include <signal.h>

#include <cstdlib>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/text.hpp"

namespace strata::train {

namespace {

std::int64_t parse_int(std::string_view text, std::string_view entry, const char* what) {
  std::int64_t v = 0;
  if (!parse_whole(text, v) || v < 0)
    throw Error(fmt::format("STRATA_FAULT: '{}': {} '{}' is not a non-negative integer", entry, what, text));
  return v;
}

FaultAction parse_action(std::string_view name, std::string_view entry) {
  const std::pair<std::string_view, FaultAction> actions[] = {
      {"kill", FaultAction::Kill}, {"term", FaultAction::Term},        {"int", FaultAction::Int},
      {"stop", FaultAction::Stop}, {"nan_grad", FaultAction::NanGrad}, {"kill_in_save", FaultAction::KillInSave}};
  for (const auto& [known, action] : actions)
    if (name == known) return action;
  throw Error(fmt::format("STRATA_FAULT: '{}': unknown action '{}' (kill, term, int, stop, nan_grad, kill_in_save)",
                          entry, name));
}

}  // namespace

FaultPlan FaultPlan::parse(std::string_view text) {
  FaultPlan plan;
  while (!text.empty()) {
    const auto semi = text.find(';');
    const std::string_view entry = text.substr(0, semi);
    text = semi == std::string_view::npos ? std::string_view{} : text.substr(semi + 1);
    if (entry.empty()) continue;
    const auto at = entry.find('@');
    if (at == std::string_view::npos)
      throw Error(fmt::format("STRATA_FAULT: '{}': expected ACTION@STEP[-LAST][/RANK]", entry));
    Fault f{parse_action(entry.substr(0, at), entry)};
    std::string_view when = entry.substr(at + 1);
    if (const auto slash = when.find('/'); slash != std::string_view::npos) {
      f.rank = static_cast<int>(parse_int(when.substr(slash + 1), entry, "rank"));
      when = when.substr(0, slash);
    }
    if (const auto dash = when.find('-'); dash != std::string_view::npos) {
      f.first_step = parse_int(when.substr(0, dash), entry, "step");
      f.last_step = parse_int(when.substr(dash + 1), entry, "step");
    } else {
      f.first_step = f.last_step = parse_int(when, entry, "step");
    }
    if (f.last_step < f.first_step)
      throw Error(fmt::format("STRATA_FAULT: '{}': the step range ends before it begins", entry));
    plan.faults_.push_back(f);
  }
  return plan;
}

const FaultPlan& FaultPlan::from_environment() {
  static const FaultPlan plan = [] {
    const char* v = std::getenv("STRATA_FAULT");
    return v ? parse(v) : FaultPlan{};
  }();
  return plan;
}

bool FaultPlan::fires(FaultAction action, std::int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == action && step >= f.first_step && step <= f.last_step && (f.rank < 0 || f.rank == rank))
      return true;
  return false;
}

float FaultPlan::gradient_scale(std::int64_t step, int rank, float scale) const {
  return fires(FaultAction::NanGrad, step, rank) ? std::numeric_limits<float>::quiet_NaN() : scale;
}

void FaultPlan::before_step(std::int64_t step, int rank) const {
  if (fires(FaultAction::Kill, step, rank)) ::raise(SIGKILL);
  if (fires(FaultAction::Stop, step, rank)) ::raise(SIGSTOP);
  if (fires(FaultAction::Term, step, rank)) ::raise(SIGTERM);
  if (fires(FaultAction::Int, step, rank)) ::raise(SIGINT);
}

}  // namespace strata::train
