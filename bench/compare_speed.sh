#!/usr/bin/env bash
# Tokens/s of two strata binaries, alternated in one run so both see the same machine:
# `strata bench step` on `small`, and an 8-rank `strata train` on `small` for zero3 and topo
# on the test topology. Prints each measurement and the ratio new/base of the medians.
# Usage: compare_speed.sh BASE_STRATA NEW_STRATA SOURCE_DIR [ROUNDS] [-- MPIEXEC FLAGS...]
# Environment: STRATEGIES (the trained ones, "zero3 topo"), TRAIN_FLAGS (added to every
# `strata train`, e.g. "--emulate-links --emulate-scale 2000" to weigh the links).
set -euo pipefail
base=$1 new=$2 rounds=${4:-4}
source "$(dirname "$0")/common.sh"
parse_bench_args "$new" "$3" "${@:5}"
scratch_with_docs_data
train=(--topology "$src/configs/topology/2node-2gpu-2die.toml" --model small --train-data "$work/data/train.bin"
       --batch 2 --seq 64 --steps 6 ${TRAIN_FLAGS:-})
for ((r = 1; r <= rounds; ++r)); do
  for which in base new; do
    bin=$base; [[ $which == new ]] && bin=$new
    tps=$("$bin" bench step --model small --steps 5 --warmup 2 | sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p')
    echo "bench-step $which $tps" | tee -a "$work/results"
    for strategy in ${STRATEGIES:-zero3 topo}; do
      "${mpi[@]}" -np 8 "$bin" train --strategy $strategy "${train[@]}" --out "$work/run" > /dev/null
      tps=$(mean_tokens_per_s "$work/run/metrics.jsonl")
      echo "train-$strategy $which $tps" | tee -a "$work/results"
      rm -rf "$work/run"
    done
  done
done
/usr/bin/python3 - "$work/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    what, which, tps = line.split()
    runs.setdefault(what, {}).setdefault(which, []).append(float(tps))
for what, by in runs.items():
    b, n = statistics.median(by["base"]), statistics.median(by["new"])
    print(f"{what}: base {b:.1f} new {n:.1f} tokens/s (medians of {len(by['new'])}), new/base {n / b:.3f}")
PY
