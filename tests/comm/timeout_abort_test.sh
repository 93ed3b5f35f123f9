#!/usr/bin/env bash
# A wait whose peer never comes aborts the job after the collective timeout, with the
# message naming the rank, the collective, the group, the peer (and tier), and mpirun
# exiting 124; for strata's own collectives, a main-thread MPI collective, and the blocking
# calls under a watchdog (a sharded run's start-up, MPI_Finalize).
# Usage: timeout_abort_test.sh TEST_BIN MPIEXEC [MPI FLAGS...]
set -uo pipefail
bin=$1
shift
fail() { echo "FAIL: $*" >&2; exit 1; }
check() {  # mode, expected message part
  local out status
  # timeout(1) only guards against a hang; its own status (124 as well) cannot pass the
  # message check below.
  out=$(timeout -k 5 60 "$@" -np 2 "$bin" "$mode" 2>&1)
  status=$?
  [ "$status" = 124 ] || fail "$mode: exit status $status, want 124: $out"
  grep -Fq "$want" <<<"$out" || fail "$mode: no line '$want' in: $out"
  waited=$(sed -nE 's/^strata: rank 0: collective timeout after ([0-9.]+) s .*/\1/p' <<<"$out")
  awk -v w="$waited" 'BEGIN { exit !(w >= 1.0) }' ||
    fail "$mode: waited '$waited' s, not at least the 1 s timeout"
  if grep -q "the wait returned" <<<"$out"; then fail "$mode: the wait returned: $out"; fi
  echo "$mode: $(grep '^strata: rank 0' <<<"$out")"
}
mode=p2p want="in all_reduce on group 'cluster#0', waiting for rank 1 (receive, tier cluster, host $(hostname)). A" check "$@"
mode=mpi want="in test:sum on group 'world', waiting for rank 1 (MPI_Iallreduce). A" check "$@"
mode=startup want="in start-up (topology, communicators) on group 'world', waiting for rank 1. A" check "$@"
mode=finalize want="in MPI_Finalize on group 'world', waiting for rank 1. A" check "$@"
echo "timeout abort: all checks passed"
