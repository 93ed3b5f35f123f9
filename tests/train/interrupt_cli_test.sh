#!/usr/bin/env bash
# Interruptions and output folders, through the strata binary (README "strata train",
# docs/faults.md "Preemption"):
#   1. Ctrl-C (SIGINT) to a single-process run: it finishes the step, checkpoints, exits 130;
#      the folder's refusal points at `--resume latest`, and resuming reproduces the losses of
#      a run never interrupted, bit for bit;
#   2. a second Ctrl-C aborts at once (no summary, no checkpoint); the refusal then points at
#      --overwrite, and the lock file the aborted run left does not block;
#   3. a run without --out says once that it saves nothing;
#   4. one run per output folder: a second run, with or without --overwrite, is refused
#      naming the first one's pid and host; the first one's files stay whole and consistent;
#   5. SIGINT to mpirun: the ranks checkpoint, and resuming is bit-exact.
# Usage: interrupt_cli_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
set -m  # background jobs get their own process group and the default SIGINT, as at a terminal
strata=$1 src=$2
shift 2
mpi=("$@")
work=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
cd "$work"

"$strata" data prepare --input "$src/docs" --out data --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
common=(--model tiny --train-data data/train.bin --seq 32 --lr 1e-3 --batch 8)
losses() { $py -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for f in sys.argv[1:] for l in open(f)]' "$@"; }
field() { $py -c 'import json,sys; v=json.load(open(sys.argv[1])); [v:=v[k] for k in sys.argv[2:]]; print(v)' "$@"; }
wait_for_steps() {  # FILE N PID: until FILE has N lines, while PID lives
  for _ in $(seq 600); do
    [[ -f $1 && $(wc -l < "$1") -ge $2 ]] && return 0
    kill -0 "$3" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ---- 1. SIGINT: checkpoint, exit 130, resume bit-exact ---------------------------------------
"$strata" train "${common[@]}" --steps 100000 --out int1 > int1.log 2>&1 &
pid=$!
wait_for_steps int1/metrics.jsonl 3 $pid || fail "single-process run did not start: $(cat int1.log)"
kill -INT $pid
status=0; wait $pid || status=$?
[[ $status == 130 ]] || fail "SIGINT: exit status $status, want 130: $(cat int1.log)"
k=$(field int1/summary.json steps)
ckpt=int1/ckpt/$(printf 'step_%08d' "$k")
[[ "$(field int1/summary.json preempted)" == True && -f $ckpt/manifest.json ]] || fail "SIGINT: no checkpoint of step $k"
grep -q "strata: interrupt: stopping after this step (with a checkpoint if --out is set); Ctrl-C again aborts at once" \
  int1.log || fail "SIGINT: the handler did not say what happens: $(cat int1.log)"
grep -q "interrupted: stopped after step $k on request (SIGINT); checkpoint $ckpt; continue with --resume latest" \
  int1.log || fail "SIGINT: $(cat int1.log)"
if out=$("$strata" train "${common[@]}" --steps 100000 --out int1 2>&1); then fail "reused a folder with results"; fi
grep -q "int1: holds the results of an earlier run; continue it with --resume latest (its newest intact checkpoint: $ckpt, step $k), or replace them with --overwrite" \
  <<<"$out" || fail "hint after an interrupt: $out"
"$strata" train "${common[@]}" --steps 100000 --stop-after $((k + 3)) --resume latest --out int1 > /dev/null
"$strata" train "${common[@]}" --steps 100000 --stop-after $((k + 3)) --out straight > /dev/null
[[ "$(losses int1/metrics.jsonl)" == "$(losses straight/metrics.jsonl)" ]] ||
  fail "SIGINT: the resumed losses differ from the uninterrupted run's"
[[ ! -e int1/.strata.lock ]] || fail "a run that ended left its lock file"

# ---- 2. a second SIGINT aborts at once -------------------------------------------------------
# The first Ctrl-C comes at the start of step 2 (STRATA_FAULT), the second as soon as the
# run says it heard it: well inside the step (a few hundred ms at this batch).
STRATA_FAULT="int@2" "$strata" train "${common[@]}" --batch 128 --seq 64 --steps 100000 --out int2 > int2.log 2>&1 &
pid=$!
for _ in $(seq 1000); do grep -q "Ctrl-C again" int2.log && break; sleep 0.02; done
kill -INT $pid
status=0; wait $pid || status=$?
[[ $status == 130 && ! -e int2/summary.json && ! -e int2/ckpt ]] ||
  fail "second SIGINT: status $status, want an abort without summary or checkpoint: $(ls int2); $(cat int2.log)"
[[ -f int2/.strata.lock ]] || fail "the aborted run should have left its (stale) lock file"
if out=$("$strata" train "${common[@]}" --steps 4 --out int2 2>&1); then fail "reused a folder with results"; fi
grep -q "int2: holds the results of an earlier run; it has no intact checkpoint to continue from: replace them with --overwrite, or choose another --out" \
  <<<"$out" || fail "hint without a checkpoint: $out"
"$strata" train "${common[@]}" --steps 4 --out int2 --overwrite > /dev/null || fail "a stale lock file blocked a run"
[[ "$(field int2/summary.json steps)" == 4 ]] || fail "the run after a stale lock did not finish"
if out=$("$strata" train "${common[@]}" --steps 4 --out int2 2>&1); then fail "reused a folder with results"; fi
grep -q "int2: holds the results of an earlier run, finished at step 4 (int2/ckpt/step_00000004): train on with --resume latest --steps N (N > 4), or replace them with --overwrite" \
  <<<"$out" || fail "hint after a finished run: $out"

# ---- 3. no --out: said once ------------------------------------------------------------------
out=$("$strata" train "${common[@]}" --steps 2 2>&1)
[[ $(grep -c "strata: no --out: this run saves nothing (no checkpoint, metrics.jsonl or summary.json)" <<<"$out") == 1 ]] ||
  fail "no --out: $out"

# ---- 4. one run per output folder ------------------------------------------------------------
"$strata" train "${common[@]}" --steps 100000 --save-every 50 --out busy > busy.log 2>&1 &
pid=$!
wait_for_steps busy/metrics.jsonl 60 $pid || fail "first run did not start: $(cat busy.log)"
for extra in "" "--overwrite" "--resume latest"; do
  if out=$("$strata" train "${common[@]}" --seed 9 --steps 100 $extra --out busy 2>&1); then
    fail "a second run ($extra) into a folder in use exited 0"
  fi
  grep -q "strata: error: busy: in use by another run (pid $pid on host $(hostname); lock file busy/.strata.lock); wait for it to end or choose another --out" \
    <<<"$out" || fail "second run ($extra): $out"
done
kill -TERM $pid
status=0; wait $pid || status=$?
[[ $status == 0 ]] || fail "the first run, stopped by SIGTERM: status $status: $(cat busy.log)"
last=$(field busy/summary.json steps)
$py - busy "$last" <<'PY' || fail "the first run's files are not one run's"
import json, os, sys
out, last = sys.argv[1], int(sys.argv[2])
steps = [json.loads(l)["step"] for l in open(out + "/metrics.jsonl")]
assert steps == list(range(1, last + 1)), (steps[:3], steps[-3:], last)
summary = json.load(open(out + "/summary.json"))
assert summary["config"]["train"]["seed"] != 9 and summary["preempted"], summary["config"]["train"]
ckpts = sorted(os.listdir(out + "/ckpt"))
want = sorted({f"step_{s:08d}" for s in range(50, last + 1, 50)} | {f"step_{last:08d}"})
assert ckpts == want, (ckpts, want)
PY
"$strata" ckpt inspect busy --verify | grep -q "^verified" || fail "the first run's last checkpoint does not verify"

# ---- 5. SIGINT to mpirun ---------------------------------------------------------------------
# Open MPI 4.1's mpirun answers SIGINT with SIGCONT to the ranks, a pause of
# odls_base_sigkill_timeout seconds (1 by default), SIGTERM, the same pause, then SIGKILL, and
# forwards no output while it pauses: given a pause long enough for a step and a save (and
# little output), the ranks checkpoint (docs/faults.md).
mpirun_int=("${mpi[@]}" --mca odls_base_sigkill_timeout 4 -np 2 "$strata" train --strategy zero3 --log-every 100000)
"${mpirun_int[@]}" "${common[@]}" --batch 4 --steps 100000 --out mint > mint.log 2>&1 &
pid=$!
wait_for_steps mint/metrics.jsonl 3 $pid || fail "2-rank run did not start: $(cat mint.log)"
kill -INT $pid
status=0; wait $pid || status=$?
k=$(field mint/summary.json steps)
[[ "$(field mint/summary.json preempted)" == True && -f mint/ckpt/$(printf 'step_%08d' "$k")/manifest.json ]] ||
  fail "SIGINT to mpirun (status $status): no checkpoint: $(cat mint.log)"
grep -q "preempted: stopped after step $k on request (SIGTERM)" mint.log || fail "SIGINT to mpirun: $(cat mint.log)"
"${mpirun_int[@]}" "${common[@]}" --batch 4 --steps 100000 --stop-after $((k + 3)) --resume latest --out mint > /dev/null
"${mpirun_int[@]}" "${common[@]}" --batch 4 --steps 100000 --stop-after $((k + 3)) --out mstraight > /dev/null
[[ "$(losses mint/metrics.jsonl)" == "$(losses mstraight/metrics.jsonl)" ]] ||
  fail "SIGINT to mpirun: the resumed losses differ from the uninterrupted run's"
echo "interrupt CLI: all checks passed"
