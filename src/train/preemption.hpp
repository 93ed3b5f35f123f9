#pragma once
// Preemption and interruption: schedulers ask a job to stop before they kill it, and a user
// presses Ctrl-C. Slurm sends SIGTERM (or the signal of --signal, commonly SIGUSR1) some time
// before the time limit; mpirun forwards SIGUSR1 and SIGUSR2 to every rank, and answers its
// own SIGINT or SIGTERM by sending the ranks SIGTERM. While a PreemptionHandler lives,
// SIGTERM, SIGUSR1 and SIGINT only set a flag; the trainer reads it once per step, all ranks
// agree on it with the step's loss all-reduce, finish the step, write a checkpoint and exit
// (0, or 130 = 128 + SIGINT after an interrupt, as shells expect of a program stopped by
// Ctrl-C). A second SIGINT is not caught: it ends the process at once.
#include <csignal>

namespace strata::train {

class PreemptionHandler {
 public:
  PreemptionHandler();   // installs the handlers (SA_RESTART: I/O in progress carries on)
  ~PreemptionHandler();  // restores the previous ones
  PreemptionHandler(const PreemptionHandler&) = delete;
  PreemptionHandler& operator=(const PreemptionHandler&) = delete;

  // The first signal received since installation (SIGTERM, SIGUSR1 or SIGINT), or 0: what
  // the run reports, and SIGINT makes its exit status 130.
  static int requested();

 private:
  struct sigaction old_term_{}, old_usr1_{}, old_int_{};
};

// "SIGINT", "SIGTERM", "SIGUSR1", or "a signal" for any other.
const char* signal_name(int sig);

// The exit status of a run that an interrupt stopped after its checkpoint.
inline constexpr int kInterruptedExitStatus = 128 + SIGINT;

}  // namespace strata::train
