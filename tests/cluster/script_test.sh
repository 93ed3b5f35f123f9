#!/usr/bin/env bash
# scripts/cluster.sh end to end (docs/cluster.md):
#   1. refusals before anything is made: not root (a copy run as nobody), bad values;
#   2. up: 2 hosts x 4 slots; mpirun on the head starts 4 ranks in each host, which see their
#      own hostname: `strata topo --topology host` finds node 4 x cluster 2; an existing
#      cluster is refused, --replace makes it anew;
#   3. the shaped link holds a transfer to its rate: 4 MB from host 0 to host 1 at 50 Mbit/s
#      take at least 0.6 s (0.67 s at the rate; never less, the check cannot be flaky);
#   4. shape --loss and --host, link down/up (the host's eth0 loses its carrier);
#   5. down removes every namespace, link and file, and a cluster left half-made by a killed
#      `up` too;
#   6. --switches: refusals; 4 one-rank hosts on 2 switches: bytes between hosts of one switch
#      never reach its uplink, bytes between switches do; two hosts of a switch sending across
#      at once share its uplink (8 MB at 40 Mbit/s: at least 1.5 s, never less); each host
#      has its class, shape --uplink-rate reshapes, status shows it; down removes it all.
#   7. --cpus: refusals; 2 one-rank hosts capped at 0.25 CPUs: a rank spinning for a second
#      of wall time gets at most a quarter of a second of CPU (a cap, never flaky), status
#      shows it, down removes the cgroups.
# Usage: script_test.sh STRATA_BIN SOURCE_DIR
set -euo pipefail
strata=$(readlink -f "$1") src=$2 cname=sctscr
# shellcheck source=lib.sh
source "$src/tests/cluster/lib.sh"
need_cluster

# ---- 1. refusals -------------------------------------------------------------------------
cp "$src/scripts/cluster.sh" "$work/cluster.sh"
chmod 755 "$work/cluster.sh"
if out=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$work/cluster.sh" up --name "$cname" --hosts 2 \
           --slots 1 --rate 1gbit 2>&1); then fail "up as nobody succeeded"; fi
grep -q "cluster.sh: error: needs root: .*(you are uid 65534)" <<<"$out" || fail "not root: '$out'"
refused() {  # expected message, up flags...
  local want=$1 out
  shift
  if out=$("${cluster[@]}" up --name "$cname" "$@" 2>&1); then fail "accepted up $*"; fi
  grep -Fq -- "$want" <<<"$out" || fail "up $*: '$out', want '$want'"
}
refused "--hosts '0': want 1 to 250" --hosts 0 --slots 1 --rate 1gbit
refused "--rate 'fast': want a tc rate" --hosts 2 --slots 1 --rate fast
refused "--loss '120': want a percentage from 0 to 100" --hosts 2 --slots 1 --rate 1gbit --loss 120
refused "--name 'Bad_Name': must be 1-8 lowercase" --name Bad_Name --hosts 2 --slots 1 --rate 1gbit
refused "--rate is required" --hosts 2 --slots 1
[ -z "$(ip netns list | grep "^$cname-")" ] || fail "a refused up left namespaces"

# ---- 2. up, hostnames, topology ----------------------------------------------------------
make_cluster 2 4 50mbit
grep -q "cluster '$cname': 2 hosts x 4 slots" "$work/up.log" || fail "up said: $(cat "$work/up.log")"
if out=$("${cluster[@]}" up --name "$cname" --hosts 2 --slots 4 --rate 1gbit 2>&1); then fail "a second up succeeded"; fi
grep -q "a cluster named '$cname' exists" <<<"$out" || fail "second up: '$out'"
hosts=$(on_cluster 8 hostname | sort | uniq -c | awk '{print $2 "x" $1}' | paste -sd' ')
[ "$hosts" = "$cname-h0x4 $cname-h1x4" ] || fail "ranks ran on '$hosts', want 4 on each host"
topo=$(on_cluster 8 "$strata" topo --topology host)
grep -q "topology 'host': 8 ranks = node 4 x cluster 2" <<<"$topo" || fail "strata topo: $topo"
grep -q "rank 5 ($cname-h1): node#1 {4-7}" <<<"$topo" || fail "strata topo, rank 5: $topo"

# ---- 3. the rate holds -------------------------------------------------------------------
bytes=4000000
ip netns exec "$cname-h1" $py -c '
import socket, sys
s = socket.create_server(("198.18.0.2", 5001)); c, _ = s.accept(); n = 0
while (b := c.recv(1 << 16)): n += len(b)
print(n)' > "$work/received" &
sink=$!
t0=$(now)
for _ in $(seq 50); do  # the listener is up within moments
  ip netns exec "$cname-h0" $py -c "
