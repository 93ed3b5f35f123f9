#!/usr/bin/env bash
# The piece size of strata's collectives on real links (docs/cluster.md, "Pieces on the
# wire"): on 2 hosts x 1 rank of the namespace cluster, for each shaped rate, ROUNDS rounds
# that each run plain TCP (bench/tcp_pair.py: a one-way client on each host at once, as many
# bytes as a host's all-gather sends) and then `strata bench collectives --topology host
# --piece-kib P` for every piece size P (in an order rotated each round), printing per
# collective the cross-node payload a host sent a second over the shaped rate for strata's
# flat ring and hierarchical algorithm, with the machine's 1-minute load average at
# that moment (the machine may be shared). Root; makes and removes its own cluster.
# Usage: bench/cluster_pieces.sh [BUILD_DIR] [ROUNDS] [RATE:MIB...]
#   (default: 2 rounds, 100mbit:16 1gbit:64). PIECES="256 1024 4096 0" (KiB, 0 = whole
#   messages) and CLUSTER_NAME=spieces in the environment change the sizes and the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-2}
shift $(($# > 2 ? 2 : $#))
links=("$@")
((${#links[@]})) || links=(100mbit:16 1gbit:64)
pieces=(${PIECES:-256 1024 4096 0})
strata=$(readlink -f "$build/strata")
name=${CLUSTER_NAME:-spieces}
out=$(mktemp -d)
trap 'scripts/cluster.sh down --name $name > /dev/null 2>&1 || true; rm -rf "$out"' EXIT
trap 'exit 1' INT TERM
load() { cut -d' ' -f1 /proc/loadavg; }

printf '%-7s %5s %-6s %-15s %10s %10s %6s\n' rate round pieces collective ring hier load
for link in "${links[@]}"; do
  rate=${link%%:*} size=${link##*:}
  scripts/cluster.sh up --name $name --hosts 2 --slots 1 --rate "$rate" --replace > /dev/null
  servers=()
  for h in 0 1; do
    ip netns exec $name-h$h /usr/bin/python3 bench/tcp_pair.py server 5999 > /dev/null 2>&1 &
    servers+=($!)
  done
  sleep 0.5
  mb=$(/usr/bin/python3 -c "print($size * 1048576 / 2 / 1e6)")  # what a host's all-gather sends
  for ((round = 1; round <= rounds; round++)); do
    ip netns exec $name-h0 /usr/bin/python3 bench/tcp_pair.py client 198.18.0.2 5999 "$mb" > "$out/tcp0" &
    client=$!
    ip netns exec $name-h1 /usr/bin/python3 bench/tcp_pair.py client 198.18.0.1 5999 "$mb" > "$out/tcp1"
    wait $client
    /usr/bin/python3 - "$rate" "$round" "$(load)" "$out/tcp0" "$out/tcp1" << 'EOF'
import re, sys
rate, rnd, load = sys.argv[1:4]
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_Bps = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8
got = [float(re.search(r"([0-9.]+) MB/s", open(f).read())[1]) * 1e6 for f in sys.argv[4:]]
print(f"{rate:<7} {rnd:>5} {'tcp':<6} {'each way':<15} {100 * min(got) / rate_Bps:9.0f}% {'':>10} {load:>6}")
EOF
    n=${#pieces[@]}
    for ((i = 0; i < n; i++)); do
      p=${pieces[$(((i + round - 1) % n))]}
      OMP_NUM_THREADS=1 /run/strata-cluster/$name/mpirun --oversubscribe --bind-to none --map-by node \
        --mca mpi_yield_when_idle 1 -np 2 "$strata" bench collectives --topology host --sizes-mib "$size" \
        --iterations 3 --warmup 1 --piece-kib "$p" --json > "$out/bench.json"
      /usr/bin/python3 - "$out/bench.json" "$rate" "$round" "$p" "$(load)" << 'EOF'
import json, re, sys
doc, rate, rnd, piece, load = json.load(open(sys.argv[1])), *sys.argv[2:6]
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_Bps = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8
label = "whole" if piece == "0" else piece + "K"
for r in doc["results"]:
    of = [100 * r[impl]["per_rank_traffic"]["cluster"]["bytes_sent"] / r[impl]["seconds"] / rate_Bps
          for impl in ("ring", "hier")]  # one rank a host: a rank's bytes are its host's
    print(f"{rate:<7} {rnd:>5} {label:<6} {r['collective']:<15} {of[0]:9.0f}% {of[1]:9.0f}% {load:>6}")
EOF
    done
  done
  kill "${servers[@]}" 2> /dev/null || true
  wait "${servers[@]}" 2> /dev/null || true
done
echo "(cross-node payload a host sent a second, over the shaped rate, which counts headers too: payload tops"
echo " out near 95%; median of 3 calls, the slowest rank; tcp: the slower of the two one-way transfers)"
