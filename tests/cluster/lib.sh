# shellcheck shell=bash
# Sourced by the cluster tests (label `cluster`): makes a namespace cluster with
# scripts/cluster.sh under the test's own NAME, and always removes it, whatever happens.
# The caller sets: strata (the binary), src (the source tree), cname (the cluster's name,
# distinct per test, so tests never touch a cluster a user made), then calls make_cluster.
# Not root: the test is skipped (exit 77, ctest's SKIP_RETURN_CODE) saying why, or fails when
# STRATA_REQUIRE_CLUSTER=1 (scripts/test.sh, as in CI, which runs as root).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
need_cluster() {
  local why=
  if [ "$(id -u)" != 0 ]; then
    why="not root (uid $(id -u)): a namespace cluster needs root"
  elif ! ip netns list > /dev/null 2>&1; then
    why="'ip netns' does not work here"
  fi
  [ -z "$why" ] && return 0
  if [ "${STRATA_REQUIRE_CLUSTER:-0}" = 1 ]; then fail "cannot make a cluster: $why (STRATA_REQUIRE_CLUSTER=1)"; fi
  echo "SKIP: cannot make a cluster: $why"
  exit 77
}

cluster=("$src/scripts/cluster.sh")
work=$(mktemp -d)
chmod 755 "$work"  # the not-root check runs a copy of cluster.sh as nobody
mpirun_pid=
cleanup() {
  [ -z "$mpirun_pid" ] || kill -KILL "$mpirun_pid" 2> /dev/null || true
  "${cluster[@]}" down --name "$cname" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# make_cluster HOSTS SLOTS RATE [cluster.sh up flags...]
make_cluster() {
  need_cluster
  local hosts=$1 slots=$2 rate=$3
  shift 3
  "${cluster[@]}" down --name "$cname" > /dev/null  # what a killed earlier run of this test left
  "${cluster[@]}" up --name "$cname" --hosts "$hosts" --slots "$slots" --rate "$rate" "$@" > "$work/up.log" ||
    fail "cluster.sh up: $(cat "$work/up.log")"
  cmpirun=(/run/strata-cluster/"$cname"/mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
}

# on_cluster NP ARGS...: mpirun across the cluster's hosts.
on_cluster() {
  local np=$1
  shift
  OMP_NUM_THREADS=1 "${cmpirun[@]}" -np "$np" "$@"
}

# counter HOST NAME: a statistic of HOST's eth0 (tx_bytes, tx_packets, ...), read in HOST.
counter() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2"; }

# strata processes left in any namespace of the cluster.
strata_left() {
  local ns pid
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$cname-(h[0-9]+|head)$"); do
    for pid in $(ip netns pids "$ns"); do
      [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = strata ] && echo "$pid@$ns"
    done
  done
  return 0
}

# wait_steps N [FILE]: waits (at most 60 s) until $run/metrics.jsonl has N lines and FILE exists,
# failing if the job ($mpirun_pid) ends first.
wait_steps() {
  local n=$1 file=${2:-$run/metrics.jsonl}
  for _ in $(seq 1200); do
    [ -e "$file" ] && [ -e "$run/metrics.jsonl" ] && [ "$(wc -l < "$run/metrics.jsonl")" -ge "$n" ] && return 0
    kill -0 "$mpirun_pid" 2> /dev/null || fail "$(basename "$run"): the job ended before step $n: $(cat "$run.log")"
    sleep 0.05
  done
  fail "$(basename "$run"): no step $n within 60 s"
}

py=/usr/bin/python3
losses() { $py -c 'import json,sys; [print(repr(json.loads(l)["loss"])) for f in sys.argv[1:] for l in open(f)]' "$@"; }
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
over() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x > y) }'; }

prepare_data() {
  "$strata" data prepare --input "$src/docs" --out "$work/data" --val-fraction 0.2 --chunk-bytes 1024 > /dev/null
}