import socket
c = socket.create_connection(('198.18.0.2', 5001)); c.sendall(bytes($bytes)); c.close()" 2> /dev/null && break
  sleep 0.1
  t0=$(now)
done
wait "$sink"
took=$(since "$t0")
[ "$(cat "$work/received")" = $bytes ] || fail "received $(cat "$work/received") bytes of $bytes"
over 0.6 "$took" && fail "$bytes bytes at 50 Mbit/s took $took s, under the 0.64 s the rate allows"
echo "$bytes bytes at 50 Mbit/s: $took s (0.64 s of payload at the rate)"
# The receiver's acknowledgements took the small-packet class (ahead of data), the data the other.
class_sent() {  # NAMESPACE CLASSID FIELD(1: bytes, 3: packets)
  ip netns exec "$1" tc -s class show dev eth0 classid "$2" | awk -v f="$3" '/^ Sent/ {print $(f + 1)}'
}
acks=$(class_sent "$cname-h1" 1:10 3)
((acks > 100)) || fail "host 1 sent $acks packets in its small-packet class (1:10) while receiving $bytes bytes"
data=$(class_sent "$cname-h0" 1:20 1)
((data >= bytes)) || fail "host 0's data class (1:20) sent $data bytes, under the $bytes it sent"

# ---- 4. shape, loss, link ----------------------------------------------------------------
"${cluster[@]}" shape --name "$cname" --rate 200mbit > /dev/null
grep -q "rate 200Mbit" <<<"$(ip netns exec "$cname-h1" tc class show dev eth0)" || fail "shape --rate did not reach host 1"
"${cluster[@]}" shape --name "$cname" --host "$cname-h1" --loss 30 > /dev/null
grep -q "numgen random mod 1000000 < 300000 drop" <<<"$(ip netns exec "$cname-h1" nft list table netdev "$cname")" ||
  fail "shape --loss 30 made no drop rule on host 1"
if ip netns exec "$cname-h0" nft list table netdev "$cname" > /dev/null 2>&1; then fail "--host shaped host 0 too"; fi
status=$("${cluster[@]}" status --name "$cname")
grep -q "^$cname-h1: data 198.18.0.2/24, management 198.19.0.2/24, rate 200Mbit loss 30%" <<<"$status" ||
  fail "status: $status"
"${cluster[@]}" link --name "$cname" "$cname-h1" down
sleep 0.2
[ "$(ip netns exec "$cname-h1" cat /sys/class/net/eth0/carrier)" = 0 ] || fail "link down: host 1 still has a carrier"
"${cluster[@]}" link --name "$cname" "$cname-h1" up
for _ in $(seq 50); do
  [ "$(ip netns exec "$cname-h1" cat /sys/class/net/eth0/carrier 2> /dev/null)" = 1 ] && break
  sleep 0.1
done
[ "$(ip netns exec "$cname-h1" cat /sys/class/net/eth0/carrier)" = 1 ] || fail "link up: no carrier"

# ---- 5. down, also of a half-made cluster ------------------------------------------------
left_over() { { ip netns list | grep "^$cname-"; ip -o link | grep -o "$cname-[a-z0-9]*"; ls -d /run/strata-cluster/"$cname"; } 2> /dev/null || true; }
"${cluster[@]}" down --name "$cname" > /dev/null
[ -z "$(left_over)" ] || fail "down left: $(left_over)"
"${cluster[@]}" up --name "$cname" --hosts 8 --slots 1 --rate 1gbit > /dev/null &
up_pid=$!
for _ in $(seq 100); do  # killed once it made some of it
  ip netns list | grep -q "^$cname-h1" && break
  sleep 0.05
done
kill -KILL "$up_pid"
wait "$up_pid" 2> /dev/null || true
[ -n "$(left_over)" ] || fail "the killed up left nothing behind: the check of down below proves nothing"
"${cluster[@]}" down --name "$cname" > /dev/null
[ -z "$(left_over)" ] || fail "down after a killed up left: $(left_over)"

