#!/bin/sh
# The weight relay (RLP_TRANSPORT_RELAY, docs/relay.md) with `rlpost serve`
# processes on stories260K, all on loopback with one bearer token:
# - the origin (`rlpost weights-serve DIR`, no model) serves DIR at
#   GET /v1/rlpost/weights/: the manifest and files byte for byte, Range
#   206 with Content-Range, 416 past the end, 401 without the token, 405
#   for POST, 404 for "..", encoded "..", absolute paths, hidden files,
#   symlinks out of DIR and the generation endpoints;
# - a tree origin -> w0 -> {w1, w2}, w1 -> w3, w2 -> r -> w4, where wN are
#   `rlpost serve --weights-dir MIRROR --weights-from PARENT` and r a
#   relay-only `rlpost weights-serve --weights-from`: relay_publish puts
#   v1 then v2 into the origin's folder; every node reaches v1, then v2
#   (its /health and its log say so), its mirror holds the origin's
#   manifest and files byte for byte and only v1 and v2, w0 serves Range
#   requests too, a worker whose parent is dead gets the versions from its
#   fallback (the origin), and greedy completions of w4 (depth 5) carry
#   weight_version 2 and equal w0's token for token;
# - POST /update_weights_from_disk {"version": 3} to w4 (what `rlpost
#   train`'s HTTP transport sends, with the trainer's path) right after v3
#   is published answers once v3 has come down the tree; a completion with
#   "min_weight_version": 4 sent to w4 before v4 exists is held, and runs
#   on v4 once it is published and relayed;
# - `rlpost train` (async, 3 steps) publishing to a folder served by
#   `rlpost weights-serve`, generating on two relay workers named in
#   rollout.urls: its update requests are answered through the relay, the
#   run trains on groups at most 1 version old, the workers end at v3.
# Usage: check_relay_chain.sh RLPOST RELAY_PUBLISH. Skips (77) without the
# shared data, python3 or curl.
set -u
rlpost=$1
publish=$2
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "curl not found: skipped"; exit 77; }
out=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; for f in "$out"/*.log; do echo "--- $f"; tail -8 "$f"; done; exit 1; }
model=$data
printf 'relay-test-token-1\n' >"$out/token"
chmod 600 "$out/token"
TOKEN=relay-test-token-1
mkdir -p "$out/o"

# start NAME ARGS...: an `rlpost serve` whose URL lands in $out/NAME.url;
# start_ws NAME DIR ARGS...: the same for `rlpost weights-serve DIR`
start() {
  _n=$1; shift
  "$rlpost" serve "$model" --port 0 --threads 1 --token-file "$out/token" "$@" >"$out/$_n.out" 2>"$out/$_n.log" &
  pids="$pids $!"
  listening "$_n"
}
start_ws() {
  _n=$1; shift
  "$rlpost" weights-serve "$@" --port 0 --token-file "$out/token" >"$out/$_n.out" 2>"$out/$_n.log" &
  pids="$pids $!"
  listening "$_n"
}
listening() {
  _n=$1
  _j=0
  while ! grep -q listening "$out/$_n.out" 2>/dev/null && [ $_j -lt 600 ]; do sleep 0.05; _j=$((_j + 1)); done
  python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["listening"])' "$out/$_n.out" \
    >"$out/$_n.url" || fail "$_n did not start"
}
# wait_version V NAMES...: every named server's /health says weight_version V (60 s at most)
wait_version() {
  _v=$1; shift
  for _n in "$@"; do
    _j=0
    while :; do
      _got=$(curl -s "$(cat "$out/$_n.url")/health" -H "Authorization: Bearer $TOKEN" | python3 -c 'import json,sys; print(json.load(sys.stdin)["weight_version"])' 2>/dev/null)
      [ "$_got" = "$_v" ] && break
      _j=$((_j + 1))
      [ $_j -lt 600 ] || fail "$_n is at weight version ${_got:-?}, not $_v"
      sleep 0.1
    done
  done
}

start_ws origin "$out/o"
O=$(cat "$out/origin.url")
W=$O/v1/rlpost/weights
"$publish" "$model" "$out/o" 1 >"$out/pub1.json" 2>"$out/pub.log" || fail "publish v1"

# --- the origin's read-only folder
G() { curl -s -o "$out/body" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$@"; }
[ "$(G "$W/latest.json")" = 200 ] && cmp -s "$out/body" "$out/o/latest.json" || fail "GET latest.json"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$W/latest.json")" = 401 ] || fail "no token: not 401"
f=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["path"] + "/" + max(m["files"], key=lambda f: f["size"])["name"])' "$out/o/latest.json")
size=$(stat -c %s "$out/o/$f")
[ "$(G "$W/$f")" = 200 ] && cmp -s "$out/body" "$out/o/$f" || fail "GET $f"
[ "$(G -D "$out/hdr" -H 'Range: bytes=1000-' "$W/$f")" = 206 ] || fail "Range 1000-: not 206"
grep -qi "^content-range: bytes 1000-$((size - 1))/$size" "$out/hdr" || { cat "$out/hdr"; fail "Content-Range"; }
tail -c +1001 "$out/o/$f" | cmp -s - "$out/body" || fail "Range 1000-: wrong bytes"
[ "$(G -H 'Range: bytes=10-19' "$W/$f")" = 206 ] && [ "$(stat -c %s "$out/body")" = 10 ] || fail "Range 10-19"
[ "$(G -D "$out/hdr" -H "Range: bytes=$size-" "$W/$f")" = 416 ] || fail "Range past the end: not 416"
grep -qi "^content-range: bytes \*/$size" "$out/hdr" || fail "416 without Content-Range"
[ "$(G -X POST "$W/latest.json")" = 405 ] || fail "POST: not 405"
echo secret >"$out/o/.secret"
ln -s /etc "$out/o/v9"
ln -s /etc/hostname "$out/o/${f%%/*}/escape"
for p in ../token %2e%2e/token ..%2Ftoken v1/../latest.json /etc/hostname .secret v9/hostname \
         "${f%%/*}/escape" "${f%%/*}/.hidden" v1 "" x/latest.json; do
  code=$(G --path-as-is "$W/$p")
  [ "$code" = 404 ] || fail "GET weights/$p: $code, not 404"
