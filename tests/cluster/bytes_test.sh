#!/usr/bin/env bash
# Bytes counted by the kernel (docs/cluster.md): for every preset, 8 ranks on 2 hosts x 4
# (`--topology host`, 1 Gbit/s links) train 4 and then 12 steps; the difference of the two
# runs is 8 steps' traffic, without start-up, the final checkpoint and the exit, which both
# runs share. Per preset, over those 8 steps:
#   accounted  strata's cross-node bytes: the `cluster` tier's bytes_sent of every step in
#              metrics.jsonl (mean per rank) x 8 ranks;
#   wire       what the hosts' eth0 sent (tx_bytes, read inside each host), headers included;
#   payload    wire - packets x the header of one TCP segment on the wire (Ethernet 14 + IPv4 20
#              + TCP 20, + 12 with timestamps): the bytes TCP carried.
#   retrans    segments TCP sent again (the hosts' RetransSegs, /proc/net/snmp), in the 4-step
#              run / in the 12-step run: each carries at most one MSS of payload twice.
# Checks: wire >= accounted (all accounted traffic crossed a wire), and payload within 3%
# (+ 16 KiB) above accounted: what is left is Open MPI's own framing and the few scalars
# strata does not count as tier traffic (loss and gradient-norm reductions, the checkpoint's
# agreement). A loaded machine drops a few segments on the shaped links; their second copies
# count in the payload, so the 4-step run's lower the difference and the 12-step run's raise
# it, by at most their segments x MSS, which the bounds allow for. Prints the table.
# Usage: bytes_test.sh STRATA_BIN SOURCE_DIR
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctbyt
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
make_cluster 2 4 1gbit
prepare_data
hosts=("$cname-h0" "$cname-h1")
ts=$(ip netns exec "${hosts[0]}" cat /proc/sys/net/ipv4/tcp_timestamps)
header=$((14 + 20 + 20 + (ts ? 12 : 0)))
mss=$((1500 - 20 - 20 - (ts ? 12 : 0)))  # the veth's MTU
retransmitted() {  # TCP segments sent again, summed over the hosts
  local r=0 h
  for h in "${hosts[@]}"; do
    r=$((r + $(ip netns exec "$h" awk '/^Tcp:/ { if (!n++) { for (i = 2; i <= NF; ++i) if ($i == "RetransSegs") c = i } else print $c }' /proc/net/snmp)))
  done
  echo "$r"
}

sent() {  # bytes packets, summed over the hosts
  local b=0 p=0 h
  for h in "${hosts[@]}"; do
    b=$((b + $(counter "$h" tx_bytes)))
    p=$((p + $(counter "$h" tx_packets)))
  done
  echo "$b $p"
}
accounted() {
  $py -c 'import json,sys; print(round(sum(json.loads(l)["comm"]["cluster"]["bytes_sent"] for l in open(sys.argv[1])) * 8))' \
    "$1/metrics.jsonl"
}

printf '%-7s %12s %12s %12s %9s %9s %8s\n' preset accounted wire payload wire+% payload+% retrans
for preset in ddp zero1 zero2 zero3 hsdp zeropp topo; do
  declare -A wire=() packets=() acc=() resent=()
  for steps in 4 12; do
    r0=$(retransmitted)
    read -r b0 p0 < <(sent)
    on_cluster 8 "$strata" train --strategy "$preset" --topology host --model tiny --train-data "$work/data/train.bin" \
      --batch 2 --seq 32 --steps "$steps" --threads 1 --log-every 1000 --out "$work/$preset$steps" \
      > "$work/$preset$steps.log" 2>&1 || fail "$preset, $steps steps: $(cat "$work/$preset$steps.log")"
    read -r b1 p1 < <(sent)
    wire[$steps]=$((b1 - b0)) packets[$steps]=$((p1 - p0)) acc[$steps]=$(accounted "$work/$preset$steps")
    resent[$steps]=$(($(retransmitted) - r0))
  done
  a=$((acc[12] - acc[4])) w=$((wire[12] - wire[4])) p=$((packets[12] - packets[4]))
  pay=$((w - p * header))
  ((a > 0)) || fail "$preset: no cross-node bytes accounted"
  pct() { awk -v x="$1" -v a="$a" 'BEGIN { printf "%+.2f", 100 * (x - a) / a }'; }
  printf '%-7s %12d %12d %12d %9s %9s %8s\n' "$preset" "$a" "$w" "$pay" "$(pct "$w")" "$(pct "$pay")" \
    "${resent[4]}/${resent[12]}"
  ((w + resent[4] * (mss + header) >= a)) ||
    fail "$preset: the wire carried $w bytes, fewer than the $a accounted (${resent[4]} segments sent again in the 4-step run)"
  ((pay + resent[4] * mss >= a)) ||
    fail "$preset: TCP carried $pay payload bytes, fewer than the $a accounted (${resent[4]} segments sent again in the 4-step run)"
  ((pay <= a + a * 3 / 100 + 16384 + resent[12] * mss)) ||
    fail "$preset: TCP carried $pay payload bytes, over 3% + 16 KiB above the $a accounted (${resent[12]} segments sent again in the 12-step run)"
done
echo "(8 steps, 2 hosts x 4 ranks, tiny model, batch 2 x seq 32; header $header bytes a packet)"
echo "kernel vs accounted bytes: all checks passed"
