#pragma once
// Fault injection for the fault-tolerance tests: the environment variable STRATA_FAULT lists
// faults to raise at given steps and ranks, so a test can kill a run at an exact point of a
// checkpoint write, or poison one rank's gradients, instead of racing a timer.
//
//   STRATA_FAULT="ACTION@STEP[-LAST][/RANK][;...]"     (RANK defaults to every rank)
//
//   kill        SIGKILL this rank at the start of the step
//   term        send this rank SIGTERM at the start of the step (what a scheduler sends)
//   int         send this rank SIGINT at the start of the step (Ctrl-C)
//   stop        SIGSTOP this rank at the start of the step (a stalled rank)
//   nan_grad    the step's gradients on this rank become NaN (the loss stays finite)
//   kill_in_save  SIGKILL this rank while it saves the checkpoint of that step: after its
//               shard file is written, before the manifest exists
//
// Unset or empty: no faults, and no cost beyond one lookup per step.
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::train {

// What the trainer calls at each step of its loop (Trainer::set_step_hook): before the step,
// and for the scale the step's gradients are taken at. The default is the environment's
// FaultPlan; with no faults both are no-ops.
class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void before_step(std::int64_t step, int rank) const = 0;
  virtual float gradient_scale(std::int64_t step, int rank, float scale) const = 0;
};

enum class FaultAction { Kill, Term, Int, Stop, NanGrad, KillInSave };

struct Fault {
  FaultAction action;
  std::int64_t first_step = 0, last_step = 0;
  int rank = -1;  // -1: every rank
};

class FaultPlan : public StepHook {
 public:
  // Parses the STRATA_FAULT syntax; throws Error naming the variable and the bad entry.
  static FaultPlan parse(std::string_view text);
  static const FaultPlan& from_environment();  // STRATA_FAULT, parsed once

  bool fires(FaultAction action, std::int64_t step, int rank) const;
  bool empty() const { return faults_.empty(); }

  // Raises the signal of a kill, term or stop fault due at this step on this rank.
  void before_step(std::int64_t step, int rank) const override;
  // NaN on a nan_grad fault's steps and ranks: the step's gradients become NaN.
  float gradient_scale(std::int64_t step, int rank, float scale) const override;

 private:
  std::vector<Fault> faults_;
};

}  // namespace strata::train
