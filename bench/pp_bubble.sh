#!/usr/bin/env bash
# The 1F1B bubble measured against (P-1)/(m+P-1): `strata train --pp P` on P ranks (one
# replica, one thread a rank) for m micro-batches a step (--grad-accum), and the first
# stage's idle share of the step, exposed communication / (compute + exposed communication)
# from summary.json (the rank's mean over the steps without evaluation). The stage sends are
# a few hundred kB through shared memory, so nearly all of that idle time is the bubble.
# Usage: bench/pp_bubble.sh [BUILD_DIR] [P] [MODEL] [STEPS] [m...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stages=${2:-2}
model=${3:-mini}
steps=${4:-8}
shift $(($# > 4 ? 4 : $#))
ms=("$@")
((${#ms[@]})) || ms=(4 8 16)
strata=$(readlink -f "$build/strata")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[[tiers]]\nname = "host"\nbandwidth_GBps = 10\nlatency_us = 1\n' > "$work/one_tier.toml"
"$strata" data prepare --input docs --out "$work/data" --val-fraction 0.1 --chunk-bytes 4096 > /dev/null
printf '%-4s %-4s %10s %10s %10s %12s\n' P m "step ms" "idle ms" "idle" "(P-1)/(m+P-1)"
for m in "${ms[@]}"; do
  OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 --mca btl self,vader -np "$stages" "$strata" train \
    --model "$model" --train-data "$work/data/train.bin" --batch 4 --seq 64 --steps "$steps" --strategy ddp \
    --topology "$work/one_tier.toml" --pp "$stages" --grad-accum "$m" --out "$work/m$m" > /dev/null
  /usr/bin/python3 - "$work/m$m/summary.json" "$stages" "$m" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p, m = int(sys.argv[2]), int(sys.argv[3])
compute, idle = s["compute_s"], s["exposed_comm_s"]
print(f"{p:<4} {m:<4} {1e3 * (compute + idle):10.1f} {1e3 * idle:10.1f} {idle / (compute + idle):10.3f} "
      f"{(p - 1) / (m + p - 1):12.3f}")
PY
done
