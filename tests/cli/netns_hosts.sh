# Sourced (POSIX sh): emulated hosts for multi-host tests. Each "host" is a
# network namespace with one interface, eth0, whose peer is attached to a
# bridge inside a "switch" namespace, so hosts talk only over veth links
# and nothing touches the root namespace's network:
#
#   hosts_make N          makes hosts 0..N-1: host i is $(host_ns i), address
#                         10.$net.0.(i+1)/24 ($(host_ip i)); exits 77 (skip) with
#                         the reason when namespaces cannot be made (not root,
#                         no iproute2, no privilege in this container)
#   host_run I CMD...     runs CMD inside host I (environment kept)
#   link_shape I ARGS...  tc netem on host I's eth0 (egress), e.g.
#                         "delay 50ms 10ms loss 1% rate 100mbit"; none = remove
#                         (without sch_netem: the rate alone, see below)
#   link_cut I / link_heal I   takes host I's link down / up
#
# Emulated WAN links (the kernel here has no sch_netem): instead of the
# bridge, a userspace switch (tests/net/wan_switch.c) over the ports, which
# delays, drops and rate-limits every frame crossing it (one crossing = one
# direction of a link, so a ping's RTT is twice the delay):
#
#   hosts_make_wan N WAN_SWITCH [OPTIONS...]   hosts 0..N-1 as hosts_make
#                         makes them (same names, addresses, skips), the
#                         switch started in the background with OPTIONS
#                         (--delay-ms D --jitter-ms J --loss PCT --rate-mbit R
#                         --queue-kb K --seed S --stats FILE), the same
#                         profile on every link; offloads (TSO/GSO/checksum)
#                         are turned off on every veth end first, so that the
#                         switch sees real MTU-sized frames
#   hosts_wan_profile [OPTIONS...]   restarts the switch with new OPTIONS
#                         (frames in flight are lost; --stats of the old run
#                         written); returns when it forwards again
#   hosts_wan_stop        stops the switch (SIGTERM: its --stats FILE written)
#
# Names carry this shell's pid, so tests can run at the same time; an EXIT
# trap set by hosts_make (or hosts_make_wan) stops the switch, deletes the
# namespaces (and calls hosts_cleanup_extra if the sourcing script defines
# it).
net=$(( ($$ % 200) + 20 ))
hosts_n=0

host_ns() { echo "rlp$$h$1"; }
host_ip() { echo "10.$net.0.$(($1 + 1))"; }
host_run() { _h=$1; shift; ip netns exec "$(host_ns "$_h")" "$@"; }

hosts_delete() {
  _i=0
  while [ $_i -lt $hosts_n ]; do
    ip netns pids "$(host_ns $_i)" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$(host_ns $_i)" 2>/dev/null
    _i=$((_i + 1))
  done
  ip netns pids "rlp$$sw" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "rlp$$sw" 2>/dev/null
}

# _hosts_setup N MODE: the namespaces and veth links; MODE bridge puts the
# ports into br0, MODE wan leaves them bare for wan_switch
_hosts_setup() {
  [ "$(id -u)" = 0 ] || { echo "multi-host test: needs root to make network namespaces: skipped"; exit 77; }
  command -v ip >/dev/null 2>&1 || { echo "multi-host test: no ip (iproute2): skipped"; exit 77; }
  if ! ip netns add "rlp$$sw" 2>/dev/null; then
    echo "multi-host test: cannot create a network namespace here (no CAP_SYS_ADMIN?): skipped"; exit 77
  fi
  trap 'hosts_wan_stop; hosts_delete; command -v hosts_cleanup_extra >/dev/null 2>&1 && hosts_cleanup_extra; rm -rf "${out:-/nonexistent}"' EXIT
  if [ "$2" = bridge ]; then
    ip -n "rlp$$sw" link add br0 type bridge || exit 1
    ip -n "rlp$$sw" link set br0 up || exit 1
  else
    # the switch namespace's own IPv6 (router solicitations, MLD) would
    # reach the hosts past the emulation
    ip netns exec "rlp$$sw" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6' 2>/dev/null
  fi
  hosts_n=$1
  _i=0
  while [ $_i -lt "$1" ]; do
    _ns=$(host_ns $_i)
    ip netns add "$_ns" || exit 1
    # created in the switch namespace, one end moved into the host and renamed
    ip -n "rlp$$sw" link add "p$_i" type veth peer name "e$_i" || exit 1
    ip -n "rlp$$sw" link set "e$_i" netns "$_ns" || exit 1
    ip -n "$_ns" link set "e$_i" name eth0 || exit 1
    ip -n "$_ns" addr add "$(host_ip $_i)/24" dev eth0 || exit 1
    ip -n "$_ns" link set eth0 up || exit 1
    ip -n "$_ns" link set lo up || exit 1
    [ "$2" = bridge ] && { ip -n "rlp$$sw" link set "p$_i" master br0 || exit 1; }
    ip -n "rlp$$sw" link set "p$_i" up || exit 1
    _i=$((_i + 1))
  done
}

