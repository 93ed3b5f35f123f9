#!/usr/bin/env bash
# A cluster on one machine (docs/cluster.md): N hosts as network namespaces, each with its own
# hostname and two NICs, as on many real clusters: eth0 on the data network (a veth pair into
# one bridge), shaped by the kernel (tc htb for the rate, tc netem for a delay, an nftables rule
# for loss), and eth1 on a management network that the head (where mpirun runs) shares. Open MPI
# starts its daemons inside the hosts through an rsh agent and talks to them over management;
# the ranks talk over data: ranks of one host share memory, ranks of different hosts use TCP over
# the shaped links. So `mpirun --hostfile` runs exactly as on a real cluster, and a fault of the
# data link (pulled, lossy) never cuts mpirun off a host's daemon.
# With --switches K the data network has two levels, as a cluster of multi-GPU nodes does: the
# hosts are split in order into K groups (a "node" of one-rank hosts, each host a GPU with its
# own link), each group on a switch of its own, and each switch joined to the core by one
# uplink shaped at UPLINK (both directions): every host of a group that sends outside it
# shares that uplink, as the GPUs of a node share its NIC.
# With --cpus C each host has C CPUs of its own, as a real host does: its processes (daemon,
# ranks, their threads) run in a cgroup of their own capped at C CPUs (CFS bandwidth, C x 10 ms
# in every 10 ms), so a host computes no faster while the others wait and no slower while they
# compute beyond its share; without it every host's processes share the machine's cores.
#
#   cluster.sh up --hosts N --slots S --rate RATE [--delay D] [--loss P] [--name NAME] [--replace]
#                 [--switches K --uplink-rate UPLINK] [--cpus C]
#   cluster.sh down   [--name NAME]     every namespace, link, process and file of NAME
#   cluster.sh status [--name NAME]     hosts, addresses, shaping, bytes sent, processes
#   cluster.sh shape  [--name NAME] [--host HOST] [--rate RATE] [--delay D] [--loss P] [--uplink-rate UPLINK]
#                                       reshape every link (or HOST's) of a running cluster
#   cluster.sh link   [--name NAME] HOST up|down   plug or unplug HOST's data cable
#   cluster.sh flags  [--name NAME]     the mpirun flags
#
# NAME (default "strata", at most 8 characters) prefixes everything made: namespaces NAME-h0..
# (hostnames too) and NAME-head, bridges NAME-br (data) and NAME-mg (management), cable ends
# NAME-v0.. (data; eth0 inside) and NAME-m0.., NAME-mh (management; eth1 inside); with
# --switches, bridges NAME-s0.. (a group's switch) and uplinks NAME-u0.. (switch end) to
# NAME-d0.. (core end, in NAME-br); with --cpus, cgroups strata-NAME-h0.. of the cpu
# controller (cgroup v1's cpu hierarchy or the unified v2 one); the state
# folder /run/strata-cluster/NAME (hostfile, rsh-agent, mpirun.flags, mpirun, cluster.env).
# Hosts get 198.18.0.1.. on data and 198.19.0.1.. on management, the head 198.19.0.254: the
# benchmarking range 198.18.0.0/15, on the cluster's own bridges, never routed. mpirun runs on
# the head, as on a real cluster's login node: /run/strata-cluster/NAME/mpirun -np N ... RATE as tc
# writes it (100mbit, 1gbit, 10gbit), D as tc (default 0ms; 1ms, 200us), P a percentage
# (default 0; 1, 30%).
# Needs root, iproute2, util-linux and ethtool; nftables for --loss, a kernel with sch_netem for
# --delay (scripts/setup.sh installs the packages); refused otherwise, with the reason.
set -euo pipefail

die() {
  echo "cluster.sh: error: $*" >&2
  exit 2
}
usage() {
  sed -n '/^#   cluster.sh/p' "$0" | sed 's/^#   //' >&2
  exit 2
}

