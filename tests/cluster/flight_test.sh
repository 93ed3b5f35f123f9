#!/usr/bin/env bash
# When a run hangs or slows, strata says where (docs/faults.md "When a run hangs or slows"):
# zero3 on 2 hosts x 4 ranks (`--topology host`), one cluster for four checks.
#   1. host 1's data link shaped to a tenth of host 0's (10 and 100 Mbit/s): `strata doctor` names host 1's link and
#      the cluster tier; SIGUSR2 to mpirun during that run makes every rank dump its flight
#      recorder (reason "signal") and the run goes on to exit 0.
#   2. rank 5's process capped at 3% of a CPU (a cgroup of the cpu controller):
#      `strata doctor` names rank 5 and host 1 a straggler.
#   3. rank 5 stopped with SIGSTOP: the job ends with status 124 within the collective timeout
#      + 15 s, and the desync report (stderr, OUT/flight/desync.txt, `strata doctor`) names rank
#      5, host 1 and the op the others timed out in.
# Usage: flight_test.sh STRATA_BIN SOURCE_DIR
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctfr
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
make_cluster 2 4 1gbit
prepare_data
slow=$cname-h1
common=(--strategy zero3 --topology host --model tiny --train-data "$work/data/train.bin" --batch 2 --seq 32
        --threads 1 --log-every 100000 --flight-dump always --flight-ops 1024)
cgroup=
cleanup_flight() {
  [ -z "$cgroup" ] || rmdir "$cgroup" 2> /dev/null || true
  cleanup
}
trap cleanup_flight EXIT

