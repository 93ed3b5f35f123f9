#!/usr/bin/env bash
# A cluster on one machine (docs/cluster.md): N hosts as network namespaces, each with its own
# NIC (a veth pair into one bridge), its own hostname and an egress link shaped by the kernel
# (tc htb for the rate, tc netem for a delay, an nftables rule for loss). Open MPI starts its daemons inside the hosts
# through an rsh agent, so `mpirun --hostfile` runs exactly as on a real cluster: ranks of one
# host share memory, ranks of different hosts talk TCP over the shaped links.
#
#   cluster.sh up --hosts N --slots S --rate RATE [--delay D] [--loss P] [--name NAME]
#                 [--subnet K] [--dir DIR] [--replace]
#   cluster.sh down   [--name NAME]       every namespace, link, process and file of NAME
#   cluster.sh status [--name NAME]       hosts, addresses, shaping, bytes sent
#   cluster.sh shape  [--name NAME] [--rate RATE] [--delay D] [--loss P]  reshape a running cluster
#   cluster.sh link   [--name NAME] HOST up|down                       a host's cable
#   cluster.sh flags  [--name NAME]       the mpirun flags (as `up` printed them)
#
# NAME (default "strata", at most 8 characters) prefixes everything made: namespaces NAME-h0..,
# bridge NAME-br, host-side cable ends NAME-v0.. (their namespace end is each host's eth0), the
# hostnames NAME-h0.., the state folder DIR (default /run/strata-cluster/NAME: hostfile,
# rsh-agent, mpirun.flags, cluster.env). Hosts get 198.18.K.1.., the bridge (where mpirun runs,
# like a login node) 198.18.K.254, K = --subnet (0-255, default 0) - the benchmarking range
# 198.18.0.0/15, never a real network. RATE as tc writes it (100mbit, 1gbit, 10gbit), D as tc
# (default 0ms, 1ms, 200us), P a percentage (default 0; 1, 30%).
# Needs root, iproute2 and util-linux; nftables for --loss, a kernel with sch_netem for --delay
# (scripts/setup.sh installs the packages); refused otherwise, with the reason.
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
name=strata hosts= slots= rate= delay= loss= subnet=0 dir= replace=0
pos=()
while ((${#})); do
  case $1 in
    --name) name=${2:?--name needs a value}; shift 2 ;;
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --slots) slots=${2:?--slots needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay) delay=${2:?--delay needs a value}; shift 2 ;;
    --loss) loss=${2:?--loss needs a value}; shift 2 ;;
    --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --replace) replace=1; shift ;;
    -h | --help) usage ;;
    -*) die "unknown option $1" ;;
    *) pos+=("$1"); shift ;;
  esac
done
# Interface names are limited to 15 characters: NAME-v + up to 3 digits + room to spare.
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$name': must be 1-8 lowercase letters or digits, starting with a letter"
[ -n "$dir" ] || dir=/run/strata-cluster/$name
bridge=$name-br

# What `up` needs, checked before anything is made.
require_root() {
  [ "$(id -u)" = 0 ] || die "needs root: network namespaces, veth links and tc shaping are root-only (you are uid $(id -u))"
  command -v ip > /dev/null || die "'ip' not found: install iproute2 (scripts/setup.sh)"
  command -v tc > /dev/null || die "'tc' not found: install iproute2 (scripts/setup.sh)"
  command -v unshare > /dev/null || die "'unshare' not found: install util-linux"
  ip netns list > /dev/null 2>&1 || die "'ip netns' does not work here: $(ip netns list 2>&1 | head -1)"
}

# The namespaces of NAME, by prefix: whatever a crashed `up` or a killed test left too.
namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" | sort -V || true; }

