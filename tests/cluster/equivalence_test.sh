#!/usr/bin/env bash
# Equivalence across hosts (docs/cluster.md): zero3, hsdp, zeropp and topo on 2 hosts x 4 ranks
# of a namespace cluster (TCP between the hosts, shared memory inside) train to the same losses,
# bit for bit, as the same strategies on 8 ranks of one host with link emulation: the topology
# file puts ranks 0-3 and 4-7 on its two nodes, as the hostfile does. zeropp and topo quantize
# (int8 weights, int4 gradients) and are bit-exact too: quantization is deterministic.
# Then a run stopped at step 3 on the cluster (its checkpoint written by the ranks of both
# hosts into one folder) resumes there to step 6 with the losses of the uninterrupted run, and
# from the same checkpoint on one host too.
# Usage: equivalence_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctequ
shift 2
one_host=("$@")
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
make_cluster 2 4 1gbit
prepare_data
common=(--topology "$src/configs/topology/2node-2gpu-2die.toml" --model tiny --train-data "$work/data/train.bin"
        --batch 2 --seq 32 --steps 6 --threads 1 --log-every 1000)

for preset in zero3 hsdp zeropp topo; do
  on_cluster 8 "$strata" train --strategy $preset "${common[@]}" --out "$work/cluster_$preset" \
    > "$work/cluster_$preset.log" 2>&1 || fail "$preset on the cluster: $(cat "$work/cluster_$preset.log")"
  OMP_NUM_THREADS=1 "${one_host[@]}" -np 8 "$strata" train --strategy $preset "${common[@]}" --emulate-links \
    --out "$work/one_$preset" > "$work/one_$preset.log" 2>&1 || fail "$preset on one host: $(cat "$work/one_$preset.log")"
  cluster_losses=$(losses "$work/cluster_$preset/metrics.jsonl")
  [ "$(wc -l <<<"$cluster_losses")" = 6 ] || fail "$preset: $(wc -l <<<"$cluster_losses") losses, want 6"
  [ "$cluster_losses" = "$(losses "$work/one_$preset/metrics.jsonl")" ] ||
    fail "$preset: losses differ: across hosts $(paste -sd' ' <<<"$cluster_losses"), one host $(losses "$work/one_$preset/metrics.jsonl" | paste -sd' ')"
  echo "$preset: 6 losses bit for bit across hosts and on one host (final $(tail -1 <<<"$cluster_losses"))"
done

# ---- resume from a checkpoint written across hosts ---------------------------------------
on_cluster 8 "$strata" train --strategy zero3 "${common[@]}" --stop-after 3 --out "$work/resumed" > /dev/null 2>&1 ||
  fail "the run stopped at step 3 failed"
cp -r "$work/resumed" "$work/resumed_one"
on_cluster 8 "$strata" train --strategy zero3 "${common[@]}" --resume latest --out "$work/resumed" \
  > "$work/resume.log" 2>&1 || fail "resume on the cluster: $(cat "$work/resume.log")"
grep -q "resumed from .*step_00000003 at step 3" "$work/resume.log" || fail "resume: $(cat "$work/resume.log")"
[ "$(losses "$work/resumed/metrics.jsonl")" = "$(losses "$work/cluster_zero3/metrics.jsonl")" ] ||
  fail "the run resumed on the cluster differs from the uninterrupted one"
OMP_NUM_THREADS=1 "${one_host[@]}" -np 8 "$strata" train --strategy zero3 "${common[@]}" --emulate-links \
  --resume latest --out "$work/resumed_one" > "$work/resume_one.log" 2>&1 || fail "resume on one host: $(cat "$work/resume_one.log")"
[ "$(losses "$work/resumed_one/metrics.jsonl")" = "$(losses "$work/cluster_zero3/metrics.jsonl")" ] ||
  fail "the run resumed on one host differs from the uninterrupted one"
echo "zero3 stopped at step 3 across hosts, resumed to step 6 across hosts and on one host: the uninterrupted losses"
echo "equivalence across hosts: all checks passed"