hosts_make() {
  _hosts_setup "$1" bridge
  # every host reaches every other (the bridge learns in a few ms)
  _i=1
  while [ $_i -lt "$1" ]; do
    host_run 0 ping -c 1 -W 2 "$(host_ip $_i)" >/dev/null 2>&1 ||
      { echo "multi-host test: host 0 cannot reach $(host_ip $_i)"; exit 1; }
    _i=$((_i + 1))
  done
}

# netem where the kernel has it; otherwise (sch_netem is not built into
# every kernel: the project's CI kernel lacks it) only the "rate" part, as a
# token bucket (tbf), and $link_degraded says what was left out.
link_degraded=
link_shape() {
  _h=$1; shift
  ip -n "$(host_ns "$_h")" qdisc del dev eth0 root 2>/dev/null
  [ "$*" = none ] && return 0
  command -v tc >/dev/null 2>&1 || { echo "multi-host test: no tc (iproute2)"; exit 1; }
  # shellcheck disable=SC2086
  ip netns exec "$(host_ns "$_h")" tc qdisc add dev eth0 root netem "$@" 2>/dev/null && return 0
  _rate=$(echo "$*" | sed -n 's/.*rate \([^ ]*\).*/\1/p')
  link_degraded="no sch_netem in this kernel: delay and loss not emulated"
  [ -n "$_rate" ] || return 0
  link_degraded="$link_degraded; rate $_rate as tbf"
  ip netns exec "$(host_ns "$_h")" tc qdisc add dev eth0 root tbf rate "$_rate" burst 64kb latency 400ms ||
    { echo "multi-host test: tc tbf rate $_rate failed"; exit 1; }
}

link_cut() { ip -n "$(host_ns "$1")" link set eth0 down; }
link_heal() { ip -n "$(host_ns "$1")" link set eth0 up; }

# ---- emulated WAN links: wan_switch instead of the bridge -------------------
wan_bin=
wan_pid=
wan_ports=

hosts_make_wan() {
  _n=$1 wan_bin=$2
  shift 2
  [ -x "$wan_bin" ] || { echo "multi-host test: no wan_switch at $wan_bin"; exit 1; }
  _hosts_setup "$_n" wan
  # no TSO/GSO/checksum offload on either end of each link (the SIOCETHTOOL
  # calls of `ethtool -K tx off sg off tso off gso off gro off`, made by
  # wan_switch itself): the kernel segments and checksums in software, so
  # the switch sees, delays and drops real packets
  wan_ports=
  _i=0
  while [ $_i -lt "$_n" ]; do
    ip netns exec "$(host_ns $_i)" "$wan_bin" --offloads-off eth0 || exit 1
    wan_ports="$wan_ports p$_i"
    _i=$((_i + 1))
  done
  # shellcheck disable=SC2086
  ip netns exec "rlp$$sw" "$wan_bin" --offloads-off $wan_ports || exit 1
  hosts_wan_start "$@"
}

# hosts_wan_start [OPTIONS...]: starts the switch, returns once it forwards
hosts_wan_start() {
  _ready=${TMPDIR:-/tmp}/rlp$$wan.ready
  rm -f "$_ready"
  # shellcheck disable=SC2086
  ip netns exec "rlp$$sw" "$wan_bin" --ready "$_ready" "$@" $wan_ports &
  wan_pid=$!
  _t=0
  while [ ! -s "$_ready" ]; do
    kill -0 "$wan_pid" 2>/dev/null || { wan_pid=; echo "multi-host test: wan_switch $* failed to start"; exit 1; }
    _t=$((_t + 1))
    [ $_t -lt 200 ] || { echo "multi-host test: wan_switch did not start in 10 s"; exit 1; }
    sleep 0.05
  done
  rm -f "$_ready"
  # every host reaches every other (retried: the profile may drop pings)
  _i=1
  while [ $_i -lt "$hosts_n" ]; do
    _t=0
    until host_run 0 ping -c 1 -W 3 "$(host_ip $_i)" >/dev/null 2>&1; do
      _t=$((_t + 1))
      [ $_t -lt 15 ] || { echo "multi-host test: host 0 cannot reach $(host_ip $_i) through wan_switch $*"; exit 1; }
    done
    _i=$((_i + 1))
  done
}

hosts_wan_stop() {
  [ -n "$wan_pid" ] || return 0
  kill -TERM "$wan_pid" 2>/dev/null
  wait "$wan_pid" 2>/dev/null
  wan_pid=
}

hosts_wan_profile() {
  hosts_wan_stop
  hosts_wan_start "$@"
}
