#!/usr/bin/env bash
# No hangs (docs/faults.md): a rank that dies or stalls mid-run ends the whole 8-rank job
# with a non-zero status and a message naming the rank.
#   1. SIGKILL of rank 3: mpirun notices the lost rank; every rank is gone within 60 s,
#      the status is non-zero and the output names rank 3.
#   2. SIGSTOP of rank 3 (mpirun notices nothing): with --collective-timeout 10 the ranks
#      waiting for it time out; every rank is gone within the timeout + 30 s, mpirun exits
#      with the timeout's status 124, and the messages name a collective, the ranks waited
#      for (rank 3 among them) and a wait of at least the timeout.
# Each rank is started through `sh -c 'echo $$ > pids/RANK; exec strata ...'` so the test
# knows every rank's process; whatever is left on failure is woken and killed.
# Usage: hang_mpi_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$(readlink -f "$1") src=$2
shift 2
mpi=("$@" -np 8)
work=$(mktemp -d)
mpirun_pid=

# A rank process still running (not a zombie) from this test's binary: a recorded pid that
# was reused by another program is never signalled.
is_rank() {
  [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$strata" ] || return 1
  local state
  state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$state" != Z ]
}
cleanup() {
  for f in "$work"/*/pids/*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if is_rank "$pid"; then
      kill -CONT "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  if [ -n "$mpirun_pid" ]; then kill -KILL "$mpirun_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*" >&2
  if [ -f "$run/log" ]; then sed 's/^/  | /' "$run/log" >&2; fi
  exit 1
}
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
over() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x > y) }'; }

"$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 \
  > /dev/null
common=(--strategy zero3 --topology "$src/configs/topology/2node-2gpu-2die.toml" --model tiny
        --train-data "$work/data/train.bin" --batch 2 --seq 32 --steps 100000000 --log-every 100000000)

# ---- 0. the setting is validated, naming its key -------------------------------------------
printf '[train]\ncollective_timeout = 0\n' > "$work/zero.toml"
for bad in "--collective-timeout -1" "--collective-timeout 0" "--config $work/zero.toml"; do
  # shellcheck disable=SC2086  # the flag and its value are two words
  if out=$("$strata" train "${common[@]}" $bad 2>&1); then fail "accepted $bad"; fi
  grep -q "train.collective_timeout = .*: must be positive" <<<"$out" || fail "$bad: refused with '$out'"
done

# Starts an 8-rank run in $work/NAME (train flags after NAME) and returns once every rank
# recorded its pid and training made 5 steps.
start_run() {
  local name=$1
  shift
  run="$work/$name"
  mkdir -p "$run/pids"
  "${mpi[@]}" sh -c 'echo $$ > "$0/$OMPI_COMM_WORLD_RANK"; exec "$@"' "$run/pids" \
    "$strata" train "${common[@]}" --out "$run/out" "$@" > "$run/log" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 600); do
    if [ "$(ls "$run/pids" | wc -l)" = 8 ] && [ -f "$run/out/metrics.jsonl" ] &&
       [ "$(wc -l < "$run/out/metrics.jsonl")" -ge 5 ]; then
      return 0
    fi
    kill -0 "$mpirun_pid" 2>/dev/null || fail "$name: mpirun ended before training made 5 steps"
    sleep 0.2
  done
  fail "$name: training made no 5 steps in 120 s"
}

# Returns once no rank process of the current run is left; fails past $1 seconds after $2.
all_gone_within() {
  local limit=$1 t0=$2 alive
  while :; do
    alive=()
    for f in "$run"/pids/*; do
      if is_rank "$(cat "$f")"; then alive+=("$(basename "$f")"); fi
    done
    [ ${#alive[@]} = 0 ] && return 0
    over "$(since "$t0")" "$limit" && fail "rank(s) ${alive[*]} still running $limit s later"
    sleep 0.2
  done
}

# Sets $status to mpirun's exit status once it ended (it must within 30 s of its ranks).
wait_mpirun() {
  local t0
  t0=$(now)
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    over "$(since "$t0")" 30 && fail "mpirun still running 30 s after its ranks ended"
    sleep 0.2
  done
  status=0
  wait "$mpirun_pid" || status=$?
  mpirun_pid=
}

# ---- 1. a rank dies ---------------------------------------------------------------------
start_run kill
t0=$(now)
kill -KILL "$(cat "$run/pids/3")"
all_gone_within 60 "$t0"
gone=$(since "$t0")
wait_mpirun
[ "$status" != 0 ] || fail "kill: mpirun exited 0 after rank 3 was killed"
grep -Eq "process rank 3 .*signal 9" "$run/log" || fail "kill: the output does not name the lost rank 3"
echo "SIGKILL of rank 3: every rank gone after $gone s, mpirun exit status $status"

# ---- 2. a rank stalls -------------------------------------------------------------------
timeout_s=10
start_run stall --collective-timeout $timeout_s
t0=$(now)
kill -STOP "$(cat "$run/pids/3")"
all_gone_within $((timeout_s + 30)) "$t0"
gone=$(since "$t0")
wait_mpirun
[ "$status" = 124 ] || fail "stall: mpirun exit status $status, want 124 (the collective timeout's)"
pattern="^strata: rank [0-9]+: collective timeout after [0-9.]+ s in shard:[a-z_]+ on group '[^']+', "
pattern+="waiting for rank [0-9]+ \((receive|send)"
grep -Eq "$pattern" "$run/log" || fail "stall: no timeout message naming a collective and a waited-for rank"
for waited in $(grep -E "$pattern" "$run/log" | sed -E 's/.* after ([0-9.]+) s .*/\1/'); do
  over "$timeout_s" "$waited" && fail "stall: a rank gave up after $waited s, under the $timeout_s s timeout"
done
grep -Eq "^strata: rank [0-9]+: .*waiting for (.* and )?rank 3 \(" "$run/log" ||
  fail "stall: no timeout message names the stalled rank 3"
if grep -Eq "^strata: rank 3: " "$run/log"; then fail "stall: the stopped rank 3 reported a timeout"; fi
echo "SIGSTOP of rank 3, ${timeout_s} s timeout: every rank gone after $gone s, mpirun exit status $status"
grep -E "$pattern" "$run/log" | sed 's/^/  /'
echo "hang tests: all checks passed"
