#!/usr/bin/env bash
# Fault tolerance end to end, through the strata binary under mpirun:
#   1. a run killed while it writes a checkpoint: the previous checkpoint loads and the resumed
#      run reproduces the uninterrupted losses bit for bit;
#   2. damaged checkpoints are refused naming the shard file and rank; --resume latest falls
#      back past them and says so;
#   3. reshard: topo on 8 ranks -> zero3 on 4 -> ddp on 2 -> the single-process trainer, the
#      same state at every hop (state digests) and the losses of a run that never moved;
#      `strata ckpt convert` / `inspect`;
#   4. preemption: SIGTERM (single process), SIGUSR1 to mpirun, SIGTERM to one rank: a
#      checkpoint, exit 0, and resuming continues from that step;
#   5. numerics guard: a non-finite step is skipped on all ranks and counted; too many in a
#      row stop the run naming the setting and the last checkpoint; fp16 gradient wires with
#      dynamic loss scaling;
#   6. a refusal every rank reaches alike (a bad flag, topology or file) is printed once.
# Usage: faults_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$1 src=$2
shift 2
mpi=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
cd "$work"

"$strata" data prepare --input "$src/docs" --out data --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
topo="$src/configs/topology/2node-2gpu-2die.toml"
common=(--model tiny --train-data data/train.bin --seq 32 --lr 1e-3)
fp32=(--weight-wire fp32 --grad-wire fp32 --step-grad-wire fp32)

