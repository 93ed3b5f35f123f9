#!/usr/bin/env bash
# The strategy comparison that ends the demo: the demo's model (scripts/demo.toml) trained under
# ddp, zero3, zeropp and topo on 8 ranks of a 2-node topology (2 nodes x 2 GPUs x 2 dies) with
# link emulation on, then one table (final loss, tokens/s, compute and exposed communication a
# step, bytes a rank sends a step over each tier, memory per rank by state) and a line on why
# each run is faster or slower than zero3.
# The nodes are joined by an emulated 100 Mbit/s (configs/topology/2node-slow-link.toml): to a
# rank computing on a share of a CPU core that is what 100 Gbit/s is to a GPU, the balance
# ZeRO++ and ZeRO-topo were written for: their fewer cross-node bytes then save more link time
# than quantizing costs. --fast-link runs the same over a 25 GB/s link
# (configs/topology/2node-2gpu-2die.toml), where there is hardly any link time to save and the
# quantizing strategies come out slower than zero3.
# Four micro-batches a step: topo crosses nodes once per optimizer step, the others on every
# micro-batch, which is what the comparison is about.
# Usage: scripts/compare_strategies.sh [--fast-link] [STEPS]   (after scripts/demo.sh has built strata)
set -euo pipefail
cd "$(dirname "$0")/.."
topology=configs/topology/2node-slow-link.toml
if [[ ${1:-} == --fast-link ]]; then
  topology=configs/topology/2node-2gpu-2die.toml
  shift
fi
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
  echo "== $strategy on 8 ranks of $topology (link emulation on)"
  OMP_NUM_THREADS=1 "${mpi[@]}" -np 8 $strata train --config scripts/demo.toml --strategy $strategy \
    --topology $topology --emulate-links --batch 1 --grad-accum 4 --steps "$steps" --warmup 2 \
    --val-data "" --log-every 4 --out "$out" --overwrite | grep -E "^(done|strategy)"
  runs+=("$out")
done
echo
$strata compare "${runs[@]}"
