#!/usr/bin/env bash
# Measured link figures on the namespace cluster (docs/cluster.md, "Link figures"): for each
# shaped rate (default 100mbit 1gbit 10gbit) and two layouts, 2 hosts x 1 rank (one rank has
# the host's link to itself) and 2 hosts x 4 ranks (four ranks share it), runs
# `strata bench collectives --topology host --json` across the hosts and prints, per
# collective, strata's hierarchical algorithm's cross-node rate per host - the `cluster`
# tier's bytes each rank sent in one call (the bench's per_rank_traffic) x ranks a host / the
# call's time - next to the shaped rate, and what each rank of a host got. The hosts' eth0
# tx_bytes over the whole bench are printed too (all three algorithms, warm-up included).
# Root; makes and removes its own cluster (name "sbench").
# Usage: bench/cluster_links.sh [BUILD_DIR] [SIZE_MIB] [RATE...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
size=${2:-16}
shift $(($# > 2 ? 2 : $#))
rates=("$@")
((${#rates[@]})) || rates=(100mbit 1gbit 10gbit)
strata=$(readlink -f "$build/strata")
name=sbench
trap 'scripts/cluster.sh down --name $name > /dev/null 2>&1 || true' EXIT
trap 'exit 1' INT TERM
out=$(mktemp -d)

printf '%-8s %-6s %-15s %10s %12s %9s %12s %14s\n' rate layout collective "hier ms" "host MB/s" "of rate" \
  "rank MB/s" "eth0 MB sent"
for rate in "${rates[@]}"; do
  for slots in 1 4; do
    scripts/cluster.sh up --name $name --hosts 2 --slots $slots --rate "$rate" --replace > /dev/null
    tx0=$(ip netns exec $name-h0 cat /sys/class/net/eth0/statistics/tx_bytes)
    OMP_NUM_THREADS=1 /run/strata-cluster/$name/mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
      -np $((2 * slots)) "$strata" bench collectives --topology host --sizes-mib "$size" --iterations 3 --warmup 1 \
      --json > "$out/bench.json"
    tx1=$(ip netns exec $name-h0 cat /sys/class/net/eth0/statistics/tx_bytes)
    /usr/bin/python3 - "$out/bench.json" "$rate" "$slots" $((tx1 - tx0)) << 'EOF'
import json, re, sys
doc, rate, slots, sent = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
rate_Bps = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8
for r in doc["results"]:
    h = r["hier"]
    cross = h["per_rank_traffic"]["cluster"]["bytes_sent"] * slots  # one host's cross-node bytes a call
    host = cross / h["seconds"]
    print(f"{rate:<8} {'2x%d' % slots:<6} {r['collective']:<15} {h['seconds'] * 1e3:10.1f} {host / 1e6:12.1f} "
          f"{100 * host / rate_Bps:8.0f}% {host / slots / 1e6:12.1f} {sent / 1e6:14.1f}")
EOF
  done
done
echo "($size MiB fp32 buffers, median of 3 calls (slowest rank); host MB/s = cluster-tier bytes a host sent a call /"
echo " the call's time; the shaped rate counts headers too, so payload can reach about 95% of it)"
