#!/usr/bin/env bash
# netbed.sh: a multi-host test bed on one machine (docs/TESTBED.md).
#
# Each node (coordinator c, servers s0 s1 ..., workers w0 w1 ...) lives in a network namespace of
# its own, psn-<bed>-<node>, joined by a veth pair to a bridge psn-<bed>-br in the root namespace.
# Addresses come from the loopback range only (so no test traffic can ever leave the machine):
#   c  -> 127.10.0.1      sN -> 127.10.1.(N+1)      wN -> 127.10.2.(N+1)      (all /16)
# with route_localnet=1 in every namespace and on every veth. Ports need not be unique: each
# namespace has its own port space. Needs root, iproute2 (ip, tc) and a kernel with veth, bridge
# and the tbf qdisc (netem is not needed).
#
# Usage: netbed.sh [-b BED] COMMAND ...        (BED: 1-4 of [a-z0-9], default "nb"; or NETBED_BED)
#   up NODE...                 create the bed with these nodes (a stale bed of that name goes first)
#   down                       remove every namespace and the bridge of the bed (kills what runs in
#                              them); safe to run any number of times, also after a crash
#   down-all                   `down` for every bed on the machine (every psn-* namespace and link),
#                              e.g. after test processes were killed before they could clean up
#   exec NODE CMD...           run CMD inside NODE's namespace (exec: the pid stays CMD's)
#   addr NODE                  print NODE's address
#   nodes                      print the bed's nodes
#   rate NODE RATE             limit NODE's egress to RATE (tc tbf; e.g. 1gbit, 10mbit); "off" lifts it
#   fault link-down NODE       full partition of NODE (the bridge side of its veth down)
#   fault link-up NODE         heal it
#   fault cut A B              A and B cannot reach each other (blackhole routes in both); others can
#   fault heal A B             undo cut
#   fault freeze NODE          SIGSTOP every process in NODE's namespace
#   fault thaw NODE            SIGCONT them
#   fault crawl NODE [RATE]    NODE's egress slowed to a crawl (default 64kbit)
#   fault uncrawl NODE         back to the rate set by `rate` (or none)
#   check                      exit 77 if this machine cannot run the bed (not root, no ip netns)
set -euo pipefail

BED="${NETBED_BED:-nb}"
if [[ "${1:-}" == "-b" ]]; then
  BED="$2"
  shift 2
fi
[[ "$BED" =~ ^[a-z0-9]{1,4}$ ]] || { echo "netbed: bed name must be 1-4 of [a-z0-9]: '$BED'" >&2; exit 2; }
PREFIX="psn-$BED"
BRIDGE="$PREFIX-br"
# The rate set by `rate` per node, so that `uncrawl` can go back to it (a file per bed).
STATE_DIR="/run/netbed-$BED"

die() { echo "netbed: $*" >&2; exit 2; }

check_node() {
  [[ "$1" =~ ^(c|s[0-9]{1,2}|w[0-9]{1,2})$ ]] || die "node must be c, sN or wN (N < 100): '$1'"
}

addr_of() {
  check_node "$1"
  case "$1" in
    c) echo "127.10.0.1" ;;
    s*) echo "127.10.1.$(( ${1#s} + 1 ))" ;;
    w*) echo "127.10.2.$(( ${1#w} + 1 ))" ;;
  esac
}

ns_of() { check_node "$1"; echo "$PREFIX-$1"; }

# Namespaces of this bed that exist now.
bed_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-[a-z0-9]+$" || true; }

cmd_check() {
  [[ $(id -u) -eq 0 ]] || { echo "netbed: not root: skipped" >&2; exit 77; }
  command -v ip >/dev/null && command -v tc >/dev/null || { echo "netbed: no ip/tc: skipped" >&2; exit 77; }
  local probe="psn-probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "netbed: ip netns unavailable: skipped" >&2; exit 77; fi
  ip netns del "$probe"
}

cmd_down() {
  local ns pids
  for ns in $(bed_namespaces); do
    # What runs in our namespaces was started in the bed: stop it (resumed first, so a frozen
    # process dies too), or the namespace would linger through its processes.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n "$pids" ]]; then
      kill -CONT $pids 2>/dev/null || true
      kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
  # Host ends of veth pairs vanish with their peers; remove any left from a half-made bed.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$PREFIX-" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -rf "$STATE_DIR"
}

cmd_down_all() {
  local bed
  for bed in $( (ip netns list 2>/dev/null | awk '{print $1}'; ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1) |
                sed -n 's/^psn-\([a-z0-9]\{1,4\}\)-.*/\1/p' | sort -u); do
    "$0" -b "$bed" down
  done
}

