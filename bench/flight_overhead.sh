#!/usr/bin/env bash
# What the flight recorder costs: tokens/s of an 8-rank zero3 `strata train` with the recorder
# off (--flight-ops 0) and on (the default ring; no dump: a run that ends well dumps nothing),
# alternated in one run so both see the same machine. Prints every run, each round's on/off
# ratio, and their median per model. `tiny` is the worst case (the most ops per second of
# compute), `small` a step of real work.
# Usage: flight_overhead.sh STRATA_BIN SOURCE_DIR [ROUNDS] [-- MPIEXEC FLAGS...]
# Environment: MODELS ("tiny small"), STEPS (tiny's steps; small runs a tenth of them, at least 6).
set -euo pipefail
rounds=${3:-6}
source "$(dirname "$0")/common.sh"
parse_bench_args "$1" "$2" "${@:4}"
scratch_with_docs_data
for ((r = 1; r <= rounds; ++r)); do
  for model in ${MODELS:-tiny small}; do
    steps=${STEPS:-200}
    [[ $model == tiny ]] || steps=$((steps / 10 > 6 ? steps / 10 : 6))
    for ops in 0 4096; do
      "${mpi[@]}" -np 8 "$strata" train --strategy zero3 --topology "$src/configs/topology/2node-2gpu-2die.toml" \
        --model "$model" --train-data "$work/data/train.bin" --batch 2 --seq 32 --steps "$steps" --threads 1 \
        --flight-ops "$ops" --out "$work/run" > /dev/null
      tps=$(mean_tokens_per_s "$work/run/metrics.jsonl")
      echo "$model $r $ops $tps" | tee -a "$work/results"
      rm -rf "$work/run"
    done
  done
done
/usr/bin/python3 - "$work/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    model, r, ops, tps = line.split()
    runs.setdefault(model, {}).setdefault(r, {})[ops] = float(tps)
for model, by_round in runs.items():
    ratios = [v["4096"] / v["0"] for v in by_round.values()]
    print(f"{model}: recorder on/off tokens/s per round {' '.join(f'{x:.3f}' for x in ratios)}; "
          f"median {statistics.median(ratios):.3f} ({len(ratios)} rounds)")
PY
