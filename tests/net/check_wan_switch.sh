#!/bin/sh
# The userspace WAN switch (tests/net/wan_switch.c) between 3 emulated hosts
# (network namespaces, tests/cli/netns_hosts.sh hosts_make_wan), each
# profile measured from the hosts, with python3 sockets for the transfers
# (tests/net/wan_xfer.py, every byte checked):
# - --delay-ms 50: ping RTT 95..130 ms (50 ms per crossing, two crossings);
# - --delay-ms 50 --jitter-ms 10: RTTs spread, within 75..150 ms;
# - --loss 20: of 200 pings 20..50 % lost (two crossings: ~36 %), and the
#   switch's own counters near 20 % per crossing;
# - --rate-mbit 20: 20 MB over TCP in 8..12 s (8.4 s at the wire rate);
# - --delay-ms 50 --loss 1: a 4 MB transfer arrives intact;
# - link_cut of the receiver for 3 s in the middle of a transfer (10 ms,
#   20 Mbit/s): the transfer completes, intact, after link_heal;
# - no frame reached the switch with TSO/GSO or a partial checksum (the
#   offloads are off) and none was lost by a socket.
# Skips (77) without root/namespaces, ping or python3.
# Usage: check_wan_switch.sh WAN_SWITCH
set -u
wan=$1
here=$(cd "$(dirname "$0")" && pwd)
xfer_py=$here/wan_xfer.py
[ "$(id -u)" = 0 ] || { echo "multi-host test: needs root to make network namespaces: skipped"; exit 77; }
command -v ping >/dev/null 2>&1 || { echo "no ping (iputils-ping): skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "no python3: skipped"; exit 77; }
. "$here/../cli/netns_hosts.sh"
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
t_start=$(date +%s)

# ping_stats FROM TO ARGS...: a ping run; sets $p_loss (%) and the RTT
# $p_min $p_avg $p_max $p_mdev (ms; -1 when no reply came)
ping_stats() {
  _f=$1 _t=$2
  shift 2
  host_run "$_f" ping -q "$@" "$(host_ip "$_t")" >"$out/ping.txt" 2>&1
  p_loss=$(sed -n 's/.* \([0-9.]*\)% packet loss.*/\1/p' "$out/ping.txt")
  [ -n "$p_loss" ] || { cat "$out/ping.txt"; fail "ping from host $_f to host $_t: no summary"; }
  _rtt=$(sed -n 's|^rtt [^=]*= \([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\)/\([0-9.]*\) ms.*|\1 \2 \3 \4|p' "$out/ping.txt")
  # shellcheck disable=SC2086
  set -- ${_rtt:--1 -1 -1 -1}
  p_min=$1 p_avg=$2 p_max=$3 p_mdev=$4
}
# in_range VALUE LO HI
in_range() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }

