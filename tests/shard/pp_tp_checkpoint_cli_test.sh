#!/usr/bin/env bash
# A checkpoint written at PP 2 x TP 2 (tiny, zero3 stages, 2 replicas on 8 ranks,
# a global batch of 8 sequences, 2 micro-batches a step) through the strata binary under mpirun:
# it verifies in whole-model coordinates and resumes at PP 1 x TP 1 with zero3 on 4 ranks, in
# one process, and at PP 2 x TP 2 with one replica on 4 ranks, each loading the saved state
# (the state digest) and training on to the uninterrupted single-process losses (its own
# steps too); its
# safetensors export equals its single-process conversion's; `strata plan --strategy
# zero3+tp2+pp2 --compare-summary` prices every tier of the 8-rank run as it measured it; with
# --sequence-parallel too (2 of the 4 steps: the one-process losses, every tier priced as
# measured, the stages' tier carrying half the sends' bytes).
# Usage: pp_tp_checkpoint_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
source "$2/tests/shard/cli_lib.sh"
common=(--model tiny --train-data data/train.bin --seq 32 --lr 1e-3 --steps 4 --grad-accum 2)
# 8 ranks: TP over "gpu", the 2 stages over "node", 2 replicas over "cluster"; 4 ranks: one replica.
tiers=(--topology "$src/configs/topology/2node-2gpu-2die.toml")
pptp=(--strategy zero3 --tp 2 --tp-tier gpu --pp 2 --pp-tier node)

"$strata" train "${common[@]}" --batch 8 --out one > /dev/null
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" "${pptp[@]}" --batch 4 --stop-after 2 --out pptp \
  > /dev/null
ckpt=pptp/ckpt/step_00000002
"$strata" ckpt inspect $ckpt --verify > inspect.txt ||
  fail "the PP 2 x TP 2 checkpoint does not verify: $(cat inspect.txt)"
grep -q "written by zero3 with tensor parallelism 2 and 2 pipeline stages on 8 ranks" inspect.txt ||
  fail "inspect: $(cat inspect.txt)"

"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" --strategy zero3 --batch 2 --resume $ckpt --out flat \
  > /dev/null
"$strata" train "${common[@]}" --batch 8 --resume $ckpt --out single > /dev/null
"${mpi[@]}" -np 4 "$strata" train "${common[@]}" "${tiers[@]}" "${pptp[@]}" --batch 8 --resume $ckpt --out pptp4 \
  > /dev/null

# Its own steps at the uninterrupted losses too.
$py - <<'PY' || fail "the PP 2 x TP 2 run's losses"
import json
def losses(run): return {j["step"]: j["loss"] for j in map(json.loads, open(f"{run}/metrics.jsonl"))}
one, got = losses("one"), losses("pptp")
assert sorted(got) == [1, 2] and all(abs(got[s] - one[s]) <= 1e-5 * abs(one[s]) for s in got), (got, one)
print(f"pptp: largest loss difference from the one-process run {max(abs(got[s] - one[s]) for s in got):.3g}")
PY
resumed_from $ckpt flat single pptp4
resumed_losses_match one flat single pptp4
export_matches_conversion $ckpt

"$strata" plan --model tiny "${tiers[@]}" --seq 32 --accum 2 --precision fp32 --peak-tflops 1 --device-memory-gb 8 \
  --hbm-gbps 50 --strategy zero3+tp2+pp2 --tp-tier gpu --pp-tier node --nodes 2 --micro-batch 4 \
  --compare-summary pptp/summary.json > compared.txt || fail "the plan of the PP 2 x TP 2 run: $(cat compared.txt)"
[[ $(grep -c "^all equal" compared.txt) == 1 && $(grep -c "^  gpu .* equal$" compared.txt) == 6 &&
   $(grep -c "^  node .* equal$" compared.txt) == 6 && $(grep -c "^  cluster .* equal$" compared.txt) == 6 ]] ||
  fail "compare-summary: $(cat compared.txt)"

# Sequence parallelism in the stages: each TP rank sends its half of the rows.
"${mpi[@]}" -np 8 "$strata" train "${common[@]}" "${tiers[@]}" "${pptp[@]}" --batch 4 --stop-after 2 --sequence-parallel \
  --out sp > /dev/null
$py - <<'PY' || fail "the PP 2 x TP 2 --sequence-parallel run"
import json
def losses(run): return {j["step"]: j["loss"] for j in map(json.loads, open(f"{run}/metrics.jsonl"))}
one, got = losses("one"), losses("sp")
assert sorted(got) == [1, 2] and all(abs(got[s] - one[s]) <= 1e-5 * abs(one[s]) for s in got), (got, one)
node = lambda run: json.load(open(f"{run}/summary.json"))["comm"]["per_step"]["node"]["bytes_sent"]
# 2 sends a rank a step of 4 x 32 x 64 fp32 values, halved; the tied sum alike in both.
assert node("pptp") - node("sp") == 2 * 4 * 32 * 64 * 4 / 2, (node("pptp"), node("sp"))
print(f"sp: largest loss difference from the one-process run {max(abs(got[s] - one[s]) for s in got):.3g}")
PY
"$strata" plan --model tiny "${tiers[@]}" --seq 32 --accum 2 --precision fp32 --peak-tflops 1 --device-memory-gb 8 \
  --hbm-gbps 50 --strategy zero3+tp2+pp2 --tp-tier gpu --pp-tier node --nodes 2 --micro-batch 4 --sequence-parallel \
  --compare-summary sp/summary.json > compared_sp.txt || fail "the plan of the SP run: $(cat compared_sp.txt)"
[[ $(grep -c "^all equal" compared_sp.txt) == 1 && $(grep -c "^  gpu .* equal$" compared_sp.txt) == 6 &&
   $(grep -c "^  node .* equal$" compared_sp.txt) == 6 && $(grep -c "^  cluster .* equal$" compared_sp.txt) == 6 ]] ||
  fail "compare-summary --sequence-parallel: $(cat compared_sp.txt)"
echo "pp_tp_checkpoint_cli_test: ok"
