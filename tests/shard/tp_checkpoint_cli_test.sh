#!/usr/bin/env bash
# Checkpoints under tensor parallelism, through the strata binary under mpirun: a --tp 2 zero3
# run on 8 ranks stops at step 2 with a checkpoint in whole-model coordinates; it resumes at
# TP 1 and at TP 4 on 4 ranks, loading the saved state (the state digest) and training on to
# the uninterrupted TP 2 run's losses within fp32 reduction-order tolerance; its safetensors
# export equals that of its single-process conversion, byte for byte; `ckpt inspect` and
# `ckpt convert` read it.
# Usage: tp_checkpoint_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$1 src=$2
shift 2
mpi=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
cd "$work"

field() { $py -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' "$@"; }

"$strata" data prepare --input "$src/docs" --out data --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
# One node of 4 GPUs: room for --tp 4 on 4 ranks (and 4 heads: the tiny model with --n-head 4).
printf '[[tiers]]\nname = "gpu"\nsize = 4\nbandwidth_GBps = 200\nlatency_us = 2\n[[tiers]]\nname = "cluster"\nbandwidth_GBps = 25\nlatency_us = 5\n' > 4gpu.toml
common=(--strategy zero3 --model tiny --n-head 4 --train-data data/train.bin --seq 32 --lr 1e-3 --steps 4)
tiers=(--topology "$src/configs/topology/2node-2gpu-2die.toml")

# The global batch stays 8 sequences: 4 replicas of 2 at TP 2 on 8 ranks and at TP 1 on 4
# ranks, 1 replica of 8 at TP 4 on 4 ranks.
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --tp 2 --batch 2 --out full > /dev/null
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" --tp 2 --batch 2 --stop-after 2 --out half > /dev/null
ckpt=half/ckpt/step_00000002
[[ "$(field $ckpt/manifest.json engine tensor_parallel)" == 2 ]] || fail "the manifest does not record --tp 2"
"$strata" ckpt inspect $ckpt --verify > inspect.txt || fail "the TP 2 checkpoint does not verify: $(cat inspect.txt)"
grep -q "^verified" inspect.txt || fail "inspect --verify: $(cat inspect.txt)"
grep -q "written by zero3 with tensor parallelism 2 on 8 ranks" inspect.txt || fail "inspect: $(cat inspect.txt)"

"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --batch 2 --resume $ckpt --out tp1 > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" --topology 4gpu.toml --tp 4 --batch 8 --resume $ckpt --out tp4 > /dev/null
for run in tp1 tp4; do
  # The trainer refuses a load whose state digest differs from the checkpoint's.
  [[ "$(field $run/summary.json resumed_state_digest)" == "$(field $ckpt/manifest.json state_digest)" ]] ||
    fail "$run: resumed from another state"
done
$py - full/metrics.jsonl tp1/metrics.jsonl tp4/metrics.jsonl <<'PY' || fail "the resumed losses"
import json, sys
full = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
for name in sys.argv[2:]:
    got = {j["step"]: j["loss"] for j in map(json.loads, open(name))}
    assert sorted(got) == [3, 4], (name, sorted(got))
    diff = max(abs(got[s] - full[s]) for s in got)
    assert all(abs(got[s] - full[s]) <= 1e-5 * abs(full[s]) for s in got), (name, got, full)
    print(f"{name.split('/')[0]} resumed from the TP 2 checkpoint: largest loss difference from the uninterrupted TP 2 run {diff:.3g}")
PY

# Export writes whole tensors: the TP 2 checkpoint's equals its single-process conversion's.
"$strata" ckpt convert $ckpt single > /dev/null
"$strata" export $ckpt --safetensors tp2.safetensors > /dev/null
"$strata" export single --safetensors single.safetensors > /dev/null
cmp -s tp2.safetensors single.safetensors || fail "the TP 2 export differs from the single-process one"
[[ "$(field single/manifest.json state_digest)" == "$(field $ckpt/manifest.json state_digest)" ]] ||
  fail "convert changed the state digest"
echo "TP checkpoints: all checks passed"