done
rm -f "$out/o/v9" "$out/o/${f%%/*}/escape" "$out/o/.secret"
[ "$(G -X POST -d '{"prompt": [1], "max_tokens": 1}' "$O/v1/completions")" = 404 ] ||
  fail "weights-serve answered a generation request"

# --- the tree: origin -> w0 -> {w1, w2}, w1 -> w3
start w0 --weights-dir "$out/m0" --weights-from "$O" --weights-poll-s 0.2
start w1 --weights-dir "$out/m1" --weights-from "$(cat "$out/w0.url")" --weights-poll-s 0.2
start w2 --weights-dir "$out/m2" --weights-from "$(cat "$out/w0.url")" --weights-poll-s 0.2
start w3 --weights-dir "$out/m3" --weights-from "$(cat "$out/w1.url")" --weights-poll-s 0.2
start_ws r "$out/mr" --weights-from "$(cat "$out/w2.url")" --weights-poll-s 0.2
start w4 --weights-dir "$out/m4" --weights-from "$(cat "$out/r.url")" --weights-poll-s 0.2
# a dead parent, with the origin as its fallback
start w5 --weights-dir "$out/m5" --weights-from http://127.0.0.1:1 --weights-from "$O" --weights-poll-s 0.2
wait_version 1 w0 w1 w2 w3 r w4 w5
"$publish" "$model" "$out/o" 2 >"$out/pub2.json" 2>>"$out/pub.log" || fail "publish v2"
wait_version 2 w0 w1 w2 w3 r w4 w5
[ "$(G -H 'Range: bytes=1000-' "$(cat "$out/w0.url")/v1/rlpost/weights/v2/${f#*/}")" = 206 ] &&
  tail -c +1001 "$out/o/v2/${f#*/}" | cmp -s - "$out/body" || fail "rlpost serve: Range GET"
for i in 0 1 2 3 r 4 5; do
  cmp -s "$out/o/latest.json" "$out/m$i/latest.json" || fail "w$i: manifest differs from the origin's"
  for g in "$out"/o/v2/*; do cmp -s "$g" "$out/m$i/v2/${g##*/}" || fail "w$i: v2/${g##*/} differs"; done
  [ "$(ls "$out/m$i" | tr '\n' ' ')" = "latest.json v1 v2 " ] || fail "w$i mirror holds: $(ls -a "$out/m$i")"
  grep -q "weight version 2 (mirrored" "$out/w$i.log" 2>/dev/null || grep -q "weight version 2 (mirrored" "$out/$i.log" ||
    fail "w$i log"
done
python3 - "$(cat "$out/w0.url")" "$(cat "$out/w4.url")" "$TOKEN" <<'PY' || fail "completions"
import json, sys, urllib.request
def gen(url):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(
        {"prompt": [1, 403, 407], "max_tokens": 12, "temperature": 0, "return_tokens_as_token_ids": True,
         "logprobs": 0}).encode(), {"Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[3]})
    return json.load(urllib.request.urlopen(req, timeout=30))
a, b = gen(sys.argv[1]), gen(sys.argv[2])
assert a["weight_version"] == 2 and b["weight_version"] == 2, (a, b)
ta, tb = a["choices"][0]["logprobs"]["tokens"], b["choices"][0]["logprobs"]["tokens"]
assert ta == tb and len(ta) > 0, (ta, tb)
PY
# a trainer's HTTP transport telling a follower to load a version (the
# path is the trainer's, not the follower's): it waits for the relay
"$publish" "$model" "$out/o" 3 >"$out/pub3.json" 2>>"$out/pub.log" || fail "publish v3"
[ "$(G -X POST -H 'Content-Type: application/json' -d '{"model_path": "/trainer/only/v3", "version": 3}' \
   "$(cat "$out/w4.url")/update_weights_from_disk")" = 200 ] || { cat "$out/body"; fail "update on a follower"; }
grep -q '"weight_version":3' "$out/body" || { cat "$out/body"; fail "update on a follower: version"; }
# a generation request for weights newer than the follower holds
# ("min_weight_version", what a trainer's remote engine sends under
# rlp_synchronizer_pull_at_least) is held until they come down the tree;
# one for weights it holds is answered at once
H() { curl -s -o "$1" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [1, 403], \"max_tokens\": 4, \"min_weight_version\": $2}" "$(cat "$out/w4.url")/v1/completions"; }
[ "$(H "$out/now.body" 3)" = 200 ] && grep -q '"weight_version":3' "$out/now.body" || fail "min_weight_version 3"
( H "$out/held.body" 4 >"$out/held.code" ) &
held=$!
sleep 1
[ ! -s "$out/held.code" ] || fail "a request for version 4 was answered before version 4 existed"
"$publish" "$model" "$out/o" 4 >"$out/pub4.json" 2>>"$out/pub.log" || fail "publish v4"
wait $held
[ "$(cat "$out/held.code")" = 200 ] && grep -q '"weight_version":4' "$out/held.body" ||
  { cat "$out/held.body"; fail "a held request did not run on version 4"; }
[ "$(H "$out/bad.body" -1)" = 400 ] || fail "min_weight_version -1: not 400"

# --- `rlpost train` (async, η = 1, 3 steps) publishing to a folder that
# `rlpost weights-serve` serves, generating on two relay workers (t0 from
# the origin, t1 from t0) named in rollout.urls: every update request is
# answered through the relay, and the run trains on fresh enough groups
mkdir -p "$out/t/weights"
python3 "$(dirname "$0")/train_fixture.py" "$out/t" >/dev/null || fail "train fixture"
start_ws torigin "$out/t/weights"
start t0 --weights-dir "$out/t/m0" --weights-from "$(cat "$out/torigin.url")" --weights-poll-s 0.2
start t1 --weights-dir "$out/t/m1" --weights-from "$(cat "$out/t0.url")" --weights-poll-s 0.2
RLPOST_SERVE_TOKEN=$TOKEN "$rlpost" train "$out/t/config.json" --set "model=\"$model\"" \
  --set "rollout.urls=[\"$(cat "$out/t0.url")\", \"$(cat "$out/t1.url")\"]" \
  --set "sync.weights_dir=\"$out/t/weights\"" --set "output=\"$out/t/run\"" --set 'sync.mode="async"' \
  --set sync.staleness=1 --set steps=3 --set eval.n=0 >"$out/t/train.json" 2>"$out/train.log" || fail "rlpost train"
python3 - "$out/t/run/metrics.jsonl" <<'PY' || fail "train metrics"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["policy_version"] for r in recs] == [1, 2, 3], recs
assert all(r["staleness_max"] <= 1 and r["reward_valid"] == 16 for r in recs), recs
PY
wait_version 3 t0 t1
grep -q "through the relay" "$out/t1.log" || fail "t1: no update request answered through the relay"
cmp -s "$out/t/weights/latest.json" "$out/t/m1/latest.json" || fail "t1: manifest differs from the trainer's"
echo ok