((${#})) || usage
cmd=$1
shift
name=strata hosts='' slots='' rate='' delay='' loss='' only_host='' replace=0 switches=0 uplink_rate='' cpus=''
pos=()
while ((${#})); do
  case $1 in
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --slots) slots=${2:?--slots needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay) delay=${2:?--delay needs a value}; shift 2 ;;
    --loss) loss=${2:?--loss needs a value}; shift 2 ;;
    --host) only_host=${2:?--host needs a value}; shift 2 ;;
    --switches) switches=${2:?--switches needs a value}; shift 2 ;;
    --uplink-rate) uplink_rate=${2:?--uplink-rate needs a value}; shift 2 ;;
    --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
    --replace) replace=1; shift ;;
    -h | --help) usage ;;
    -*) die "unknown option $1" ;;
    *) pos+=("$1"); shift ;;
  esac
done
# Interface names are limited to 15 characters: NAME-v + up to 3 digits + room to spare.
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$name': must be 1-8 lowercase letters or digits, starting with a letter"
dir=/run/strata-cluster/$name
bridge=$name-br mgmt_bridge=$name-mg
net=198.18.0 mgmt=198.19.0  # the data and management networks' /24s

# What `up` needs, checked before anything is made.
require_root() {
  [ "$(id -u)" = 0 ] || die "needs root: network namespaces, veth links and tc shaping are root-only (you are uid $(id -u))"
  command -v ip > /dev/null || die "'ip' not found: install iproute2 (scripts/setup.sh)"
  command -v tc > /dev/null || die "'tc' not found: install iproute2 (scripts/setup.sh)"
  command -v unshare > /dev/null || die "'unshare' not found: install util-linux"
  command -v ethtool > /dev/null || die "'ethtool' not found: install ethtool (scripts/setup.sh)"
  ip netns list > /dev/null 2>&1 || die "'ip netns' does not work here: $(ip netns list 2>&1 | head -1)"
}

