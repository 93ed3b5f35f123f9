#!/usr/bin/env bash
# Faults at host level (docs/cluster.md): zero3 on 2 hosts x 4 ranks (`--topology host`,
# --collective-timeout 10, a checkpoint every 50 steps), and at step 52 (a training step: a
# fault during a checkpoint's world-wide agreement is reported naming all ranks, since MPI does
# not say which is late), host 1 is lost:
#   1. its daemon (orted) is SIGKILLed: mpirun names the host, strata's start-up line names the
#      host's ranks;
#   2. its data cable is pulled (`cluster.sh link HOST down`);
#   3. its data link drops 95% of what it receives.
# Each time the job exits non-zero (124, the collective timeout's status, for 2 and 3) within
# the timeout + 30 s, the output names host 1 and its ranks (2, 3: strata's timeout lines
# "waiting for rank R (..., host HOST)"), no strata process is left in any namespace, and
# `--resume latest` continues from the last complete checkpoint with the losses of a run that
# never failed. 4: a cable pulled for 3 s, under the timeout, does not end the job.
# Prints the time from each fault to the job's exit.
# Usage: faults_test.sh STRATA_BIN SOURCE_DIR
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctflt
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
make_cluster 2 4 1gbit
prepare_data
lost=$cname-h1
timeout_s=10
common=(--strategy zero3 --topology host --model tiny --train-data "$work/data/train.bin" --batch 2 --seq 32
        --steps 100000 --threads 1 --save-every 50 --log-every 100000 --collective-timeout "$timeout_s")

# start_run NAME [train flags...]: starts the job in the background; returns once it saved step 50
# and made step 52.
start_run() {
  run=$work/$1
  shift
  on_cluster 8 "$strata" train "${common[@]}" --out "$run" "$@" > "$run.log" 2>&1 &
  mpirun_pid=$!
  wait_steps 52 "$run/ckpt/step_00000050/manifest.json"
}
# wait_exit T0: waits for mpirun (at most the timeout + 30 s after T0), sets $status and $took.
wait_exit() {
  while kill -0 "$mpirun_pid" 2> /dev/null; do
    over "$(since "$1")" $((timeout_s + 30)) && fail "$(basename "$run"): still running $((timeout_s + 30)) s after the fault"
    sleep 0.1
  done
  took=$(since "$1")
  status=0
  wait "$mpirun_pid" || status=$?
  mpirun_pid=
}
no_rank_left() {
  local left=
  for _ in $(seq 50); do  # a rank that gave up exits within moments of mpirun
    left=$(strata_left)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "$(basename "$run"): strata processes left: $left"
}
last_checkpoint() {  # complete ones only: an interrupted save leaves step_N.tmp
  local last=
  for d in "$run"/ckpt/step_*; do [[ $d =~ /step_0*([0-9]+)$ ]] && last=${BASH_REMATCH[1]}; done
  echo "$last"
}
resumed=()  # "run step": checked against one reference run at the end
resume() {
  local from
  from=$(last_checkpoint)
  on_cluster 8 "$strata" train "${common[@]}" --out "$run" --resume latest --stop-after $((from + 4)) \
    > "$run.resume.log" 2>&1 || fail "$(basename "$run"): resume failed: $(cat "$run.resume.log")"
  grep -q "resumed from .*step_0*$from at step $from" "$run.resume.log" ||
    fail "$(basename "$run"): not resumed from step $from: $(cat "$run.resume.log")"
  resumed+=("$run $((from + 4))")
}
times=()

# ---- 1. the daemon of host 1 dies --------------------------------------------------------
start_run kill
grep -q "^hosts: $cname-h0 (ranks 0-3), $lost (ranks 4-7)$" "$run.log" || fail "kill: no line placing the ranks: $(cat "$run.log")"
orted=$(for pid in $(ip netns pids "$lost"); do [ "$(cat "/proc/$pid/comm")" != orted ] || echo "$pid"; done)
[ -n "$orted" ] || fail "kill: no orted in $lost"
t0=$(now)
kill -KILL $orted  # one daemon a host
wait_exit "$t0"
[ "$status" != 0 ] || fail "kill: the job exited 0"
grep -q "on node $lost" "$run.log" || fail "kill: the output does not name $lost: $(cat "$run.log")"
no_rank_left
times+=("daemon of $lost SIGKILLed: exit $status after $took s")
resume

# ---- 2. the cable of host 1 is pulled ----------------------------------------------------
named_lost() {  # strata's timeout lines name a rank of the lost host
  grep -Eq "^strata: rank [0-3]: collective timeout after .* waiting for .*rank [4-7] \([a-z ]+, tier [a-z]+, host $lost\)" "$run.log" ||
    fail "$(basename "$run"): no timeout line of a rank of host 0 names a rank of $lost: $(grep '^strata:' "$run.log")"
}
start_run link
t0=$(now)
"${cluster[@]}" link --name "$cname" "$lost" down
wait_exit "$t0"
"${cluster[@]}" link --name "$cname" "$lost" up
[ "$status" = 124 ] || fail "link down: exit status $status, want 124: $(cat "$run.log")"
named_lost
no_rank_left
times+=("cable of $lost pulled: exit $status after $took s")
resume

# ---- 3. host 1's link loses 95% ----------------------------------------------------------
start_run loss
t0=$(now)
"${cluster[@]}" shape --name "$cname" --host "$lost" --loss 95 > /dev/null
wait_exit "$t0"
"${cluster[@]}" shape --name "$cname" --host "$lost" --loss 0 > /dev/null
[ "$status" = 124 ] || fail "loss: exit status $status, want 124: $(cat "$run.log")"
named_lost
no_rank_left
times+=("95% loss on $lost: exit $status after $took s")
resume

# ---- 4. a cable pulled for less than the timeout -----------------------------------------
start_run flap --stop-after 120
"${cluster[@]}" link --name "$cname" "$lost" down
at_fault=$(wc -l < "$run/metrics.jsonl")
sleep 3
"${cluster[@]}" link --name "$cname" "$lost" up
kill -0 "$mpirun_pid" 2> /dev/null || fail "flap: the job ended while the cable was out: $(cat "$run.log")"
((at_fault < 120)) || fail "flap: the job reached step 120 before the cable was pulled; the check proves nothing"
t0=$(now)
wait_exit "$t0"
[ "$status" = 0 ] || fail "a 3 s flap ended the job with status $status: $(cat "$run.log")"
[ -e "$run/ckpt/step_00000120/manifest.json" ] || fail "flap: the job did not reach step 120"
resumed+=("$run 120")
times+=("cable of $lost pulled for 3 s at step $at_fault: the job went on to step 120, exit 0")

# ---- the resumed runs' losses are those of a run that never failed -----------------------
longest=0
for r in "${resumed[@]}"; do ((${r#* } > longest)) && longest=${r#* }; done
run=$work/reference
on_cluster 8 "$strata" train "${common[@]}" --out "$run" --stop-after "$longest" > "$run.log" 2>&1 ||
  fail "reference run: $(cat "$run.log")"
for r in "${resumed[@]}"; do
  dir=${r% *} steps=${r#* }
  [ "$(losses "$dir/metrics.jsonl")" = "$(losses "$run/metrics.jsonl" | sed -n "1,${steps}p")" ] ||
    fail "$(basename "$dir"): the losses to step $steps differ from the run that never failed"
done
printf '%s\n' "${times[@]}"
echo "losses bit for bit with a run that never failed, to step: ${resumed[*]##*/}"
echo "host faults: all checks passed"
