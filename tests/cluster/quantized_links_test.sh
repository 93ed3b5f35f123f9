#!/usr/bin/env bash
# Quantized messages over two TCP connections a peer (docs/cluster.md, "Transport"): zeropp
# gathers its weights in int8 (data plus per-block scales) over the node tier. On the switched
# layout (4 one-rank hosts, 2 to a switch, so every byte of the node tier crosses TCP) with
# Open MPI's btl_tcp_links 2 (strata's default, named here so the test keeps covering two links
# whatever the default), 3 steps must train, under a short collective timeout, to the losses of
# the same run on one host with link emulation, bit for bit. Sent as one message of a derived
# datatype over data and scales, the gather hung in the first forward on every rank.
# Usage: quantized_links_test.sh STRATA_BIN SOURCE_DIR MPIEXEC [MPI FLAGS...]
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctqln
shift 2
one_host=("$@")
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
make_cluster 4 1 500mbit --switches 2 --uplink-rate 1gbit
prepare_data
cat > "$work/topology.toml" << 'TOML'
[[tiers]]
name = "node"
size = 2
bandwidth_GBps = 0.06
latency_us = 50
[[tiers]]
name = "cluster"
bandwidth_GBps = 0.12
latency_us = 100
TOML
common=(--strategy zeropp --topology "$work/topology.toml" --model mini --train-data "$work/data/train.bin"
        --batch 4 --seq 32 --grad-accum 2 --steps 3 --threads 1 --log-every 1000)

started=$(now)
on_cluster 4 --map-by node --mca btl_tcp_links 2 "$strata" train "${common[@]}" --collective-timeout 30 \
  --out "$work/cluster" > "$work/cluster.log" 2>&1 || fail "zeropp across 4 hosts, 2 links a peer: $(cat "$work/cluster.log")"
echo "zeropp across 4 hosts with 2 TCP connections a peer: 3 steps in $(since "$started") s"
OMP_NUM_THREADS=1 "${one_host[@]}" -np 4 "$strata" train "${common[@]}" --emulate-links --out "$work/one" \
  > "$work/one.log" 2>&1 || fail "zeropp on one host: $(cat "$work/one.log")"
cluster_losses=$(losses "$work/cluster/metrics.jsonl")
[ "$(wc -l <<<"$cluster_losses")" = 3 ] || fail "$(wc -l <<<"$cluster_losses") losses across hosts, want 3"
[ "$cluster_losses" = "$(losses "$work/one/metrics.jsonl")" ] ||
  fail "losses differ: across hosts $(paste -sd' ' <<<"$cluster_losses"), one host $(losses "$work/one/metrics.jsonl" | paste -sd' ')"
echo "quantized messages over 2 TCP connections a peer: the losses of one host, bit for bit; all checks passed"
