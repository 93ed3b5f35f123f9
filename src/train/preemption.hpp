#pragma once
// Preemption: schedulers ask a job to stop before they kill it. Slurm sends SIGTERM (or the
// signal of --signal, commonly SIGUSR1) some time before the time limit, and mpirun forwards
// SIGUSR1 and SIGUSR2 to every rank. While a PreemptionHandler lives, SIGTERM and SIGUSR1
// only set a flag; the trainer reads it once per step, all ranks agree on it with the
// step's loss all-reduce, finish the step, write a checkpoint and exit 0.
#include <csignal>

namespace strata::train {

class PreemptionHandler {
 public:
  PreemptionHandler();   // installs the handlers (SA_RESTART: I/O in progress carries on)
  ~PreemptionHandler();  // restores the previous ones
  PreemptionHandler(const PreemptionHandler&) = delete;
  PreemptionHandler& operator=(const PreemptionHandler&) = delete;

  // The signal received since installation (SIGTERM or SIGUSR1), or 0.
  static int requested();

 private:
  struct sigaction old_term_{}, old_usr1_{};
};

}  // namespace strata::train
