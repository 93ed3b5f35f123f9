#!/usr/bin/env bash
# The strategy comparison that ends the demo: the same model trained under ddp, zero3, zeropp
# and topo on 8 ranks of the 2-node test topology (2 nodes x 2 GPUs x 2 dies) with link
# emulation on, then one table: final loss, tokens/s, compute and exposed communication a
# step, bytes a rank sends a step over each tier, memory per rank by state.
# Four micro-batches a step: topo crosses nodes once per optimizer step, the others on
# every micro-batch, which is what the comparison is about.
# Usage: scripts/compare_strategies.sh [STEPS]   (after scripts/demo.sh has built strata)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
strata=build/strata
data=data/fortunes
[[ -x $strata ]] || { echo "build strata first: scripts/demo.sh" >&2; exit 1; }
[[ -f $data/train.bin ]] || $strata data prepare --input /usr/share/games/fortunes --out $data
mpi=(mpirun --oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)

runs=()
for strategy in ddp zero3 zeropp topo; do
  out=runs/compare/$strategy
  echo "== $strategy on 8 ranks (link emulation on)"
  OMP_NUM_THREADS=1 "${mpi[@]}" -np 8 $strata train --strategy $strategy \
    --topology configs/topology/2node-2gpu-2die.toml --emulate-links \
    --model small --batch 1 --seq 128 --grad-accum 4 --steps "$steps" --lr 1e-3 --warmup 2 \
    --train-data $data/train.bin --log-every 4 --out "$out" --overwrite | grep -E "^(done|strategy)"
  runs+=("$out")
done
echo
$strata compare "${runs[@]}"
