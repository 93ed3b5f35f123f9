#!/usr/bin/env bash
# strata's collectives against plain TCP on the same shaped link (docs/cluster.md, "Links at
# their rate"): for each RATE:MIB and each layout (2 hosts x 1 rank, 2 hosts x 2 ranks), ROUNDS
# rounds that each run plain TCP (bench/tcp_pair.py exchange: warm connections, both hosts
# sending a host's all-gather bytes at once) and then `strata bench collectives --topology
# host`, printing per collective the cross-node payload a host sent a second over the shaped
# rate for strata's flat ring and hierarchical algorithm, with the machine's 1-minute load
# average. Root; makes and removes its own cluster.
# Usage: bench/cluster_rate.sh [BUILD_DIR] [ROUNDS] [RATE:MIB...]
#   (default: 3 rounds, 100mbit:16 1gbit:64). SLOTS="1 2" (ranks a host) and
#   CLUSTER_NAME=srate in the environment change the layouts and the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
shift $(($# > 2 ? 2 : $#))
links=("$@")
((${#links[@]})) || links=(100mbit:16 1gbit:64)
strata=$(readlink -f "$build/strata")
name=${CLUSTER_NAME:-srate}
out=$(mktemp -d)
trap 'scripts/cluster.sh down --name $name > /dev/null 2>&1 || true; rm -rf "$out"' EXIT
trap 'exit 1' INT TERM
load() { cut -d' ' -f1 /proc/loadavg; }

printf '%-7s %-6s %5s %-15s %10s %10s %6s\n' rate layout round collective ring hier load
for link in "${links[@]}"; do
  rate=${link%%:*} size=${link##*:}
  for slots in ${SLOTS:-1 2}; do
    scripts/cluster.sh up --name $name --hosts 2 --slots "$slots" --rate "$rate" --replace > /dev/null
    mb=$(/usr/bin/python3 -c "print($size * 1048576 / 2 / 1e6)")  # what a host's all-gather sends
    for ((round = 1; round <= rounds; round++)); do
      ip netns exec $name-h1 /usr/bin/python3 bench/tcp_pair.py exchange 1 198.18.0.1 5999 "$mb" 3 &
      ip netns exec $name-h0 /usr/bin/python3 bench/tcp_pair.py exchange 0 198.18.0.2 5999 "$mb" 3 > "$out/tcp"
      wait
      /usr/bin/python3 - "$rate" "$slots" "$round" "$(load)" "$out/tcp" << 'PY'
import re, sys
rate, slots, rnd, load = sys.argv[1:5]
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_Bps = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8
got = float(re.search(r"([0-9.]+) MB/s", open(sys.argv[5]).read())[1]) * 1e6
print(f"{rate:<7} {'2x' + slots:<6} {rnd:>5} {'tcp each way':<15} {100 * got / rate_Bps:9.1f}% {'':>10} {load:>6}")
PY
      OMP_NUM_THREADS=1 /run/strata-cluster/$name/mpirun --oversubscribe --bind-to none \
        --mca mpi_yield_when_idle 1 -np $((2 * slots)) "$strata" bench collectives --topology host \
        --sizes-mib "$size" --iterations 3 --warmup 1 --json > "$out/bench.json"
      /usr/bin/python3 - "$out/bench.json" "$rate" "$slots" "$round" "$(load)" << 'PY'
import json, re, sys
doc, rate, slots, rnd, load = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), *sys.argv[4:6]
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_Bps = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8
for r in doc["results"]:
    # A host's cross-node bytes a call: a rank's cluster-tier bytes x the ranks of a host.
    of = [100 * r[impl]["per_rank_traffic"]["cluster"]["bytes_sent"] * slots / r[impl]["seconds"] / rate_Bps
          for impl in ("ring", "hier")]
    print(f"{rate:<7} {'2x%d' % slots:<6} {rnd:>5} {r['collective']:<15} {of[0]:9.1f}% {of[1]:9.1f}% {load:>6}")
PY
    done
  done
done
echo "(cross-node payload a host sent a second over the shaped rate, which counts each frame's 14-byte"
echo " Ethernet header and the TCP/IP headers: payload tops out at 95.6%; strata: median of 3 calls, the"
echo " slowest rank; tcp: median of 3 exchanges)"