# ---- 6. switches -------------------------------------------------------------------------
refused "--switches needs --uplink-rate" --hosts 4 --slots 1 --rate 1gbit --switches 2
refused "--switches 3: does not divide --hosts 4" --hosts 4 --slots 1 --rate 1gbit --switches 3 --uplink-rate 1gbit
refused "--uplink-rate 1gbit: only with --switches" --hosts 4 --slots 1 --rate 1gbit --uplink-rate 1gbit
refused "--uplink-rate 'quick': want a tc rate" --hosts 4 --slots 1 --rate 1gbit --switches 2 --uplink-rate quick
[ -z "$(left_over)" ] || fail "a refused up --switches left: $(left_over)"
make_cluster 4 1 1gbit --switches 2 --uplink-rate 40mbit
grep -q "2 switches of 2 hosts, each uplink 40mbit" "$work/up.log" || fail "up --switches said: $(cat "$work/up.log")"
uplink_bytes() { cat "/sys/class/net/$cname-u0/statistics/tx_bytes"; }
# send FROM TO BYTES...: each pair's transfer at once, FROM and TO host numbers.
send() {
  local pids=() from to n
  while ((${#})); do
    from=$1 to=$2 n=$3
    shift 3
    ip netns exec "$cname-h$to" $py -c '
import socket, sys
s = socket.create_server((sys.argv[1], 5001)); c, _ = s.accept(); n = 0
while (b := c.recv(1 << 16)): n += len(b)
assert n == int(sys.argv[2]), n' "198.18.0.$((to + 1))" "$n" &
    pids+=($!)
    ip netns exec "$cname-h$from" $py -c '
import socket, sys, time
for _ in range(50):  # the listener is up within moments
    try:
        c = socket.create_connection((sys.argv[1], 5001)); break
    except OSError: time.sleep(0.1)
c.sendall(bytes(int(sys.argv[2]))); c.close()' "198.18.0.$((to + 1))" "$n" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || fail "a transfer failed"; done
}
before=$(uplink_bytes)
send 0 1 4000000
within=$(($(uplink_bytes) - before))
((within < 100000)) || fail "4 MB between hosts of switch 0 put $within bytes on its uplink"
before=$(uplink_bytes)
t0=$(now)
send 0 2 4000000 1 3 4000000
took=$(since "$t0")
across=$(($(uplink_bytes) - before))
((across > 8000000)) || fail "8 MB from switch 0 to switch 1 put only $across bytes on its uplink"
over 1.5 "$took" && fail "8 MB through one 40 Mbit/s uplink took $took s, under the 1.6 s the rate allows"
echo "8 MB from 2 hosts through one 40 Mbit/s uplink: $took s (1.6 s of payload at the rate); within a switch: $within bytes on it"
classes=$(tc class show dev "$cname-u0")
grep -q "class htb 1:16 parent 1:1 .*rate 20Mbit ceil 40Mbit" <<<"$classes" || fail "host 0's share of uplink 0: $classes"
"${cluster[@]}" shape --name "$cname" --uplink-rate 80mbit > /dev/null
grep -q "^$cname-s1: uplink $cname-u1, rate 80Mbit out, rate 80Mbit in" <<<"$("${cluster[@]}" status --name "$cname")" ||
  fail "status after shape --uplink-rate 80mbit: $("${cluster[@]}" status --name "$cname")"
"${cluster[@]}" down --name "$cname" > /dev/null
[ -z "$(left_over)" ] || fail "down of a switched cluster left: $(left_over)"

# ---- 7. cpus -----------------------------------------------------------------------------
refused "--cpus 'most': want a number of CPUs from 0.1" --hosts 2 --slots 1 --rate 1gbit --cpus most
refused "--cpus '0.05': want a number of CPUs from 0.1" --hosts 2 --slots 1 --rate 1gbit --cpus 0.05
refused "--cpus '4096': want a number of CPUs from 0.1 to this machine's" --hosts 2 --slots 1 --rate 1gbit --cpus 4096
make_cluster 2 1 1gbit --cpus 0.25
grep -q ", 0.25 CPUs a host;" "$work/up.log" || fail "up --cpus said: $(cat "$work/up.log")"
status=$("${cluster[@]}" status --name "$cname")
grep -q "^$cname-h1: .*, cpus 0.25$" <<<"$status" || fail "status of a --cpus cluster: $status"
cat > "$work/spin.py" << 'PY'
import os, time
t0, c0 = time.monotonic(), os.times()
while time.monotonic() - t0 < 1.0:
    pass
c1 = os.times()
print(f"{c1.user + c1.system - c0.user - c0.system:.3f} {time.monotonic() - t0:.3f}")
PY
# A CFS quota admits at most its share of each 10 ms period: a quarter of the wall time,
# plus a period of slack.
while read -r cpu wall; do
  awk -v c="$cpu" -v w="$wall" 'BEGIN { exit !(c <= 0.25 * w + 0.02) }' ||
    fail "a rank of a 0.25-CPU host spun $wall s and got $cpu s of CPU"
  echo "a rank of a 0.25-CPU host, spinning $wall s: $cpu s of CPU"
done < <(on_cluster 2 /usr/bin/python3 "$work/spin.py")
"${cluster[@]}" down --name "$cname" > /dev/null
[ -z "$(find /sys/fs/cgroup -maxdepth 2 -name "strata-$cname-h*" 2> /dev/null)" ] || fail "down left the host cgroups"
echo "cluster.sh: all checks passed"