losses() { $py -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for f in sys.argv[1:] for l in open(f)]' "$@"; }
field() { $py -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' "$@"; }
digest_of() { field "$1/manifest.json" state_digest; }

# ---- 1. killed while writing a checkpoint ------------------------------------------------
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 15 --save-every 5 \
  --out ref > /dev/null
if STRATA_FAULT="kill_in_save@10/1" "${mpi[@]}" -x STRATA_FAULT -np 4 "$strata" train --strategy zero3 \
     "${common[@]}" --batch 2 --steps 15 --save-every 5 --out crash > crash.log 2>&1; then
  fail "a run killed during its checkpoint write exited 0"
fi
[[ -d crash/ckpt/step_00000010.tmp && ! -e crash/ckpt/step_00000010.tmp/manifest.json ]] ||
  fail "the interrupted save should have left an unfinished step_00000010.tmp"
[[ ! -e crash/ckpt/step_00000010 ]] || fail "a half-written checkpoint took the final name"
"$strata" ckpt inspect crash --verify | grep -q "^verified" || fail "the previous checkpoint does not verify"
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 15 --save-every 5 \
  --resume latest --out crash > resume.log 2>&1
grep -q "resumed from crash/ckpt/step_00000005 at step 5" resume.log || fail "did not resume from step 5: $(cat resume.log)"
[[ "$(losses crash/metrics.jsonl)" == "$(losses ref/metrics.jsonl)" ]] ||
  fail "the resumed losses differ from the uninterrupted run's"
[[ ! -e crash/ckpt/step_00000010.tmp ]] || fail "the next save of step 10 should replace the unfinished folder"

# ---- 2. damaged checkpoints --------------------------------------------------------------
cp -r crash damaged
# Flipped, not overwritten: the byte there depends on the corpus (docs/), and may already be any value.
$py -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(777); b = f.read(1)[0]; f.seek(777); f.write(bytes([b ^ 0xff]))' \
  damaged/ckpt/step_00000015/rank00002.bin
if out=$("$strata" ckpt inspect damaged/ckpt/step_00000015 --verify 2>&1); then fail "an altered shard verified"; fi
grep -q "damaged/ckpt/step_00000015/rank00002.bin: checksum mismatch in the shard of rank 2" <<<"$out" ||
  fail "altered shard: $out"
if out=$("${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 20 \
           --resume damaged/ckpt/step_00000015 --out damaged 2>&1); then fail "resumed from an altered shard"; fi
grep -q "rank00002.bin: checksum mismatch in the shard of rank 2" <<<"$out" || fail "explicit resume: $out"
grep -q "the newest intact checkpoint beside it: damaged/ckpt/step_00000010" <<<"$out" ||
  fail "explicit resume does not name the intact checkpoint: $out"
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 20 --resume latest \
  --out damaged > fallback.log 2>&1
grep -q "passes over a damaged checkpoint: .*rank00002.bin: checksum mismatch" fallback.log ||
  fail "fallback did not say what it passed over: $(cat fallback.log)"
grep -q "falls back to damaged/ckpt/step_00000010, the newest intact checkpoint" fallback.log ||
  fail "fallback: $(cat fallback.log)"
cp -r crash cut
truncate -s 1000 cut/ckpt/step_00000015/rank00001.bin
if out=$("$strata" ckpt inspect cut 2>&1); then fail "a truncated shard was accepted"; fi
grep -q "rank00001.bin: truncated shard file (rank 1)" <<<"$out" || fail "truncated: $out"
rm cut/ckpt/step_00000015/rank00001.bin
if out=$("$strata" ckpt inspect cut 2>&1); then fail "a missing shard was accepted"; fi
grep -q "rank00001.bin: missing shard file (rank 1)" <<<"$out" || fail "missing: $out"

# ---- 3. reshard across strategies and world sizes ------------------------------------------
"${mpi[@]}" -np 8 "$strata" train --strategy topo "${fp32[@]}" --topology "$topo" "${common[@]}" --batch 1 \
  --steps 12 --out never_moved > /dev/null
"${mpi[@]}" -np 8 "$strata" train --strategy topo "${fp32[@]}" --topology "$topo" "${common[@]}" --batch 1 \
  --steps 12 --stop-after 6 --out hop8 > /dev/null
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 --topology "$topo" "${common[@]}" --batch 2 --steps 12 \
  --stop-after 8 --resume hop8 --out hop4 > /dev/null
"${mpi[@]}" -np 2 "$strata" train --strategy ddp "${common[@]}" --batch 4 --steps 12 --stop-after 10 \
  --resume hop4 --out hop2 > /dev/null
"$strata" train "${common[@]}" --batch 8 --steps 12 --resume hop2 --out hop1 > /dev/null
for pair in "hop8/ckpt/step_00000006 hop4" "hop4/ckpt/step_00000008 hop2" "hop2/ckpt/step_00000010 hop1"; do
  set -- $pair
  [[ "$(field "$2/summary.json" resumed_state_digest)" == "$(digest_of "$1")" ]] ||
    fail "$2 did not load the state of $1"
done
$py - <(losses never_moved/metrics.jsonl) <(losses hop8/metrics.jsonl hop4/metrics.jsonl hop2/metrics.jsonl \
  hop1/metrics.jsonl) <<'PY' || fail "moved run's losses differ from the run that never moved"
import sys
a = [float(l) for l in open(sys.argv[1])]
b = [float(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
assert a[:6] == b[:6], "identical until the first move"
for i in range(6, 12):
    assert abs(a[i] - b[i]) <= 1e-6 * abs(a[i]), (i + 1, a[i], b[i])
PY
# Ranks holding replicas write nothing: hsdp's second node leaves its slices to the first.
"${mpi[@]}" -np 8 "$strata" train --strategy hsdp --topology "$topo" "${common[@]}" --batch 1 --steps 12 \
  --stop-after 4 --out hsdp8 > /dev/null
[[ $(ls hsdp8/ckpt/step_00000004/rank*.bin | wc -l) == 4 ]] || fail "hsdp: replica ranks wrote shard files"
"${mpi[@]}" -np 4 "$strata" train --strategy zero2 "${common[@]}" --batch 2 --steps 12 --stop-after 6 \
  --resume hsdp8 --out zero2_4 > /dev/null
[[ "$(field zero2_4/summary.json resumed_state_digest)" == "$(digest_of hsdp8/ckpt/step_00000004)" ]] ||
  fail "zero2 did not load hsdp's state"
if out=$("${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 1 --steps 12 --resume hop8 \
           --out wrong 2>&1); then fail "resumed with another global batch"; fi
grep -q "train.global_batch = 8 in the checkpoint (batch x data-parallel replicas), 4 in this run (batch 1 x 4 replicas); a resumed run must keep it: give --batch 2" <<<"$out" ||
  fail "global batch: $out"
# Offline conversion: the same state in the files a 4-rank zero3 job writes, and in one file.
"$strata" ckpt convert hop8 conv4 --strategy zero3 --world-size 4 --topology "$topo" > /dev/null
"$strata" ckpt convert hop8 conv1 > /dev/null
for c in conv4 conv1; do
  "$strata" ckpt inspect $c --verify | grep -q "^verified" || fail "$c does not verify"
  [[ "$(digest_of $c)" == "$(digest_of hop8/ckpt/step_00000006)" ]] || fail "$c holds another state"
done
[[ $(ls conv4/rank*.bin | wc -l) == 4 && $(ls conv1/rank*.bin | wc -l) == 1 ]] || fail "converted file counts"
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 --topology "$topo" "${common[@]}" --batch 2 --steps 12 \
  --stop-after 8 --resume conv4 --out from_conv4 > /dev/null
[[ "$(losses from_conv4/metrics.jsonl)" == "$(losses hop4/metrics.jsonl)" ]] ||
  fail "resuming from the converted checkpoint gives other losses"
if out=$("$strata" ckpt convert hop8 conv4 2>&1); then fail "convert overwrote a folder"; fi
grep -q "conv4: exists" <<<"$out" || fail "convert onto an existing folder: $out"

# ---- 4. preemption -----------------------------------------------------------------------
wait_for_steps() {  # FILE N PID: until FILE has N lines, while PID lives
  for _ in $(seq 600); do
    [[ -f $1 && $(wc -l < "$1") -ge $2 ]] && return 0
    kill -0 "$3" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}
"$strata" train "${common[@]}" --batch 8 --steps 100000 --out term1 > term1.log 2>&1 &
pid=$!
wait_for_steps term1/metrics.jsonl 3 $pid || fail "single-process run did not start"
kill -TERM $pid
status=0; wait $pid || status=$?
[[ $status == 0 ]] || fail "SIGTERM: exit status $status: $(cat term1.log)"
stopped=$(field term1/summary.json steps)
[[ "$(field term1/summary.json preempted)" == True && -f term1/ckpt/$(printf 'step_%08d' "$stopped")/manifest.json ]] ||
  fail "SIGTERM: no checkpoint of step $stopped"
grep -q "preempted: stopped after step $stopped" term1.log || fail "SIGTERM: $(cat term1.log)"
"$strata" train "${common[@]}" --batch 8 --steps $((stopped + 3)) --resume latest --out term1 > /dev/null
[[ "$(field term1/summary.json start_step)" == "$stopped" && "$(field term1/summary.json steps)" == $((stopped + 3)) ]] ||
  fail "SIGTERM: the resumed run did not continue from step $stopped"

"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 100000 --out usr1 > usr1.log 2>&1 &
pid=$!
wait_for_steps usr1/metrics.jsonl 3 $pid || fail "4-rank run did not start"
kill -USR1 $pid  # mpirun forwards SIGUSR1 to every rank
status=0; wait $pid || status=$?
[[ $status == 0 ]] || fail "SIGUSR1 to mpirun: exit status $status: $(cat usr1.log)"
[[ "$(field usr1/summary.json preempted)" == True ]] || fail "SIGUSR1: not marked preempted"

# One rank alone gets SIGTERM during step 4: all ranks stop after it, together.
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 8 --out straight8 > /dev/null
STRATA_FAULT="term@4/2" "${mpi[@]}" -x STRATA_FAULT -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 \
  --steps 8 --out term4 > /dev/null
[[ "$(field term4/summary.json steps)" == 4 && -f term4/ckpt/step_00000004/manifest.json ]] ||
  fail "SIGTERM to rank 2: no stop with a checkpoint at step 4"
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 8 --resume latest --out term4 > /dev/null
[[ "$(losses term4/metrics.jsonl)" == "$(losses straight8/metrics.jsonl)" ]] || fail "SIGTERM to rank 2: resumed losses differ"

# ---- 5. numerics guard -------------------------------------------------------------------
STRATA_FAULT="nan_grad@3/1" "${mpi[@]}" -x STRATA_FAULT -np 4 "$strata" train --strategy zero3 "${common[@]}" \
  --batch 2 --steps 6 --out nan1 > /dev/null
$py - nan1 <<'PY' || fail "a NaN gradient on rank 1 was not skipped on all ranks"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
assert [l.get("skipped", False) for l in lines] == [False, False, True, False, False, False], lines
assert json.load(open(sys.argv[1] + "/summary.json"))["skipped_steps"] == 1
PY
if out=$(STRATA_FAULT="nan_grad@3-20/1" "${mpi[@]}" -x STRATA_FAULT -np 4 "$strata" train --strategy zero3 \
           "${common[@]}" --batch 2 --steps 20 --save-every 2 --max-skipped-steps 4 --out nan_many 2>&1); then
  fail "20 NaN steps in a row did not stop the run"
fi
grep -q "steps 3-6: loss or gradient norm not finite 4 steps in a row (train.max_skipped_steps = 4).*the last checkpoint is nan_many/ckpt/step_00000004" <<<"$out" ||
  fail "max skipped: $out"
[[ $(grep -c "train.max_skipped_steps" <<<"$out") == 1 ]] || fail "the agreed error should be printed once: $out"
"$strata" ckpt inspect nan_many --verify | grep -q "^verified" || fail "the last checkpoint is not whole"
# A fatal error dumps every rank's flight recorder (docs/faults.md, "When a run hangs or slows").
$py - nan_many <<'PY' || fail "the fatal error left no flight recorder dump of every rank"
import json, sys
for r in range(4):
    d = json.load(open(f"{sys.argv[1]}/flight/rank_{r}.json"))
    assert d["reason"] == "error" and "training diverged" in d["message"], (d["reason"], d["message"])
    # The last op is step 6's (5 optimizer steps before it), the step whose verdict stopped the run.
    assert all(op["state"] == "done" for op in d["ops"]) and d["ops"][-1]["step"] == 5, d["ops"][-1]
PY

# fp16 gradient wires: dynamic loss scaling starts too high, overflows are skipped while the
# scale halves, then training goes on; started where it does not overflow it tracks fp32.
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 "${common[@]}" --batch 2 --steps 30 --out f32 > /dev/null
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 --grad-wire fp16 --step-grad-wire fp16 "${common[@]}" --batch 2 \
  --steps 30 --initial-loss-scale 1048576 --loss-scale-window 1000 --out f16_high > /dev/null
"${mpi[@]}" -np 4 "$strata" train --strategy zero3 --grad-wire fp16 --step-grad-wire fp16 "${common[@]}" --batch 2 \
  --steps 30 --initial-loss-scale 1024 --out f16 > /dev/null
$py - <<'PY' || fail "fp16 loss scaling"
import json
high = [json.loads(l) for l in open("f16_high/metrics.jsonl")]
skipped = [l["step"] for l in high if l.get("skipped")]
first = 0  # the leading run of overflows while the scale halves from 2^20
while first < len(skipped) and skipped[first] == first + 1:
    first += 1
assert first >= 1, skipped
assert high[first]["loss_scale"] == 1048576 / 2 ** first, high[first]
# Then training goes on: a later overflow (the data decide; the docs are the corpus) is rare
# and halves the scale again, which never grows back inside the 1000-step window.
assert len(skipped) - first <= 2, skipped
assert high[-1]["loss_scale"] == 1048576 / 2 ** len(skipped), high[-1]
assert high[-1]["loss"] < high[0]["loss"] - 0.5, (high[0]["loss"], high[-1]["loss"])
f16 = [json.loads(l)["loss"] for l in open("f16/metrics.jsonl")]
f32 = [json.loads(l)["loss"] for l in open("f32/metrics.jsonl")]
assert all(abs(a - b) <= 2e-3 * b for a, b in zip(f16, f32)), max(abs(a - b) / b for a, b in zip(f16, f32))
PY
# ---- 6. a refusal every rank reaches alike prints once ------------------------------------
once() {  # NP WANT ARGS...: the job fails and exactly one line is "strata: error: ...WANT..."
  local np=$1 want=$2 out
  shift 2
  if out=$("${mpi[@]}" -np "$np" "$strata" "$@" 2>&1); then fail "$*: exited 0"; fi
  [[ $(grep -c "^strata: error: .*$want" <<<"$out") == 1 ]] || fail "$*: want one line with '$want' in: $out"
}
once 4 "train.batch = 0: must be positive" train --strategy zero3 "${common[@]}" --batch 0
once 2 "world size 2 is not a multiple of 4 ranks per node" train --strategy zero3 --topology "$topo" \
  "${common[@]}" --batch 2
once 4 "'nope.toml' is neither a preset" topo --topology nope.toml
once 4 "--iterations 0 must be at least 1" bench collectives --iterations 0
echo "faults CLI: all checks passed"