# The cpu controller a host's cgroup is made in (--cpus): cgroup v1's own hierarchy, or v2's
# unified one, where the root delegates cpu to its children; both empty where there is none.
cgroup_version='' cgroup_root=''
if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  cgroup_version=v1 cgroup_root=/sys/fs/cgroup/cpu
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  cgroup_version=v2 cgroup_root=/sys/fs/cgroup
fi
cpu_period_us=10000  # short, so that a host out of its share waits at most a few ms to run
# Refuses a bad --cpus: a number of CPUs from 0.1 (1 ms a period, the kernel's least) to the machine's.
check_cpus() {
  local have
  have=$(nproc)
  [[ $cpus =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v c="$cpus" -v n="$have" 'BEGIN { exit !(c >= 0.1 && c <= n) }' ||
    die "--cpus '$cpus': want a number of CPUs from 0.1 to this machine's $have (e.g. 0.25)"
  [ -n "$cgroup_root" ] || die "--cpus $cpus: no cgroup cpu controller here (neither /sys/fs/cgroup/cpu nor cpu in /sys/fs/cgroup/cgroup.controllers)"
}
# Caps host I's processes at --cpus: the cgroup its rsh agent puts the host's daemon in.
limit_host_cpus() {
  local group=$cgroup_root/strata-$name-h$1 quota
  quota=$(awk -v c="$cpus" -v p=$cpu_period_us 'BEGIN { printf "%d", c * p }')
  mkdir -p "$group"
  if [ "$cgroup_version" = v1 ]; then
    echo $cpu_period_us > "$group/cpu.cfs_period_us"
    echo "$quota" > "$group/cpu.cfs_quota_us"
  else
    grep -qw cpu "$cgroup_root/cgroup.subtree_control" || echo +cpu > "$cgroup_root/cgroup.subtree_control"
    echo "$quota $cpu_period_us" > "$group/cpu.max"
  fi
}
# Host NS's CPU cap as ", cpus C" (nothing without one).
host_cpus() {
  local group=$cgroup_root/strata-$1
  [ -n "$cgroup_root" ] && [ -d "$group" ] || return 0
  if [ "$cgroup_version" = v1 ]; then
    awk -v q="$(cat "$group/cpu.cfs_quota_us")" -v p="$(cat "$group/cpu.cfs_period_us")" 'BEGIN { if (q > 0) printf ", cpus %g", q / p }'
  else
    awk '$1 != "max" { printf ", cpus %g", $1 / $2 }' "$group/cpu.max"
  fi
}
# NAME's host cgroups, by prefix.
host_cgroups() {
  [ -z "$cgroup_root" ] || find "$cgroup_root" -maxdepth 1 -type d -regextype egrep -regex ".*/strata-$name-h[0-9]+" 2>/dev/null | sort -V
}

# The namespaces of NAME, by prefix: whatever a crashed `up` or a killed test left too.
namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(h[0-9]+|head)$" | sort -V || true; }

check_rate() { [[ $2 =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] || die "$1 '$2': want a tc rate such as 100mbit, 1gbit, 10gbit"; }
check_shape() {
  check_rate --rate "$rate"
  [[ -z $uplink_rate ]] || check_rate --uplink-rate "$uplink_rate"
  [[ $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "--delay '$delay': want a tc time such as 0ms, 1ms, 200us"
  [[ $loss =~ ^[0-9]+(\.[0-9]+)?%?$ ]] && awk -v p="${loss%\%}" 'BEGIN { exit !(p <= 100) }' ||
    die "--loss '$loss': want a percentage from 0 to 100"
  if delay_set && ! netem_available; then
    die "--delay $delay: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), which delays packets; use --delay 0ms"
  fi
  if loss_set; then
    command -v nft > /dev/null || die "--loss $loss: 'nft' not found: install nftables (scripts/setup.sh)"
  fi
}
# Whether the kernel has sch_netem: tried on a veth pair in a scratch namespace.
netem_available() {
  local probe=$name-probe ok=1
  ip netns add "$probe" || return 1
  ip netns exec "$probe" ip link add probe0 type veth peer name probe1 &&
    ip netns exec "$probe" tc qdisc add dev probe0 root netem delay 1ms 2> /dev/null || ok=0
  ip netns del "$probe"
  ((ok))
}

# Shapes host I's link. htb holds what eth0 sends to RATE, and behaves as a host's NIC does:
# - Burst: one millisecond of RATE (tc's default is one frame: it takes its clock to be 1 GHz).
#   htb sends only when the CPU runs it; a dequeue that comes late loses the link's time for
#   good, which a NIC's ring, drained by the hardware, never does. With a millisecond it makes
#   up for a late one; over any time t it still sends at most RATE x t + 1 ms of RATE.
# - Small packets first (acknowledgements, MPI's control messages: IP length under 128 bytes):
#   a class of their own, served before the data class, both under the link's RATE. A host
#   whose peer also sends would otherwise queue its acknowledgements behind its own data, and
#   the peer's TCP, waiting for them, leaves its link idle: both ways at once got 86-90% of the
#   rate, against 95% with this. Real hosts queue by flow (fq_codel, Debian's default qdisc),
#   which likewise sends a sparse flow's packets ahead of a bulk one's; this kernel has none.
# A delay needs netem under each class (refused, with the reason, where the kernel has no
# sch_netem). Loss drops each packet eth0 receives with probability P (an nftables ingress
# rule, `numgen random`): on the wire's far end, as a lossy cable does, so TCP sees it as loss
# and retransmits.
shape_host() {
  local ns=$name-h$1 bits burst
  bits=$(rate_bits "$rate")
  burst=$(awk -v r="$bits" 'BEGIN { b = r / 8 / 1000; printf "%d", b < 1600 ? 1600 : b }')
  # htb cannot change its root in place: a reshape makes it anew.
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 20
  ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
    burst "$burst" cburst "$burst" quantum 60000
  ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:10 htb prio 0 rate "$((bits / 20))bit" \
    ceil "$rate" burst "$burst" cburst "$burst" quantum 1514
  ip netns exec "$ns" tc class add dev eth0 parent 1:1 classid 1:20 htb prio 1 \
    rate "$((bits - bits / 20))bit" ceil "$rate" burst "$burst" cburst "$burst" quantum 60000
  # The IP header's total length (bytes 2-3) under 128.
  ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
    match u16 0x0000 0xff80 at 2 flowid 1:10
  if delay_set; then
    ip netns exec "$ns" tc qdisc add dev eth0 parent 1:10 handle 10: netem delay "$delay" limit 100000
    ip netns exec "$ns" tc qdisc add dev eth0 parent 1:20 handle 20: netem delay "$delay" limit 100000
  fi
  ip netns exec "$ns" nft delete table netdev "$name" 2>/dev/null || true
  if loss_set; then
    # numgen random mod 1000000 < P * 10^4: P in percent, to 0.0001%.
    local below
    below=$(awk -v p="${loss%\%}" 'BEGIN { printf "%d", p * 10000 + 0.5 }')
    ip netns exec "$ns" nft -f - << EOF
table netdev $name {
  chain lossy_link {
    type filter hook ingress device eth0 priority 0;
    numgen random mod 1000000 < $below drop
  }
}
EOF
  fi
}
# Shapes switch K's uplink, each direction at UPLINK: what leaves the group (the switch end's
# egress) and what enters it (the core end's). Each host of the group has a class of its own
# under the uplink's (by source address going out, by destination coming in), guaranteed an
# equal share and free to borrow the rest: hosts sending at once share the uplink fairly, as
# a NIC's queues share it among a node's GPUs. This kernel has no fair-queueing qdisc (sfq,
# fq_codel); under one FIFO two TCP flows split an uplink 7:1, and a collective waits on its
# slowest flow.
shape_uplink() {
  local k=$1 per=$((hosts / switches)) end match j share
  share=$(awk -v r="$(rate_bits "$uplink_rate")" -v n="$per" 'BEGIN { printf "%dbit", r / n }')
  for end in "$name-u$k" "$name-d$k"; do
    [[ $end == "$name-u$k" ]] && match=src || match=dst
    tc qdisc del dev "$end" root 2>/dev/null || true
    # Frames of no host of the group (ARP) go to the default class.
    tc qdisc add dev "$end" root handle 1: htb default 2
    tc class add dev "$end" parent 1: classid 1:1 htb rate "$uplink_rate" ceil "$uplink_rate" quantum 60000
    tc class add dev "$end" parent 1:1 classid 1:2 htb rate 1mbit ceil "$uplink_rate" quantum 1500
    for ((j = 0; j < per; j++)); do
      tc class add dev "$end" parent 1:1 classid "1:$((16 + j))" htb rate "$share" ceil "$uplink_rate" quantum 60000
      tc filter add dev "$end" parent 1: protocol ip prio 1 u32 \
        match ip "$match" "$net.$((k * per + j + 1))/32" flowid "1:$((16 + j))"
    done
  done
}
# A tc rate (100mbit, 1gbit, 10mbps) in bits a second.
rate_bits() {
  awk -v r="$1" 'BEGIN {
    match(r, /^[0-9.]+/); v = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : 1
    if (u ~ /bps$/) m *= 8
    printf "%.0f", v * m }'
}
delay_set() { ! [[ $delay =~ ^0+(\.0+)?(us|ms|s)$ ]]; }
loss_set() { awk -v p="${loss%\%}" 'BEGIN { exit !(p > 0) }'; }

# Ends every process inside NAME's namespaces (ranks, orted daemons), then removes the
# namespaces (their veth pairs go with them), the bridges and the state folder.
teardown() {
  local ns pids
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  for ns in $(namespaces); do
    for _ in $(seq 50); do  # a killed process leaves the namespace within moments
      [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null || true
  done
  local group
  for group in $(host_cgroups); do rmdir "$group" 2>/dev/null || true; done
  ip netns del "$name-probe" 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  ip link del "$mgmt_bridge" 2>/dev/null || true
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$name-(v[0-9]+|m[0-9]+|mh|u[0-9]+|d[0-9]+|s[0-9]+)$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  # A rank killed with SIGKILL cannot remove its Open MPI shared-memory segments and session
  # folder; the hosts share the machine's /dev/shm and /tmp, and their hostnames say whose.
  rm -f /dev/shm/vader_segment."$name"-h*
  rm -rf "${TMPDIR:-/tmp}"/ompi."$name"-h*
  rm -rf "$dir"
}

# Makes namespace NS with lo up, IPv4 only (no IPv6 autoconfiguration chatter in the counters).
add_namespace() {
  ip netns add "$1"
  ip netns exec "$1" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'
  ip netns exec "$1" ip link set lo up
}

# Gives namespace NS the NIC IFACE at ADDRESS, cabled by the veth pair CABLE-IFACE into BRIDGE.
plug() {
  local ns=$1 iface=$2 cable=$3 into=$4 address=$5
  ip link add "$cable" type veth peer name "$iface" netns "$ns"
  # Segments of at most one MTU, as a real NIC puts them on the wire: veth would otherwise
  # pass 64 KiB TCP super-packets, whose headers the counters and htb would see once.
  ip netns exec "$ns" ethtool -K "$iface" tso off gso off > /dev/null
  ethtool -K "$cable" tso off gso off > /dev/null
  ip link set "$cable" master "$into" up
  ip netns exec "$ns" ip addr add "$address/24" dev "$iface"
  ip netns exec "$ns" ip link set "$iface" up
}

up() {
  require_root
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 250)) || die "--hosts '$hosts': want 1 to 250"
  [[ $slots =~ ^[0-9]+$ ]] && ((slots >= 1)) || die "--slots '$slots': want a positive number"
  [ -n "$rate" ] || die "--rate is required (e.g. 1gbit)"
  if [[ $switches != 0 ]]; then
    [[ $switches =~ ^[0-9]+$ ]] && ((switches >= 2)) || die "--switches '$switches': want 2 or more groups of hosts"
    ((hosts % switches == 0)) || die "--switches $switches: does not divide --hosts $hosts into equal groups"
    [ -n "$uplink_rate" ] || die "--switches needs --uplink-rate, the rate of each switch's uplink (e.g. 1gbit)"
  elif [ -n "$uplink_rate" ]; then
    die "--uplink-rate $uplink_rate: only with --switches (one bridge has no uplinks)"
  fi
  delay=${delay:-0ms} loss=${loss:-0}
  check_shape
  [ -z "$cpus" ] || check_cpus
  if [ -n "$(namespaces)" ] || ip link show "$bridge" > /dev/null 2>&1 || [ -e "$dir" ]; then
    ((replace)) || die "a cluster named '$name' exists ($(namespaces | tr '\n' ' ')); 'cluster.sh down --name $name' or 'up --replace'"
    teardown
  fi

  # From here a failure removes whatever was made: never half a cluster.
  trap 'status=$?; teardown; exit $status' EXIT
  trap 'exit 1' INT TERM
  local b
  for b in "$bridge" "$mgmt_bridge"; do
    ip link add "$b" type bridge
    ip link set "$b" up
  done
  local i k into
  for ((k = 0; k < switches; k++)); do
    ip link add "$name-s$k" type bridge
    ip link set "$name-s$k" up
    ip link add "$name-u$k" type veth peer name "$name-d$k"
    ethtool -K "$name-u$k" tso off gso off > /dev/null
    ethtool -K "$name-d$k" tso off gso off > /dev/null
    ip link set "$name-u$k" master "$name-s$k" up
    ip link set "$name-d$k" master "$bridge" up
    shape_uplink "$k"
  done
  for ((i = 0; i < hosts; i++)); do
    add_namespace "$name-h$i"
    into=$bridge
    ((switches)) && into=$name-s$((i / (hosts / switches)))
    plug "$name-h$i" eth0 "$name-v$i" "$into" "$net.$((i + 1))"
    plug "$name-h$i" eth1 "$name-m$i" "$mgmt_bridge" "$mgmt.$((i + 1))"
    shape_host "$i"
    [ -z "$cpus" ] || limit_host_cpus "$i"
  done
  add_namespace "$name-head"
  plug "$name-head" eth1 "$name-mh" "$mgmt_bridge" "$mgmt.254"

  mkdir -p "$dir"
  for ((i = 0; i < hosts; i++)); do echo "$name-h$i slots=$slots"; done > "$dir/hostfile"
  # Open MPI's rsh launcher calls AGENT [options] HOST COMMAND...; like ssh, the command words
  # make one shell line. It runs inside HOST's namespace, in a UTS namespace of its own that
  # carries HOST's name, so MPI, hwloc and strata's `host` topology see one node per host.
  # With --cpus it first joins HOST's cgroup, which the daemon and the ranks inherit: the
  # agent runs in the head's namespace, whose /sys has no cgroup mounts, so it mounts the
  # controller's hierarchy for the moment it takes.
  local join_cgroup=''
  if [ -n "$cpus" ]; then
    local fs="-t cgroup -o cpu cgroup"
    [ "$cgroup_version" = v2 ] && fs="-t cgroup2 cgroup2"
    join_cgroup="at=\$(mktemp -d); mount $fs \"\$at\"; echo \$\$ > \"\$at/strata-\$host/cgroup.procs\"; umount \"\$at\"; rmdir \"\$at\""
  fi
  cat > "$dir/rsh-agent" << EOF
#!/usr/bin/env bash
# Made by scripts/cluster.sh for cluster '$name': mpirun's rsh agent (plm_rsh_agent).
set -euo pipefail
while [[ \${1:-} == -* ]]; do shift; done
host=\${1:?usage: rsh-agent HOST COMMAND...}
shift
[[ \$host =~ ^$name-h[0-9]+\$ ]] || { echo "rsh-agent: '\$host' is not a host of cluster '$name'" >&2; exit 255; }
$join_cgroup
exec ip netns exec "\$host" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
EOF
  chmod +x "$dir/rsh-agent"
  # Ranks of one host share memory (vader), hosts talk TCP on the data network; mpirun and its
  # daemons on management.
  echo "--allow-run-as-root --hostfile $dir/hostfile --mca plm_rsh_agent $dir/rsh-agent" \
       "--mca btl self,vader,tcp --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $mgmt.0/24" \
       > "$dir/mpirun.flags"
  cat > "$dir/mpirun" << EOF
#!/usr/bin/env bash
# Made by scripts/cluster.sh for cluster '$name': mpirun on the head with the cluster's flags.
exec ip netns exec $name-head mpirun $(cat "$dir/mpirun.flags") "\$@"
EOF
  chmod +x "$dir/mpirun"
  printf 'name=%s\nhosts=%s\nslots=%s\nrate=%s\ndelay=%s\nloss=%s\nswitches=%s\nuplink_rate=%s\ncpus=%s\n' \
         "$name" "$hosts" "$slots" "$rate" "$delay" "$loss" "$switches" "$uplink_rate" "$cpus" > "$dir/cluster.env"
  trap - EXIT INT TERM
  echo "cluster '$name': $hosts hosts x $slots slots ($name-h0..$name-h$((hosts - 1)), data $net.1-$((hosts)))," \
       "each link $rate, delay $delay, loss ${loss%\%}%$( ((switches)) &&
         echo ", $switches switches of $((hosts / switches)) hosts, each uplink $uplink_rate")$(
         [ -z "$cpus" ] || echo ", $cpus CPUs a host"); state in $dir"
  echo "run: $dir/mpirun -np $((hosts * slots)) ...   (= ip netns exec $name-head mpirun $(cat "$dir/mpirun.flags") ...)"
}

# The state folder of an existing cluster.
state() {
  [ -f "$dir/cluster.env" ] || die "no cluster named '$name' (no $dir/cluster.env)"
  # shellcheck disable=SC1091
  source "$dir/cluster.env"
}

status() {
  local found
  found=$(namespaces)
  if [ -z "$found" ]; then
    echo "no cluster named '$name'"
    return 0
  fi
  [ -f "$dir/cluster.env" ] ||
    echo "cluster '$name': left over without its state folder (run 'cluster.sh down --name $name')"
  local ns addresses
  for ns in $found; do
    addresses=$(ip netns exec "$ns" ip -o -4 addr show 2>/dev/null |
                awk '$2 == "eth0" {printf "data %s, ", $4} $2 == "eth1" {printf "management %s", $4}')
    if [[ $ns == *-head ]]; then
      printf '%s: %s, processes %s\n' "$ns" "$addresses" "$(ip netns pids "$ns" 2>/dev/null | wc -l)"
      continue
    fi
    printf '%s: %s, %s, tx_bytes %s, processes %s%s\n' "$ns" "$addresses" \
      "$(ip netns exec "$ns" tc class show dev eth0 classid 1:1 2>/dev/null | grep -o 'rate [^ ]*' | head -1)$(
         ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | grep -o ' delay [^ ]*' | head -1)$(
         ip netns exec "$ns" nft list table netdev "$name" 2>/dev/null | grep -o ' < [0-9]*' |
           awk '{printf " loss %g%%", $2 / 10000}')" \
      "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes 2>/dev/null)" \
      "$(ip netns pids "$ns" 2>/dev/null | wc -l)" "$(host_cpus "$ns")"
  done
  local k
  for k in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$name-u[0-9]+$" |
             sed "s/^$name-u//" | sort -n); do
    printf '%s-s%s: uplink %s, %s out, %s in; tx_bytes out %s, in %s\n' "$name" "$k" \
      "$name-u$k" "$(tc class show dev "$name-u$k" 2>/dev/null | grep -o 'rate [^ ]*' | head -1)" \
      "$(tc class show dev "$name-d$k" 2>/dev/null | grep -o 'rate [^ ]*' | head -1)" \
      "$(cat "/sys/class/net/$name-u$k/statistics/tx_bytes" 2>/dev/null)" \
      "$(cat "/sys/class/net/$name-d$k/statistics/tx_bytes" 2>/dev/null)"
  done
  [ ! -f "$dir/mpirun" ] || echo "run: $dir/mpirun -np N ..."
}