check_shape() {
  [[ $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] || die "--rate '$rate': want a tc rate such as 100mbit, 1gbit, 10gbit"
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

# Shapes host I's link. htb holds what eth0 sends to RATE. A delay needs netem under it
# (refused, with the reason, where the kernel has no sch_netem). Loss drops each packet eth0
# receives with probability P (an nftables ingress rule, `numgen random`): on the wire's far
# end, as a lossy cable does, so TCP sees it as loss and retransmits.
shape_host() {
  local ns=$name-h$1
  # htb cannot change its root in place: a reshape makes it anew.
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 1 r2q 1000
  ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:1 htb rate "$rate" ceil "$rate"
  if delay_set; then
    ip netns exec "$ns" tc qdisc add dev eth0 parent 1:1 handle 10: netem delay "$delay" limit 100000
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
delay_set() { ! [[ $delay =~ ^0+(\.0+)?(us|ms|s)$ ]]; }
loss_set() { awk -v p="${loss%\%}" 'BEGIN { exit !(p > 0) }'; }

# Ends every process inside NAME's namespaces (ranks, orted daemons), then removes the
# namespaces (their veth pairs go with them), the bridge and the state folder.
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
  ip netns del "$name-probe" 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$name-v[0-9]+$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf "$dir" /run/strata-cluster/"$name"
}

up() {
  require_root
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 250)) || die "--hosts '$hosts': want 1 to 250"
  [[ $slots =~ ^[0-9]+$ ]] && ((slots >= 1)) || die "--slots '$slots': want a positive number"
  [ -n "$rate" ] || die "--rate is required (e.g. 1gbit)"
  delay=${delay:-0ms} loss=${loss:-0}
  check_shape
  [[ $subnet =~ ^[0-9]+$ ]] && ((subnet <= 255)) || die "--subnet '$subnet': want 0 to 255 (198.18.K.0/24)"
  local net=198.18.$subnet
  if [ -n "$(namespaces)" ] || ip link show "$bridge" > /dev/null 2>&1; then
    ((replace)) || die "a cluster named '$name' exists ($(namespaces | tr '\n' ' ')); 'cluster.sh down --name $name' or 'up --replace'"
    teardown
  fi
  ip -o -4 addr show | grep -q " $net\." && die "subnet $net.0/24 is in use here (ip addr); pick another --subnet"

  # From here a failure removes whatever was made: never half a cluster.
  trap 'status=$?; teardown; exit $status' EXIT
  trap 'exit 1' INT TERM
  ip link add "$bridge" type bridge
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns
  for ((i = 0; i < hosts; i++)); do
    ns=$name-h$i
    ip netns add "$ns"
    ip link add "$name-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$name-v$i" master "$bridge" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$net.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    shape_host "$i"
  done

  mkdir -p "$dir"
  for ((i = 0; i < hosts; i++)); do echo "$name-h$i slots=$slots"; done > "$dir/hostfile"
  # Open MPI's rsh launcher calls AGENT [options] HOST COMMAND...; like ssh, the command words
  # make one shell line. It runs inside HOST's namespace, in a UTS namespace of its own that
  # carries HOST's name, so MPI, hwloc and strata's `host` topology see one node per host.
  cat > "$dir/rsh-agent" << EOF
#!/usr/bin/env bash
# Made by scripts/cluster.sh for cluster '$name': mpirun's rsh agent (plm_rsh_agent).
set -euo pipefail
while [[ \${1:-} == -* ]]; do shift; done
host=\${1:?usage: rsh-agent HOST COMMAND...}
shift
[[ \$host =~ ^$name-h[0-9]+\$ ]] || { echo "rsh-agent: '\$host' is not a host of cluster '$name'" >&2; exit 255; }
exec ip netns exec "\$host" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
EOF
  chmod +x "$dir/rsh-agent"
  local root_flag=""
  [ "$(id -u)" = 0 ] && root_flag="--allow-run-as-root "
  echo "${root_flag}--hostfile $dir/hostfile --mca plm_rsh_agent $dir/rsh-agent" \
       "--mca btl self,vader,tcp --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24" \
       > "$dir/mpirun.flags"
  printf 'name=%s\nhosts=%s\nslots=%s\nsubnet=%s\nrate=%s\ndelay=%s\nloss=%s\n' \
         "$name" "$hosts" "$slots" "$subnet" "$rate" "$delay" "$loss" > "$dir/cluster.env"
  # The state folder of a cluster made with --dir elsewhere is found through the default place.
  if [ "$dir" != /run/strata-cluster/"$name" ]; then
    mkdir -p /run/strata-cluster
    ln -sfn "$dir" /run/strata-cluster/"$name"
  fi
  trap - EXIT INT TERM
  echo "cluster '$name': $hosts hosts x $slots slots ($name-h0..$name-h$((hosts - 1)), $net.1-$((hosts)))," \
       "each link $rate, delay $delay, loss ${loss%\%}%; state in $dir"
  echo "mpirun $(cat "$dir/mpirun.flags") -np $((hosts * slots)) ..."
}

# The state folder of an existing cluster.
state() {
  [ -f "$dir/cluster.env" ] || dir=/run/strata-cluster/$name
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
  [ -f "$dir/cluster.env" ] || [ -f /run/strata-cluster/"$name"/cluster.env ] ||
    echo "cluster '$name': left over without its state folder (run 'cluster.sh down --name $name')"
  local ns
  for ns in $found; do
    printf '%s: %s, %s, tx_bytes %s, processes %s\n' "$ns" \
      "$(ip netns exec "$ns" ip -o -4 addr show dev eth0 2>/dev/null | awk '{print $4}')" \
      "$(ip netns exec "$ns" tc class show dev eth0 2>/dev/null | grep -o 'rate [^ ]*' | head -1)$(
         ip netns exec "$ns" tc qdisc show dev eth0 2>/dev/null | grep -o ' delay [^ ]*' | head -1)$(
         ip netns exec "$ns" nft list table netdev "$name" 2>/dev/null | grep -o ' < [0-9]*' |
           awk '{printf " loss %g%%", $2 / 10000}')" \
      "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes 2>/dev/null)" \
      "$(ip netns pids "$ns" 2>/dev/null | wc -l)"
  done
  [ ! -f "$dir/mpirun.flags" ] || echo "mpirun $(cat "$dir/mpirun.flags") ..."
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
    given_rate=$rate given_delay=$delay given_loss=$loss
    state  # what is not given stays as it is
    rate=${given_rate:-$rate} delay=${given_delay:-$delay} loss=${given_loss:-$loss}
    [ -n "$given_rate$given_delay$given_loss" ] || die "shape: give --rate, --delay or --loss"
    check_shape
    for ((i = 0; i < hosts; i++)); do shape_host "$i"; done
    sed -i -e "s/^rate=.*/rate=$rate/" -e "s/^delay=.*/delay=$delay/" -e "s/^loss=.*/loss=$loss/" "$dir/cluster.env"
    echo "cluster '$name': each link $rate, delay $delay, loss ${loss%\%}%"
    ;;
  link)
    require_root
    state
    ((${#pos[@]} == 2)) || die "link: want HOST up|down"
    host=${pos[0]} updown=${pos[1]}
    [[ $host =~ ^$name-h([0-9]+)$ ]] || die "link: '$host' is not a host of cluster '$name'"
    [[ $updown == up || $updown == down ]] || die "link: '$updown': want up or down"
    ip link set "$name-v${BASH_REMATCH[1]}" "$updown"
    ;;
  *) usage ;;
esac