cmd_up() {
  [[ $# -ge 1 ]] || die "up: give the nodes (c s0 s1 w0 ...)"
  local node
  for node in "$@"; do check_node "$node"; done
  cmd_down
  trap 'echo "netbed: up failed; removing the bed" >&2; cmd_down' ERR
  mkdir -p "$STATE_DIR"
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  # The bridge only forwards: with route_localnet on in the root namespace (all=1 turns it on for
  # every device), the root namespace would take 127.10.x.y as its own (lo's 127.0.0.0/8) and
  # answer ARP for every node on the bridge. arp_ignore=8: it answers none.
  sysctl -qw "net.ipv4.conf.$BRIDGE.arp_ignore=8"
  for node in "$@"; do
    local ns host
    ns=$(ns_of "$node")
    host="$PREFIX-$node"
    ip netns add "$ns"
    ip link add "$host" type veth peer name eth0 netns "$ns"
    sysctl -qw "net.ipv4.conf.$host.route_localnet=1"
    sysctl -qw "net.ipv4.conf.$host.arp_ignore=8"
    ip link set "$host" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    # Only 127.0.0.1 is the node's own on lo: with the whole 127.0.0.0/8 local, a peer's address
    # without a route (the link down) would be taken as the node's own and every connection to
    # it reset at once, instead of its packets being lost as on a real network.
    ip -n "$ns" route del local 127.0.0.0/8 dev lo table local
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.route_localnet=1
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.eth0.route_localnet=1
    ip -n "$ns" addr add "$(addr_of "$node")/16" dev eth0
    ip -n "$ns" link set eth0 up
  done
  trap - ERR
  # No STP on the bridge: its ports forward at once.
}

cmd_exec() {
  [[ $# -ge 2 ]] || die "exec NODE CMD..."
  local ns
  ns=$(ns_of "$1")
  shift
  exec ip netns exec "$ns" "$@"
}

set_rate() {  # node rate [burst]
  local ns
  ns=$(ns_of "$1")
  if [[ "$2" == "off" ]]; then
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    return
  fi
  # tbf: by default a burst of 64 KiB so that high rates are reached with the timer's granularity
  # (a GSO packet larger than the burst is cut into segments by tbf); a crawl takes a small burst,
  # or its first 64 KiB would pass at once. The queue holds up to a second of traffic before
  # dropping (TCP then backs off).
  ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$2" burst "${3:-64kb}" latency 1s
}

cmd_rate() {
  [[ $# -eq 2 ]] || die "rate NODE RATE|off"
  set_rate "$1" "$2"
  mkdir -p "$STATE_DIR"
  echo "$2" >"$STATE_DIR/rate-$1"
}

blackhole() {  # action node peer
  local ns
  ns=$(ns_of "$2")
  ip -n "$ns" route "$1" blackhole "$(addr_of "$3")/32"
}

cmd_fault() {
  [[ $# -ge 2 ]] || die "fault KIND NODE..."
  local kind="$1" node="$2" ns pids
  ns=$(ns_of "$node")
  case "$kind" in
    # The switch side of the cable: the node's eth0 loses its carrier, keeps its address and
    # routes, and what it sends is lost (TCP retransmits) until the link is back.
    link-down) ip link set "$PREFIX-$node" down ;;
    link-up) ip link set "$PREFIX-$node" up ;;
    cut)
      [[ $# -eq 3 ]] || die "fault cut A B"
      blackhole replace "$node" "$3"
      blackhole replace "$3" "$node"
      ;;
    heal)
      [[ $# -eq 3 ]] || die "fault heal A B"
      blackhole del "$node" "$3" 2>/dev/null || true
      blackhole del "$3" "$node" 2>/dev/null || true
      ;;
    freeze | thaw)
      pids=$(ip netns pids "$ns")
      [[ -n "$pids" ]] || die "fault $kind: nothing runs in $ns"
      if [[ "$kind" == freeze ]]; then kill -STOP $pids; else kill -CONT $pids; fi
      ;;
    crawl) set_rate "$node" "${3:-64kbit}" 4kb ;;
    uncrawl)
      if [[ -f "$STATE_DIR/rate-$node" ]]; then set_rate "$node" "$(cat "$STATE_DIR/rate-$node")"; else set_rate "$node" off; fi
      ;;
    *) die "unknown fault '$kind'" ;;
  esac
}

[[ $# -ge 1 ]] || { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
command="$1"
shift
case "$command" in
  check) cmd_check ;;
  up) cmd_check; cmd_up "$@" ;;
  down) cmd_down ;;
  down-all) cmd_down_all ;;
  exec) cmd_exec "$@" ;;
  addr) addr_of "$1" ;;
  nodes) bed_namespaces | sed "s/^$PREFIX-//" ;;
  rate) cmd_rate "$@" ;;
  fault) cmd_fault "$@" ;;
  -h | --help | help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$command' (try --help)" ;;
esac