case $cmd in
  up) up ;;
  down)
    require_root
    teardown
    echo "cluster '$name': removed"
    ;;
  status) status ;;
  flags)
    state
    cat "$dir/mpirun.flags"
    ;;
  shape)
    require_root
    given_rate=$rate given_delay=$delay given_loss=$loss given_uplink=$uplink_rate
    state  # what is not given stays as it is
    rate=${given_rate:-$rate} delay=${given_delay:-$delay} loss=${given_loss:-$loss}
    [ -n "$given_rate$given_delay$given_loss$given_uplink" ] || die "shape: give --rate, --delay, --loss or --uplink-rate"
    if [ -n "$given_uplink" ]; then
      ((switches)) || die "--uplink-rate $given_uplink: cluster '$name' has no switches (made without --switches)"
      [ -z "$only_host" ] || die "--uplink-rate with --host: an uplink is a switch's, not a host's"
      uplink_rate=$given_uplink
      check_rate --uplink-rate "$uplink_rate"
      for ((k = 0; k < switches; k++)); do shape_uplink "$k"; done
      sed -i -e "s/^uplink_rate=.*/uplink_rate=$uplink_rate/" "$dir/cluster.env"
      echo "cluster '$name': each uplink $uplink_rate"
      [ -n "$given_rate$given_delay$given_loss" ] || exit 0
    fi
    check_shape
    if [ -n "$only_host" ]; then
      [[ $only_host =~ ^$name-h([0-9]+)$ ]] && ((BASH_REMATCH[1] < hosts)) ||
        die "--host '$only_host': not a host of cluster '$name'"
      shape_host "${BASH_REMATCH[1]}"
      echo "cluster '$name': $only_host's link $rate, delay $delay, loss ${loss%\%}%"
    else
      for ((i = 0; i < hosts; i++)); do shape_host "$i"; done
      sed -i -e "s/^rate=.*/rate=$rate/" -e "s/^delay=.*/delay=$delay/" -e "s/^loss=.*/loss=$loss/" "$dir/cluster.env"
      echo "cluster '$name': each link $rate, delay $delay, loss ${loss%\%}%"
    fi
    ;;
  link)
    require_root
    state
    ((${#pos[@]} == 2)) || die "link: want HOST up|down"
    host=${pos[0]} updown=${pos[1]}
    [[ $host =~ ^$name-h([0-9]+)$ ]] && ((BASH_REMATCH[1] < hosts)) || die "link: '$host' is not a host of cluster '$name'"
    [[ $updown == up || $updown == down ]] || die "link: '$updown': want up or down"
    ip link set "$name-v${BASH_REMATCH[1]}" "$updown"
    ;;
  *) usage ;;
esac