# xfer_start FROM TO BYTES: a transfer in the background ($xfer_rpid,
# $xfer_spid); xfer_wait NAME: waits, checks, sets $xfer_seconds
xport=5000
xfer_start() {
  xport=$((xport + 1))
  rm -f "$out/ready"
  host_run "$2" python3 "$xfer_py" recv "$(host_ip "$2")" $xport "$3" "$out/ready" >"$out/recv.json" 2>"$out/recv.err" &
  xfer_rpid=$!
  _t=0
  while [ ! -s "$out/ready" ]; do
    kill -0 $xfer_rpid 2>/dev/null || { cat "$out/recv.err"; fail "receiver on host $2 did not start"; }
    _t=$((_t + 1))
    [ $_t -lt 200 ] || fail "receiver on host $2 not listening after 10 s"
    sleep 0.05
  done
  host_run "$1" python3 "$xfer_py" send "$(host_ip "$2")" $xport "$3" 2>"$out/send.err" &
  xfer_spid=$!
}
xfer_wait() {
  wait $xfer_spid || { cat "$out/send.err"; fail "$1: sender failed"; }
  wait $xfer_rpid || { cat "$out/recv.json" "$out/recv.err"; fail "$1: receiver failed (bytes checked)"; }
  xfer_seconds=$(sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p' "$out/recv.json")
  echo "$1: $(cat "$out/recv.json")"
}

# stats_check FILE [LOSSFILE]: the switch's counters of a profile (printed):
# no frame with TSO/GSO or a partial checksum (offloads off), none lost by a
# socket; the loss rate per crossing it counted goes to LOSSFILE
stats_check() {
  python3 - "$1" "${2:-/dev/null}" <<'PY' || fail "switch counters in $1: $(cat "$1")"
import json, os, sys
s = json.load(open(sys.argv[1]))
tot = {k: sum(p[k] for p in s["ports"]) for k in s["ports"][0] if k != "name"}
pct = 100.0 * tot["dropped_loss"] / max(1, tot["frames_out"] + tot["dropped_loss"])
print("  switch (%s): %d frames out, %d lost (%.1f %%), %d queue drops, %d send errors" % (
    os.path.basename(sys.argv[1])[:-5], tot["frames_out"], tot["dropped_loss"], pct, tot["dropped_queue"],
    tot["tx_errors"]))
bad = [(p["name"], k) for p in s["ports"] for k in ("offload_frames", "socket_drops", "rx_errors") if p[k]]
if bad:
    print("nonzero:", bad)
    sys.exit(1)
open(sys.argv[2], "w").write("%.1f\n" % pct)
PY
}

# ---- delay -----------------------------------------------------------------
hosts_make_wan 3 "$wan" --delay-ms 50 --stats "$out/delay.json"
# the first packets of a pair wait for ARP (one more round trip): warm up
host_run 0 ping -c 1 -W 2 "$(host_ip 1)" >/dev/null
host_run 1 ping -c 1 -W 2 "$(host_ip 2)" >/dev/null
ping_stats 0 1 -c 5 -i 0.2 -W 2
echo "delay 50 ms: host 0 -> 1 RTT min/avg/max $p_min/$p_avg/$p_max ms, loss $p_loss %"
[ "$p_loss" = 0 ] || fail "delay 50 ms: $p_loss % of pings lost without --loss"
in_range "$p_min" 95 130 && in_range "$p_avg" 95 130 || fail "delay 50 ms: RTT min/avg $p_min/$p_avg ms, not within 95..130"
ping_stats 1 2 -c 5 -i 0.2 -W 2
echo "delay 50 ms: host 1 -> 2 RTT min/avg/max $p_min/$p_avg/$p_max ms"
in_range "$p_min" 95 130 && in_range "$p_avg" 95 130 ||
  fail "delay 50 ms (1 -> 2): RTT min/avg $p_min/$p_avg ms, not within 95..130"

# ---- jitter ----------------------------------------------------------------
hosts_wan_profile --delay-ms 50 --jitter-ms 10 --seed 3 --stats "$out/jitter.json"
ping_stats 0 2 -c 20 -i 0.05 -W 2
echo "delay 50 ms, jitter 10 ms: RTT min/avg/max/mdev $p_min/$p_avg/$p_max/$p_mdev ms"
in_range "$p_min" 75 150 && in_range "$p_max" 75 150 || fail "jitter: RTT min/max $p_min/$p_max ms, not within 75..150"
awk -v a="$p_min" -v b="$p_max" 'BEGIN { exit !(b - a >= 5) }' || fail "jitter 10 ms: RTTs $p_min..$p_max ms hardly spread"

# ---- loss ------------------------------------------------------------------
hosts_wan_profile --loss 20 --seed 7 --stats "$out/loss.json"
ping_stats 0 1 -c 200 -i 0.01 -W 1
echo "loss 20 %: $p_loss % of 200 pings lost (expected about 36 %)"
in_range "$p_loss" 20 50 || fail "loss 20 %: $p_loss % of the pings lost, not within 20..50"
hosts_wan_stop
stats_check "$out/loss.json" "$out/loss.pct"
per=$(cat "$out/loss.pct")
echo "loss 20 %: the switch dropped $per % of the frames it forwarded"
in_range "$per" 12 28 || fail "loss 20 %: the switch dropped $per % of its frames"

# ---- rate ------------------------------------------------------------------
hosts_wan_start --rate-mbit 20 --stats "$out/rate.json"
xfer_start 0 1 20000000
xfer_wait "rate 20 Mbit/s, 20 MB"
in_range "$xfer_seconds" 8 12 || fail "rate 20 Mbit/s: 20 MB took $xfer_seconds s, not 8..12"

# ---- delay and loss ----------------------------------------------------------
hosts_wan_profile --delay-ms 50 --loss 1 --seed 11 --stats "$out/lossy.json"
xfer_start 1 2 4000000
xfer_wait "delay 50 ms, loss 1 %, 4 MB"

# ---- a link cut in the middle of a transfer ----------------------------------
hosts_wan_profile --delay-ms 10 --rate-mbit 20 --stats "$out/cut.json"
xfer_start 0 1 8000000
_t=0
until grep -q accepted "$out/ready"; do
  _t=$((_t + 1))
  [ $_t -lt 200 ] || fail "link cut: no connection after 10 s"
  sleep 0.05
done
sleep 0.5
link_cut 1
sleep 3
kill -0 $xfer_rpid 2>/dev/null || { cat "$out/recv.json" "$out/recv.err"; fail "link cut: the transfer ended while host 1 was cut off"; }
link_heal 1
xfer_wait "link cut 3 s, 8 MB"
in_range "$xfer_seconds" 3.5 60 || fail "link cut: the transfer took $xfer_seconds s, less than the cut"
hosts_wan_stop

for f in delay jitter rate lossy cut; do
  stats_check "$out/$f.json"
done
echo "check_wan_switch: all passed in $(($(date +%s) - t_start)) s"
