#!/bin/sh
# Benchmark of the weight relay (RLP_TRANSPORT_RELAY, docs/relay.md): the
# wall time from the origin's publish of a version until all N rollout
# workers hold it, with every worker fetching from the origin (the star
# that the trainer alone pays for today) against a relay tree of fan-out 2
# (workers 1 and 2 fetch from the origin, worker i > 2 from worker
# (i-1)/2) and a chain (worker i from worker i-1), in the same run on the
# same emulated network.
#
# Hosts are network namespaces (tests/cli/netns_hosts.sh): the origin
# (`rlpost weights-serve O`, no model) on host 0, worker i (`rlpost serve
# --weights-dir Mi --weights-from PARENT`) on host i+1, every host's egress
# capped at RATE (tbf). The payload is a stories260K version folder
# published by relay_publish (the FILE transport) plus pad.bin of PAD_MB
# random bytes, written into the folder before its manifest (the same
# layout and checksums, per file and per chunk, that the FILE transport
# writes), so that the transfer,
# not the 2-core machine's model loading, is what is measured. Each
# topology first distributes v1 (warm-up, workers started), then v2 is
# published and timed: publish time from the publisher, arrival time from
# each worker's log line "weight version 2 (... unix T)".
#
# Needs root (namespaces) and a build with libmicrohttpd and libcurl.
# Usage (from the source root, as root):
#   tests/bench/bench_relay.sh [BUILD_DIR] [--workers 8] [--rate 200mbit] [--pad-mb 64]
# Prints one line per topology and a JSON summary with the ratios
# star/tree and star/chain.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
case ${1:-} in --*|"") ;; *) build=$1; shift ;; esac
n=8
rate=200mbit
pad=64
while [ $# -gt 0 ]; do
  case $1 in
    --workers) n=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --pad-mb) pad=$2; shift 2 ;;
    *) echo "usage: $0 [BUILD_DIR] [--workers N] [--rate R] [--pad-mb MB]"; exit 2 ;;
  esac
done
rlpost=$build/examples/rlpost/rlpost
publish=$build/tests/relay_publish
model=${RLPOST_SHARED_DATA:-$root/../shared/data}/llama2c/stories260K.bin
[ -x "$rlpost" ] && [ -x "$publish" ] || { echo "bench_relay: build $rlpost and $publish first"; exit 77; }
[ -f "$model" ] || { echo "bench_relay: no $model"; exit 77; }
. "$root/tests/cli/netns_hosts.sh"
out=$(mktemp -d)
hosts_make $((n + 1))
trap 'exit 1' INT TERM # the EXIT trap of hosts_make then removes the hosts and their processes
i=0
while [ $i -le "$n" ]; do link_shape $i rate "$rate"; i=$((i + 1)); done
[ -n "$link_degraded" ] && echo "# $link_degraded"
printf 'bench-relay-token\n' >"$out/token"
chmod 600 "$out/token"
port=8100

# publish_pad V DIR: relay_publish's version V plus pad.bin, then the manifest
publish_pad() {
  rm -rf "$out/stage"
  "$publish" "$model" "$out/stage" "$1" >/dev/null || { echo "relay_publish failed"; exit 1; }
  python3 - "$out/stage" "$2" "$1" "$pad" <<'PY'
import json, os, sys, time, zlib
stage, dest, v, pad = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = json.load(open(stage + "/latest.json"))
src = stage + "/" + m["path"]
tmp = dest + "/.v%d.tmp.bench" % v
os.makedirs(tmp)
for f in m["files"]:
    os.rename(src + "/" + f["name"], tmp + "/" + f["name"])
data = os.urandom(pad << 20)
with open(tmp + "/pad.bin", "wb") as f:
    f.write(data)
    os.fsync(f.fileno())
entry = {"name": "pad.bin", "size": len(data), "crc32": "%08x" % (zlib.crc32(data) & 0xffffffff)}
cs = m.get("chunk_size")
if cs:  # manifest version 2: a CRC-32 per chunk, as the FILE transport writes them
    entry["chunks"] = ["%08x" % (zlib.crc32(data[i:i + cs]) & 0xffffffff) for i in range(0, len(data), cs)]
m["files"].append(entry)
m["files"].sort(key=lambda f: f["name"])
os.rename(tmp, dest + "/" + m["path"])
with open(dest + "/latest.json.tmp", "w") as f:
    json.dump(m, f)
    f.flush()
    os.fsync(f.fileno())
os.rename(dest + "/latest.json.tmp", dest + "/latest.json")
print("%.3f" % time.time())
PY
}

# wait_all V: until every worker's log says weight version V; prints the latest arrival (unix s)
wait_all() {
  _j=0
  while :; do
    _c=0
    for _i in $(seq 1 "$n"); do grep -q "weight version $1 (" "$out/w$_i.log" 2>/dev/null && _c=$((_c + 1)); done
    [ $_c -eq "$n" ] && break
    _j=$((_j + 1))
    [ $_j -lt 6000 ] || { echo "bench_relay: timeout waiting for version $1 ($_c of $n)"; tail -3 "$out"/w*.log; exit 1; }
    sleep 0.1
  done
  for _i in $(seq 1 "$n"); do
    sed -n "s/.*weight version $1 (.*unix \([0-9.]*\)).*/\1/p" "$out/w$_i.log"
  done | sort -n | tail -1
}

# run TOPOLOGY: star or tree; prints seconds from the v2 publish to the last arrival
run() {
  rm -rf "$out/o" "$out"/m* "$out"/w*.log
  mkdir -p "$out/o"
  publish_pad 1 "$out/o" >/dev/null
  host_run 0 "$rlpost" weights-serve "$out/o" --host "$(host_ip 0)" --port $port --token-file "$out/token" \
    >/dev/null 2>"$out/origin.log" &
  sleep 1
  for i in $(seq 1 "$n"); do
    case $1 in
      star) parent=0 ;;
      tree) if [ $i -le 2 ]; then parent=0; else parent=$(((i - 1) / 2)); fi ;;
      chain) parent=$((i - 1)) ;;
    esac
    host_run $i "$rlpost" serve "$model" --host "$(host_ip $i)" --port $port --threads 1 --token-file "$out/token" \
      --weights-dir "$out/m$i" --weights-from "http://$(host_ip $parent):$port" --weights-poll-s 0.2 \
      >/dev/null 2>"$out/w$i.log" &
  done
  wait_all 1 >/dev/null
  t0=$(publish_pad 2 "$out/o")
  t1=$(wait_all 2)
  for i in $(seq 0 "$n"); do ip netns pids "$(host_ns $i)" 2>/dev/null | xargs -r kill 2>/dev/null; done
  sleep 1
  python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1"
}

star=$(run star)
echo "star  (every worker from the origin): $star s for $n workers, ${pad} MiB + stories260K each, egress $rate"
tree=$(run tree)
echo "tree  (fan-out 2, workers relay):     $tree s"
chain=$(run chain)
echo "chain (each worker from the previous): $chain s"
python3 - "$star" "$tree" "$chain" "$n" "$rate" "$pad" "${link_degraded:-}" <<'PY'
import json, sys
star, tree, chain = map(float, sys.argv[1:4])
print(json.dumps({"workers": int(sys.argv[4]), "egress": sys.argv[5], "payload_mib": int(sys.argv[6]),
                  "star_s": star, "tree_s": tree, "chain_s": chain, "star_over_tree": round(star / tree, 2),
                  "star_over_chain": round(star / chain, 2), "note": sys.argv[7] or None}))
PY
