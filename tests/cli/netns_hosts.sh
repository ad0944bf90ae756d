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
# Names carry this shell's pid, so tests can run at the same time; an EXIT
# trap set by hosts_make deletes the namespaces (and calls hosts_cleanup_extra
# if the sourcing script defines it).
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
  ip netns del "rlp$$sw" 2>/dev/null
}

hosts_make() {
  [ "$(id -u)" = 0 ] || { echo "multi-host test: needs root to make network namespaces: skipped"; exit 77; }
  command -v ip >/dev/null 2>&1 || { echo "multi-host test: no ip (iproute2): skipped"; exit 77; }
  if ! ip netns add "rlp$$sw" 2>/dev/null; then
    echo "multi-host test: cannot create a network namespace here (no CAP_SYS_ADMIN?): skipped"; exit 77
  fi
  trap 'hosts_delete; command -v hosts_cleanup_extra >/dev/null 2>&1 && hosts_cleanup_extra; rm -rf "${out:-/nonexistent}"' EXIT
  ip -n "rlp$$sw" link add br0 type bridge || exit 1
  ip -n "rlp$$sw" link set br0 up || exit 1
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
    ip -n "rlp$$sw" link set "p$_i" master br0 || exit 1
    ip -n "rlp$$sw" link set "p$_i" up || exit 1
    _i=$((_i + 1))
  done
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
