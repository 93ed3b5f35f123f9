#!/usr/bin/env bash
# How many threads a rank gets under mpirun (README "strata train"): without OMP_NUM_THREADS,
# the machine's cores shared among its local ranks; with it, what it says, as outside mpirun
# (hosts in network namespaces share one machine's cores, which no rank can see).
# Usage: threads_mpi_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$1 src=$2
shift 2
mpi=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$work"
"$strata" data prepare --input "$src/docs" --out data --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
threads() {  # the run's threads a rank, from its summary
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["threads"])' "$1/summary.json"
}
run() {  # OUT [env...]: 2 ranks, one step
  local out=$1
  shift
  env "$@" "${mpi[@]}" -np 2 "$strata" train --model tiny --batch 2 --seq 32 --steps 1 --train-data data/train.bin \
    --out "$out" > "$out.log" 2>&1 || fail "train ($*): $(tail -3 "$out.log")"
}
cores=$(nproc)
run shared -u OMP_NUM_THREADS
want=$((cores / 2 > 0 ? cores / 2 : 1))
[ "$(threads shared)" = "$want" ] || fail "no OMP_NUM_THREADS, $cores cores, 2 local ranks: $(threads shared) threads a rank, want $want"
# A count the cores / ranks rule would not give on this machine.
set_to=$((want + 3))
run asked OMP_NUM_THREADS=$set_to
[ "$(threads asked)" = "$set_to" ] || fail "OMP_NUM_THREADS=$set_to: $(threads asked) threads a rank"
echo "threads a rank: $want by default ($cores cores, 2 local ranks), $set_to when OMP_NUM_THREADS says so"