# rank_pid R: the process of world rank R, in whichever host namespace it runs.
rank_pid() {
  local ns pid
  for ns in "$cname-h0" "$cname-h1"; do
    for pid in $(ip netns pids "$ns"); do
      [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = strata ] || continue
      tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$pid" && return 0
    done
  done
  return 0
}
# start_run NAME [flags...]: the job in the background; returns once it made step 3.
start_run() {
  run=$work/$1
  shift
  on_cluster 8 "$strata" train "${common[@]}" --out "$run" "$@" > "$run.log" 2>&1 &
  mpirun_pid=$!
  wait_steps 3
}
finish_run() {  # waits for the job; it must exit 0
  local status=0
  wait "$mpirun_pid" || status=$?
  mpirun_pid=
  [ "$status" = 0 ] || fail "$(basename "$run"): exit status $status: $(tail -20 "$run.log")"
}
doctor() { "$strata" doctor "$run" "$@" 2>&1 || fail "doctor $(basename "$run"): $("$strata" doctor "$run" 2>&1)"; }
field() { $py -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# ---- 1. a slow link, and SIGUSR2 -----------------------------------------------------------
# Slow links (100 Mbit/s, host 1's 10) and messages of some size (--n-embd 128), so that the
# link, not the 2 cores 8 ranks share, holds the collectives up.
"${cluster[@]}" shape --name "$cname" --rate 100mbit > /dev/null
"${cluster[@]}" shape --name "$cname" --host "$slow" --rate 10mbit > /dev/null
start_run slow --steps 6 --n-embd 128
head_mpirun=$(for pid in $(ip netns pids "$cname-head"); do [ "$(cat "/proc/$pid/comm")" != mpirun ] || echo "$pid"; done)
[ -n "$head_mpirun" ] || fail "no mpirun in $cname-head"
kill -USR2 "$head_mpirun"  # mpirun forwards it to every rank
for _ in $(seq 200); do
  [ "$(grep -l '"reason": "signal"' "$run"/flight/rank_*.json 2> /dev/null | wc -l)" = 8 ] && break
  sleep 0.05
done
[ "$(grep -l '"reason": "signal"' "$run"/flight/rank_*.json 2> /dev/null | wc -l)" = 8 ] ||
  fail "SIGUSR2: not every rank dumped: $(ls "$run/flight" 2> /dev/null) $(grep strata: "$run.log")"
kill -0 "$mpirun_pid" 2> /dev/null || fail "SIGUSR2 ended the run: $(tail "$run.log")"
[ "$(grep -c 'SIGUSR2: flight recorder dumped to' "$run.log")" = 8 ] || fail "SIGUSR2: no line a rank: $(cat "$run.log")"
finish_run
"${cluster[@]}" shape --name "$cname" --rate 1gbit > /dev/null
grep -q '"reason": "exit"' "$run/flight/rank_0.json" || fail "no dump at exit with --flight-dump always"
slow_report=$(doctor)
json=$(doctor --json)
[ "$(field 'd["slow_links"][0]["host"] + " " + d["slow_links"][0]["tier"]' <<< "$json")" = "$slow cluster" ] ||
  fail "doctor does not name $slow's link on the cluster tier: $slow_report"
grep -q "^slow link: host $slow's link on the cluster tier" <<< "$slow_report" || fail "slow link line: $slow_report"

# ---- 2. a straggler ------------------------------------------------------------------------
cpu_root=/sys/fs/cgroup/cpu
if [ -f "$cpu_root/cpu.cfs_quota_us" ]; then
  cgroup=$cpu_root/strata-$cname-straggler
  mkdir -p "$cgroup"
  echo 100000 > "$cgroup/cpu.cfs_period_us"
  # 3% of a CPU, far below any rank's share on a busy machine, and a step's compute (--n-embd 256)
  # longer than the quota of a period, so the cap lands in compute, not only in the waits for
  # collectives (with tiny's own width a step's compute fit in the quota and the rank computed as
  # fast as the others).
  echo 3000 > "$cgroup/cpu.cfs_quota_us"
  on_cluster 8 "$strata" train "${common[@]}" --out "$work/straggler" --steps 8 --n-embd 256 > "$work/straggler.log" 2>&1 &
  mpirun_pid=$! run=$work/straggler
  pid=
  for _ in $(seq 400); do
    pid=$(rank_pid 5)
    [ -n "$pid" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || fail "straggler: no process of rank 5"
  echo "$pid" > "$cgroup/cgroup.procs"
  finish_run
  straggler_report=$(doctor)
  json=$(doctor --json)
  [ "$(field 'd["straggler"]["rank"], d["straggler"]["host"]' <<< "$json")" = "5 $slow" ] ||
    fail "doctor does not name rank 5 on $slow a straggler: $straggler_report ranks: $(field 'd["ranks"]' <<< "$json")"
else
  straggler_report="(skipped: no cgroup v1 cpu controller at $cpu_root)"
fi

# ---- 3. a stalled rank ---------------------------------------------------------------------
timeout_s=5
start_run hang --steps 100000 --collective-timeout "$timeout_s"
t0=$(now)
kill -STOP "$(rank_pid 5)"
while kill -0 "$mpirun_pid" 2> /dev/null; do
  over "$(since "$t0")" $((timeout_s + 15)) && fail "hang: still running $((timeout_s + 15)) s after the stop"
  sleep 0.1
done
took=$(since "$t0")
status=0
wait "$mpirun_pid" || status=$?
mpirun_pid=
[ "$status" = 124 ] || fail "hang: exit status $status, want 124: $(cat "$run.log")"
grep -q "^  rank 5 (host $slow) left no dump: it died or stalls" "$run.log" ||
  fail "hang: the desync report does not name rank 5 on $slow: $(grep -v '^step' "$run.log")"
grep -Eq "^  ranks? [-0-9, ]+ \(hosts? [-a-z0-9, ]+\) timed out in op [0-9]+ \([^)]" "$run.log" ||
  fail "hang: the desync report names no op the others timed out in: $(grep -v '^step' "$run.log")"
# Every line of the file was printed (the log also holds the other ranks' lines, in any order).
while IFS= read -r line; do
  grep -qxF -- "$line" "$run.log" || fail "hang: OUT/flight/desync.txt's line '$line' was not printed"
done < <(tail -n +2 "$run/flight/desync.txt")
[ "$(tail -n +2 "$run/flight/desync.txt" | wc -l)" -ge 2 ] || fail "hang: OUT/flight/desync.txt holds no report"
hang_report=$(doctor)
grep -q "rank 5 (host $slow) left no dump" <<< "$hang_report" || fail "doctor on the hang: $hang_report"

echo "== slow link ($slow at 10mbit, the other host 100mbit) =="
echo "$slow_report"
echo "== straggler (rank 5 at 3% of a CPU, --n-embd 256) =="
echo "$straggler_report"
echo "== rank 5 stopped (--collective-timeout $timeout_s): exit $status after $took s =="
grep -A20 '^strata: desync report' "$run.log" | grep -v '^step\|^\[' || true
echo "flight recorder on the cluster: all checks passed"
